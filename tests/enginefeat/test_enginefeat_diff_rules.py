"""`vramctl diff` names the vLLM 0.30 → 0.33 feature rules that moved, and only when the plan uses the feature."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramctl.core.engines.version_rules import RuleContext, changed_rules
from vramctl.registry import load_gpu

QWEN3_8B_YARN = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}


def _keys(before: str, after: str, features: frozenset[str], defaults: frozenset[str] = frozenset()) -> set[str]:
    ctx = RuleContext(gpu=load_gpu("h100-sxm"), features=features, defaults_used=defaults)
    return {change.key for change in changed_rules("vllm", before, after, ctx)}


def test_feature_rules_are_silent_without_the_feature() -> None:
    keys = _keys("0.26.0", "0.33.0", frozenset())
    assert not keys & {"external-weights", "sleep-mode", "kv-offload-host", "kv-cache-memory-suggestion",
                       "yarn-max-model-len"}


def test_each_feature_rule_changes_where_the_source_does() -> None:
    assert "external-weights" in _keys("0.31.0", "0.32.0", frozenset({"ipc_cache"}))
    assert "external-weights" not in _keys("0.31.0", "0.32.0", frozenset({"ipc_cache", "ipc_cache_copy"}))
    assert "sleep-mode" in _keys("0.30.0", "0.31.0", frozenset({"sleep"}))
    assert "kv-offload-host" in _keys("0.26.0", "0.28.0", frozenset({"kv_offload"}))
    assert "kv-offload-host" not in _keys("0.30.0", "0.33.0", frozenset({"kv_offload"}))
    assert "kv-cache-memory-suggestion" in _keys("0.26.0", "0.28.0", frozenset({"kv_cache_memory_suggestion"}))
    assert "kv-cache-memory-suggestion" not in _keys("0.28.0", "0.33.0", frozenset({"kv_cache_memory_suggestion"}))
    yarn = frozenset({"yarn"})
    assert "yarn-max-model-len" in _keys("0.29.0", "0.30.0", yarn, frozenset({"max_model_len"}))
    assert "yarn-max-model-len" not in _keys("0.29.0", "0.30.0", yarn)  # --max-model-len given on both sides


def test_cli_diff_explains_the_yarn_change(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B_YARN))
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "diff", "--from", "0.29.0", "--to", "0.33.0", "--json", "--", "vllm",
         "serve", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    text = json.dumps(data)
    assert "yarn-max-model-len" in text and "131072" in text and "40960" in text
