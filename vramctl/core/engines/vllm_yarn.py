"""vLLM 0.30's change to the derived `max_model_len` of yarn-family RoPE configs.

`_get_and_verify_max_len` (vllm/config/model.py) takes the smallest length key of config.json, then scales it by the
RoPE `factor`:

- vLLM ≤ 0.29 (`vllm/config/model.py:2452-2469`, vLLM 0.29.0): every rope_type except su / longrope / llama3 is
  scaled, and `yarn` replaces the length by `original_max_position_embeddings` first, so a yarn config derives
  original_max_position_embeddings × factor (Qwen3-8B with Qwen's yarn snippet: 32,768 × 4 = 131,072, above its
  max_position_embeddings 40,960). `deepseek_yarn` / `deepseek_llama_scaling` multiply the length itself.
- vLLM ≥ 0.30 (`vllm/config/model.py:2468-2492`, vLLM 0.30.0; `:2610-2634`, vLLM 0.33.0): "YaRN variants leave
  max_position_embeddings already scaled, as Transformers' _compute_yarn_parameters assumes": `yarn`,
  `deepseek_yarn` and `deepseek_llama_scaling` are not scaled at all, so the derived length is the config's own
  (40,960 for the same Qwen3 config). A longer `--max-model-len` is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.

The registry records the ≥ 0.30 length in `ModelSpec.vllm_unscaled_yarn_len` when it differs from the ≤ 0.29 one
(`vllm_max_model_len`); `model_for_version` gives the model as a vLLM version derives it. SGLang is unaffected
(`get_context_length` keeps max_position_embeddings for yarn).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.specs import ModelSpec

UNSCALED_ROPE_TYPES = ("yarn", "deepseek_yarn", "deepseek_llama_scaling")
CITATION = (
    "vllm/config/model.py _get_and_verify_max_len (0.29.0: lines 2452-2469, yarn = original × factor; "
    "0.30.0: lines 2468-2492, yarn / deepseek_yarn / deepseek_llama_scaling unscaled)"
)


def rope_type_of(config: Mapping[str, Any]) -> str | None:
    """The `rope_type` (or legacy `type`) of `rope_scaling` / `rope_parameters`; None without one."""
    rope = config.get("rope_scaling")
    if rope is None:
        rope = config.get("rope_parameters")
    if not isinstance(rope, Mapping):
        return None
    kind = rope.get("rope_type", rope.get("type", "default"))
    return kind if isinstance(kind, str) else None


def unscaled_yarn_len(config: Mapping[str, Any], model_type: str, length: int, old_len: int) -> int | None:
    """vLLM ≥ 0.30's derived length for a yarn-family config (`length`: the smallest length key, before any
    RoPE scaling), or None when it equals `old_len` (≤ 0.29's derived length) or the config is not yarn-family.
    Gemma-3 is never scaled (both versions skip it)."""
    if "gemma3" in model_type or rope_type_of(config) not in UNSCALED_ROPE_TYPES:
        return None
    return None if length == old_len else length


def uses_unscaled_len(version: str) -> bool:
    return rules_for(version).yarn_unscaled_max_len


def derived_max_model_len(model: ModelSpec, version: str) -> int:
    """The max_model_len vLLM `version` derives for `model` (its default and its limit)."""
    if model.vllm_unscaled_yarn_len is not None and uses_unscaled_len(version):
        return model.vllm_unscaled_yarn_len
    return model.vllm_max_model_len


def model_for_version(model: ModelSpec, version: str) -> ModelSpec:
    """The model as vLLM `version` derives its length: unchanged up to 0.29 and for non-yarn configs."""
    length = derived_max_model_len(model, version)
    if length == model.vllm_max_model_len:
        return model
    if length >= model.max_position_embeddings:
        return replace(
            model, vllm_max_position_embeddings=length if length > model.max_position_embeddings else None
        )
    return replace(model, max_position_embeddings=length, vllm_max_position_embeddings=None)


def note(model: ModelSpec, version: str) -> str | None:
    """One sentence for the plan when the version's rule changes this model's derived length."""
    if model.vllm_unscaled_yarn_len is None:
        return None
    old, new = model.vllm_max_model_len, model.vllm_unscaled_yarn_len
    if uses_unscaled_len(version):
        return (
            f"vLLM {version} derives max_model_len {new:,} from this yarn config (unscaled since 0.30: "
            f"`vllm/config/model.py` _get_and_verify_max_len, vLLM 0.30.0); vLLM ≤ 0.29 derived {old:,} "
            "(original_max_position_embeddings × factor). A longer --max-model-len needs "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, or set max_position_embeddings in --hf-overrides."
        )
    return (
        f"vLLM {version} derives max_model_len {old:,} from this yarn config (original_max_position_embeddings × "
        f"factor, `vllm/config/model.py`, vLLM 0.29.0); from 0.30 vLLM keeps {new:,} (yarn unscaled)."
    )
