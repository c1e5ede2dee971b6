"""`--quantization` as the engines apply it: online FP8 / bitsandbytes shrink an unquantised checkpoint, a flag that
disagrees with the checkpoint's own method stops the start-up (vramctl.core.quantization)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl import registry
from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.quantization import apply_quantization_flag
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings

LLAMA = "meta-llama/Meta-Llama-3-8B-Instruct"


def _llama3_8b_online_fp8_bytes() -> int:
    """By hand, from the config: Linear weights 1 byte + a float32 scale per output row; the rest bf16."""
    hidden, inter, layers, vocab, kv = 4096, 14336, 32, 128256, 1024
    rows_cols = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden)]  # q, k, v, o
    rows_cols += [(inter, hidden), (inter, hidden), (hidden, inter)]  # gate, up, down
    linear = layers * sum(r * c + 4 * r for r, c in rows_cols)
    embeddings = 2 * vocab * hidden * 2  # embed_tokens and an untied lm_head, bf16
    norms = (2 * layers + 1) * hidden * 2
    return linear + embeddings + norms


def test_online_fp8_halves_the_linear_weights_only() -> None:
    model = registry.load_model(LLAMA)
    served = apply_quantization_flag(model, "fp8")
    assert served.model.quantization == "fp8" and served.model.quant_bits == 8
    assert served.model.weight_bytes == _llama3_8b_online_fp8_bytes() == 9_086_705_664  # 8.46 GiB
    assert model.weight_bytes == 16_060_522_496  # the checkpoint itself is unchanged
    assert served.note is not None
    assert "14.96 GiB → 8.46 GiB" in served.note and "embeddings, lm_head" in served.note


def test_online_fp8_matches_the_published_fp8_checkpoint_of_the_same_model() -> None:
    """Qwen3-30B-A3B-FP8 (block FP8, its routers left in bf16) vs online FP8 of Qwen3-30B-A3B: within 0.5 %."""
    online = apply_quantization_flag(registry.load_model("Qwen/Qwen3-30B-A3B"), "FP8").model.weight_bytes
    published = registry.load_model("Qwen/Qwen3-30B-A3B-FP8").weight_bytes
    assert abs(online - published) / published < 0.005


def test_bitsandbytes_is_four_bits_plus_absmax() -> None:
    model = registry.load_model(LLAMA)
    served = apply_quantization_flag(model, "bitsandbytes").model
    # linear: 4 bits + float32 absmax per 64 values = 0.5625 bytes per weight
    linear_weights = 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096)
    assert served.weight_bytes == linear_weights * 9 // 16 + 2 * 128256 * 4096 * 2 + 65 * 4096 * 2
    with pytest.raises(BadInputError, match="SGLang loads bitsandbytes checkpoints only"):
        apply_quantization_flag(model, "bitsandbytes", engine="sglang")


@pytest.mark.parametrize(
    ("model", "flag"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct-AWQ", "awq"),
        ("Qwen/Qwen2.5-0.5B-Instruct-AWQ", "awq_marlin"),
        ("Qwen/Qwen3-30B-A3B-FP8", "fp8"),
        (LLAMA, ""),
    ],
)
def test_a_flag_the_checkpoint_agrees_with_changes_nothing(model: str, flag: str) -> None:
    spec = registry.load_model(model)
    served = apply_quantization_flag(spec, flag)
    assert served.model == spec and served.note is None


def test_a_flag_that_disagrees_with_the_checkpoint_stops_the_start_up() -> None:
    with pytest.raises(BadInputError) as err:
        apply_quantization_flag(registry.load_model("Qwen/Qwen3-30B-A3B-FP8"), "awq")
    text = str(err.value)
    assert text.startswith(
        "--quantization awq: the checkpoint of Qwen/Qwen3-30B-A3B-FP8 is quantised with fp8"
    )
    assert "Quantization method specified in the model config (fp8) does not match" in text
    assert text.endswith("drop --quantization or pass --quantization fp8")


def test_a_checkpoint_method_on_an_unquantised_checkpoint_is_refused() -> None:
    with pytest.raises(BadInputError, match=r"needs a checkpoint quantised with it; .* bitsandbytes, fp8"):
        apply_quantization_flag(registry.load_model(LLAMA), "gptq")


def test_serve_commands_carry_the_flag_for_both_engines() -> None:
    vllm = parse_serve_command(f"vllm serve {LLAMA} -q fp8")
    assert vllm.apply(ServeSettings()).quantization == "fp8" and vllm.notes == ()
    sglang = parse_serve_command(f"python -m sglang.launch_server --model-path {LLAMA} --quantization fp8")
    assert sglang.apply(ServeSettings()).quantization == "fp8"


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["plan", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_plan_with_online_fp8_has_more_kv_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, base = _plan_json(capsys, LLAMA, "--gpu", "h100-sxm")
    code_q, fp8 = _plan_json(capsys, LLAMA, "--gpu", "h100-sxm", "--quantization", "fp8")
    assert code == code_q == 0
    assert fp8["model"]["quantization"] == "fp8" and base["model"]["quantization"] is None
    saved = base["terms"]["weights"]["bytes"] - fp8["terms"]["weights"]["bytes"]
    assert saved == 16_060_522_496 - 9_086_705_664
    # every byte the weights give back goes to the KV cache (same activation and graph estimates)
    assert fp8["kv_cache_bytes"] - base["kv_cache_bytes"] == saved
    assert sum(t["bytes"] for t in fp8["terms"].values()) == fp8["capacity_bytes"]
    assert fp8["explanations"][0].startswith("--quantization fp8: the bfloat16 checkpoint is quantised")


def test_plan_serve_command_and_engine_both(capsys: pytest.CaptureFixture[str]) -> None:
    code, both = _plan_json(
        capsys, "--gpu", "h100-sxm", "--engine", "both", "--", "vllm", "serve", LLAMA, "--quantization", "fp8"
    )
    assert code == 0
    # vLLM also books Llama-3-8B's rotary cos/sin cache (8192 positions × 128 × bf16 = 2 MiB) with the weights
    assert both["terms"]["weights"]["bytes"] == 9_086_705_664 + 2 * 2**20
    assert both["sglang"]["terms"]["weights"]["bytes"] == 9_086_705_664


def test_plan_mismatch_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100-sxm", "-q", "gptq"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match the quantization method" in err[0]


def test_check_spec_takes_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        f"model: {LLAMA}\ngpu: h100-sxm\nengine: vllm\nflags:\n  quantization: fp8\n  max-model-len: 8192\n"
        "requirements:\n  must_fit: true\n"
    )
    assert main(["check", str(spec), "--json"]) == 0
    (engine,) = json.loads(capsys.readouterr().out)["engines"]
    assert engine["weights_bytes"] == 9_086_705_664 + 2 * 2**20  # + the rotary cos/sin cache


def test_online_fp8_of_a_hybrid_scales_its_exact_total() -> None:
    """A hybrid's exact count is the registry's per-kind one: fp8 shrinks it in the layout formula's proportion
    instead of replacing it with the dense formula's size (Nemotron-Nano-9B-v2 was 16 GiB after fp8)."""
    model = registry.load_model("nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    served = apply_quantization_flag(model, "fp8").model
    assert 0.5 * model.weight_bytes < served.weight_bytes < 0.6 * model.weight_bytes
