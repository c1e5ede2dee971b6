"""CUDA-only checks (marked `gpu`; skipped without a CUDA device). scripts/gpu-check.sh runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from measure_helpers import TINY_CONFIG

from vramctl.cli.main import main
from vramctl.core.units import GiB, MiB

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GPU_FAST = ["--device", "cuda", "--max-num-batched-tokens", "1024", "--max-num-seqs", "32"]


@pytest.fixture
def tiny_gpu_model(tmp_path: Path) -> str:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    return str(folder)


def test_cuda_snapshot_moves_with_an_allocation() -> None:
    from vramctl.measure.device import CudaBackend

    backend = CudaBackend(0)
    before = backend.snapshot()
    block = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda:0")
    during = backend.snapshot()
    assert during.torch_allocated_bytes - before.torch_allocated_bytes == 256 * MiB
    assert before.free_bytes - during.free_bytes >= 256 * MiB
    assert during.non_torch_bytes == during.used_bytes - during.torch_reserved_bytes
    del block
    backend.empty_cache()
    info = backend.info()
    assert info.kind == "cuda" and info.cuda_version


def test_profile_captures_graphs(capsys: pytest.CaptureFixture[str], tiny_gpu_model: str) -> None:
    code = main(["profile", tiny_gpu_model, *GPU_FAST, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    rank = out["measurements"]["ranks"][0]
    sizes = out["settings"]["cudagraph_capture_sizes"]
    assert sizes and len(rank["cuda_graph_samples_bytes"]) == len(sizes)
    assert rank["cuda_graph_actual_bytes"] > 0
    first, second = rank["cuda_graph_samples_bytes"][:2]
    assert rank["cuda_graph_estimate_bytes"] == first + max(second, MiB) * (len(sizes) - 1)
    assert out["terms"]["cuda_graph"]["bytes"] == rank["cuda_graph_estimate_bytes"]
    assert sum(t["bytes"] for t in out["terms"].values()) == out["capacity_bytes"]
    assert abs(out["terms"]["weights"]["bytes"] - rank["weight_tensor_bytes"]) <= 2 * MiB


def test_enforce_eager_has_no_graph_term(capsys: pytest.CaptureFixture[str], tiny_gpu_model: str) -> None:
    code = main(["profile", tiny_gpu_model, *GPU_FAST, "--enforce-eager", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["terms"]["cuda_graph"]["bytes"] == 0
    assert out["settings"]["cudagraph_capture_sizes"] == []


def test_validate_replays_graphs_under_the_pool(
    capsys: pytest.CaptureFixture[str], tiny_gpu_model: str
) -> None:
    code = main(["validate", tiny_gpu_model, *GPU_FAST, "--kv-cache-memory-bytes", "1GiB", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"]
    assert out["graphs_captured"] == len(out["settings"]["cudagraph_capture_sizes"])
    assert out["init_free_bytes"] - out["free_after_kv_bytes"] >= 1 * GiB


def test_validate_oom_is_exit_5_and_memory_is_released(
    capsys: pytest.CaptureFixture[str], tiny_gpu_model: str
) -> None:
    _free, total = torch.cuda.mem_get_info()
    code = main(["validate", tiny_gpu_model, *GPU_FAST, "--kv-cache-memory-bytes", str(total + 8 * GiB)])
    err = capsys.readouterr().err
    assert code == 5
    assert "during kv-alloc" in err
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() < 64 * MiB  # released


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_nccl_ranks(capsys: pytest.CaptureFixture[str], tiny_gpu_model: str) -> None:
    code = main(["profile", tiny_gpu_model, *GPU_FAST, "-tp", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(out["measurements"]["ranks"]) == 2


@pytest.mark.parametrize("kind", ["dense", "moe", "mla"])
def test_decode_graph_replay_matches_eager(kind: str) -> None:
    """The captured decode step computes what the eager one does (dense, MoE and MLA paths)."""
    from measure_helpers import tiny_dense, tiny_mla, tiny_moe

    from vramctl.measure.model import ReferenceModel, decode_inputs

    spec = {"dense": tiny_dense, "moe": tiny_moe, "mla": tiny_mla}[kind]()
    model = ReferenceModel(spec, device="cuda:0", dtype="bfloat16")
    caches = model.allocate_kv_cache(8, 16)
    inputs = decode_inputs(model, 4, 8, 16)
    eager = model.decode_step(kv_caches=caches, **inputs).clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model.decode_step(kv_caches=caches, **inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model.decode_step(kv_caches=caches, **inputs)
    with torch.inference_mode():  # the step's outputs are inference tensors
        out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), eager.float())


@pytest.mark.parametrize("kind", ["moe", "mla"])
def test_graph_profiling_measures_and_releases(kind: str) -> None:
    """vLLM's profiling capture on the MoE / MLA decode: one positive drop per size, all memory given back."""
    from measure_helpers import tiny_mla, tiny_moe

    from vramctl.measure.cuda_graphs import profile_graph_memory, vllm_estimate
    from vramctl.measure.model import ReferenceModel

    model = ReferenceModel((tiny_moe if kind == "moe" else tiny_mla)(), device="cuda:0", dtype="bfloat16")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    allocated = torch.cuda.memory_allocated()
    free_before = torch.cuda.mem_get_info()[0]
    sizes = (1, 2, 4, 8, 16, 32)
    result = profile_graph_memory(model, sizes=sizes, max_num_seqs=32, block_size=16, kv_dtype=torch.bfloat16)
    assert result.sizes == tuple(sorted(sizes, reverse=True))
    assert len(result.samples_bytes) == len(sizes) and result.samples_bytes[0] > 0
    assert result.estimate_bytes == vllm_estimate(result.samples_bytes)
    assert result.actual_bytes > 0
    torch.cuda.synchronize()
    # the graphs, their pool, the minimal KV cache and the capture stream's cuBLAS workspace are gone
    assert torch.cuda.memory_allocated() <= allocated + 8 * MiB
    assert torch.cuda.mem_get_info()[0] >= free_before - 64 * MiB
