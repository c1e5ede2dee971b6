"""vLLM `--data-parallel-size` and `--enable-expert-parallel`: whole experts over TP × DP ranks, DP replicas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl import registry
from vramctl.cli.main import main
from vramctl.core.params import rank_weight_bytes
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings

QWEN_MOE = "Qwen/Qwen3-30B-A3B"  # 48 layers, 128 experts of 3 × 2048 × 768 bf16 weights
EXPERT_BYTES = 3 * 2048 * 768 * 2


def test_ep_equal_to_tp_holds_the_same_bytes_as_tp_splitting_every_expert() -> None:
    model = registry.load_model(QWEN_MOE)
    assert rank_weight_bytes(model, 4, ep=4) == rank_weight_bytes(model, 4)


def test_ep_over_tp_times_dp_holds_fewer_experts_per_rank() -> None:
    model = registry.load_model(QWEN_MOE)
    tp_only = rank_weight_bytes(model, 4, pad_vocab=True).total
    ep8 = rank_weight_bytes(model, 4, pad_vocab=True, ep=8).total
    assert tp_only - ep8 == 48 * (32 - 16) * EXPERT_BYTES


def test_ep_that_does_not_divide_the_experts_takes_the_ceiling() -> None:
    model = registry.load_model(QWEN_MOE)
    one = rank_weight_bytes(model, 2, pad_vocab=True, ep=1).total
    six = rank_weight_bytes(model, 2, pad_vocab=True, ep=6).total
    assert one - six == 48 * (64 - 22) * EXPERT_BYTES  # ceil(128 / 6) = 22 experts on the largest rank


def test_serve_command_flags() -> None:
    s = parse_serve_command(f"vllm serve {QWEN_MOE} -tp 4 -dp 2 --enable-expert-parallel").apply(
        ServeSettings()
    )
    assert (s.tensor_parallel_size, s.data_parallel_size, s.enable_expert_parallel) == (4, 2, True)
    s = parse_serve_command(f"vllm serve {QWEN_MOE} --data-parallel-size=3 -ep").apply(ServeSettings())
    assert (s.data_parallel_size, s.enable_expert_parallel) == (3, True)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert main(["plan", "--json", "--gpu", "h100-sxm", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_plan_with_dp_and_ep(capsys: pytest.CaptureFixture[str]) -> None:
    base = _plan(capsys, QWEN_MOE, "-tp", "4")
    ep = _plan(capsys, QWEN_MOE, "-tp", "4", "-dp", "2", "--enable-expert-parallel")
    assert ep["settings"]["data_parallel_size"] == 2 and ep["settings"]["expert_parallel_size"] == 8
    assert base["settings"]["expert_parallel_size"] == 1
    saved = base["terms"]["weights"]["bytes"] - ep["terms"]["weights"]["bytes"]
    assert saved == 48 * 16 * EXPERT_BYTES
    assert ep["kv_cache_bytes"] - base["kv_cache_bytes"] == saved
    notes = " ".join(ep["explanations"])
    assert "128 routed experts are spread whole over 8 ranks (TP 4 × DP 2), up to 16 per rank" in notes
    assert f"{2 * ep['kv_tokens']:,} KV tokens" in notes and "on 8 GPUs" in notes


def test_dp_without_ep_replicates_the_whole_model(capsys: pytest.CaptureFixture[str]) -> None:
    base = _plan(capsys, QWEN_MOE, "-tp", "2")
    dp = _plan(capsys, QWEN_MOE, "-tp", "2", "--data-parallel-size", "4")
    assert dp["terms"] == base["terms"] and dp["settings"]["expert_parallel_size"] == 1
    assert any("--data-parallel-size 4: 4 engine replicas" in n for n in dp["explanations"])


def test_ep_on_a_dense_model_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    base = _plan(capsys, "meta-llama/Meta-Llama-3-8B-Instruct", "-tp", "2")
    ep = _plan(capsys, "meta-llama/Meta-Llama-3-8B-Instruct", "-tp", "2", "-ep")
    assert ep["terms"] == base["terms"] and ep["settings"]["expert_parallel_size"] == 1


def test_bad_dp_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", QWEN_MOE, "-dp", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data-parallel-size" in err[0]


def test_check_spec_takes_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        f"model: {QWEN_MOE}\ngpu: h100-sxm\nengine: vllm\nflags:\n  tensor-parallel-size: 4\n"
        "  data-parallel-size: 2\n  enable-expert-parallel: true\nrequirements:\n  must_fit: true\n"
    )
    assert main(["check", str(spec), "--json"]) == 0
    (engine,) = json.loads(capsys.readouterr().out)["engines"]
    model = registry.load_model(QWEN_MOE)
    # the checkpoint's bytes on the rank + the rotary embeddings' cos/sin cache (bf16) every rank holds
    rope = model.rope_cache_elements * 2
    assert engine["weights_bytes"] == rank_weight_bytes(model, 4, pad_vocab=True, ep=8).total + rope
