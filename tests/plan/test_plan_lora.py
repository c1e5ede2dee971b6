"""vLLM `--enable-lora`: adapter slots allocated with the weights (vramctl.core.lora), by hand from the shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl import registry
from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.lora import lora_slots
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings

LLAMA = "meta-llama/Meta-Llama-3-8B-Instruct"  # 32 layers, hidden 4096, 8 KV heads of 128, MLP 14336


def _llama_layer_elements(rank: int, tp: int) -> int:
    """A [rank, in] + B [out, rank] per slice, the ColumnParallel outputs and RowParallel inputs split by TP."""
    h, q, kv, inter = 4096, 4096, 1024, 14336
    col = lambda out: rank * h + (out // tp) * rank  # noqa: E731  (q, k, v, gate, up)
    row = lambda inp: rank * (inp // tp) + h * rank  # noqa: E731  (o, down)
    return col(q) + 2 * col(kv) + row(q) + 2 * col(inter) + row(inter)


@pytest.mark.parametrize(("loras", "rank", "tp"), [(1, 16, 1), (4, 64, 1), (4, 64, 2), (8, 8, 4)])
def test_slots_match_the_shapes_by_hand(loras: int, rank: int, tp: int) -> None:
    slots = lora_slots(
        registry.load_model(LLAMA), tp=tp, pp=1, max_loras=loras, max_lora_rank=rank, dtype_bytes=2
    )
    assert slots.stage_bytes == (32 * loras * 2 * _llama_layer_elements(rank, tp),)


def test_four_rank_64_slots_on_llama3_8b_are_1_25_gib() -> None:
    slots = lora_slots(registry.load_model(LLAMA), tp=1, pp=1, max_loras=4, max_lora_rank=64, dtype_bytes=2)
    assert slots.stage_bytes == (1_342_177_280,)


def test_pipeline_stages_split_the_layers() -> None:
    slots = lora_slots(registry.load_model(LLAMA), tp=1, pp=2, max_loras=1, max_lora_rank=16, dtype_bytes=2)
    assert slots.stage_bytes[0] == slots.stage_bytes[1] == 16 * 2 * _llama_layer_elements(16, 1)


def test_moe_experts_get_slots_per_expert() -> None:
    """Qwen3-30B-A3B: 128 experts × (w1, w3: A [r, 2048], B [768 / tp, r]; w2: A [r, 768 / tp], B [2048, r])."""
    model = registry.load_model("Qwen/Qwen3-30B-A3B")
    with_experts = lora_slots(model, tp=2, pp=1, max_loras=2, max_lora_rank=32, dtype_bytes=2).stage_bytes[0]
    r = 32
    experts = 128 * (2 * (r * 2048 + 384 * r) + (r * 384 + 2048 * r))
    attention = (r * 2048 + 2048 * r) + 2 * (r * 2048 + 256 * r) + (r * 2048 + 2048 * r)  # q, k, v, o
    router = r * 2048 + 128 * r
    assert with_experts == 48 * 2 * 2 * (experts + attention + router)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_lora_rank": 24}, "--max-lora-rank 24: vLLM accepts 1, 8, 16"),
        ({"max_loras": 0}, "--max-loras 0: must be at least 1"),
        ({"max_lora_rank": 8, "fully_sharded": True, "tp": 16}, "must divide by --tensor-parallel-size 16"),
    ],
)
def test_flags_vllm_refuses(kwargs: dict, needle: str) -> None:  # type: ignore[type-arg]
    args = {"tp": 1, "pp": 1, "max_loras": None, "max_lora_rank": None, "dtype_bytes": 2, **kwargs}
    with pytest.raises(BadInputError, match=needle):
        lora_slots(registry.load_model(LLAMA), **args)


def test_serve_command_flags() -> None:
    s = parse_serve_command(
        f"vllm serve {LLAMA} --enable-lora --max-loras 4 --max-lora-rank=64 --fully-sharded-loras "
        "--lora-modules a=/x"
    ).apply(ServeSettings())
    assert (s.enable_lora, s.max_loras, s.max_lora_rank, s.fully_sharded_loras) == (True, 4, 64, True)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert main(["plan", "--json", "--gpu", "h100-sxm", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_plan_books_the_slots_with_the_weights(capsys: pytest.CaptureFixture[str]) -> None:
    # 0.33's profile estimate: the pool loses exactly the slots and the graphs (0.34: below)
    base = _plan(capsys, LLAMA, "--engine-version", "0.33.0")
    with_lora = _plan(
        capsys, LLAMA, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64", "--engine-version", "0.33.0"
    )
    assert with_lora["terms"]["weights"]["bytes"] - base["terms"]["weights"]["bytes"] == 1_342_177_280
    # the slots, and (0.12 →, graph estimate charged by default) the second graph set of cudagraph_specialize_lora
    graphs = with_lora["terms"]["cuda_graph"]["bytes"] - base["terms"]["cuda_graph"]["bytes"]
    assert graphs > 0
    assert base["kv_cache_bytes"] - with_lora["kv_cache_bytes"] == 1_342_177_280 + graphs
    s = with_lora["settings"]
    assert (s["enable_lora"], s["max_loras"], s["max_lora_rank"]) == (True, 4, 64)
    assert base["settings"]["max_loras"] is None
    assert any(n.startswith("--enable-lora: 4 adapter slot(s) at rank 64") for n in with_lora["explanations"])
    # 0.34's extensible KV cache also keeps the graph estimate in its reserve (and a margin of 0.75 × the reserve):
    # the pool loses the slots, the captured graphs and the larger reserve
    base = _plan(capsys, LLAMA)
    with_lora = _plan(capsys, LLAMA, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64")
    graphs = with_lora["terms"]["cuda_graph"]["bytes"] - base["terms"]["cuda_graph"]["bytes"]
    assert base["kv_cache_bytes"] - with_lora["kv_cache_bytes"] >= 1_342_177_280 + 2 * graphs


def test_max_loras_without_enable_lora_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM reads --max-loras only with --enable-lora."""
    assert _plan(capsys, LLAMA, "--max-loras", "8")["terms"] == _plan(capsys, LLAMA)["terms"]


def test_lora_with_ep_on_moe_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "Qwen/Qwen3-30B-A3B", "-tp", "2", "-ep", "--enable-lora"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "EP support for Fused MoE LoRA is not implemented yet" in err[0]


def test_check_spec_takes_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        f"model: {LLAMA}\ngpu: h100-sxm\nengine: vllm\nflags:\n  enable-lora: true\n  max-loras: 4\n"
        "  max-lora-rank: 64\n  max-model-len: 8192\nrequirements:\n  must_fit: true\n"
    )
    assert main(["check", str(spec), "--json"]) == 0
    (engine,) = json.loads(capsys.readouterr().out)["engines"]
    assert engine["weights_bytes"] == 16_060_522_496 + 1_342_177_280 + 2 * 2**20  # + the rotary cos/sin cache


def test_lora_on_a_hybrid_is_refused_rather_than_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "4", "--enable-lora"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gated_delta_net layers, whose LoRA slots vramctl does not model yet" in err[0]
