"""`vramctl profile` / `suggest` / `validate` end to end on the cpu device, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from measure_helpers import FAST

from vramctl.cli.main import main
from vramctl.core.ledger import KV_CACHE, SLACK, WEIGHTS
from vramctl.core.units import GiB, MiB

pytest.importorskip("torch")

# The keys `plan --json` prints (vramctl.core.plan.PlanResult.to_json); profile must print them too.
PLAN_KEYS = {
    "engine",
    "engine_version",
    "model",
    "gpu",
    "settings",
    "terms",
    "requested_bytes",
    "kv_cache_bytes",
    "bytes_per_block",
    "block_size",
    "num_blocks",
    "kv_tokens",
    "max_concurrency",
    "max_model_len_fit",
    "verdict",
}


def _run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, Any]:
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else out


def test_profile_json_has_plans_schema_and_sums(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str
) -> None:
    code, out = _run_json(capsys, ["profile", tiny_model_dir, *FAST, "--json"])
    assert code == 0
    assert set(out) >= PLAN_KEYS
    assert out["engine"] == "vllm" and out["verdict"] == "fits"
    terms = out["terms"]
    assert sum(t["bytes"] for t in terms.values()) == out["capacity_bytes"] == 2 * GiB
    for name in ("weights", "activation_peak", "non_torch", "cuda_graph"):
        assert terms[name]["source"] == "measured", name
    assert "other_processes" not in terms  # an emulated device: nothing else is on it
    assert terms["cuda_graph"]["bytes"] == 0  # no graphs on the cpu device
    # weights: the measured RSS change is close to the tensor bytes (5.5 MiB for the tiny model)
    rank = out["measurements"]["ranks"][0]
    assert abs(terms[WEIGHTS]["bytes"] - rank["weight_tensor_bytes"]) < 8 * MiB
    assert rank["weight_tensor_bytes"] == 2 * 5_771_776  # float32
    # vLLM's subtraction: kv = requested − (consumed + transient) − graphs; blocks = kv // bytes per block
    assert out["kv_cache_bytes"] == out["requested_bytes"] - rank["non_kv_bytes"]
    assert out["num_blocks"] == out["kv_cache_bytes"] // out["bytes_per_block"]
    # layers × block × kv heads × head dim × K,V × 4 bytes: FAST serves with an explicit --dtype float32, and
    # vLLM's auto KV dtype is the served dtype (only --dtype auto downcasts a float32 checkpoint to 16 bits)
    # the block: vLLM 0.34's default of 64 tokens (a multiple of the CPU backend's 32; 16 through 0.33)
    assert out["settings"]["block_size"] == 64
    assert out["bytes_per_block"] == 4 * 64 * 2 * 64 * 2 * 4
    assert out["settings"]["max_num_batched_tokens"] == 256
    assert out["settings"]["cudagraph_capture_sizes"] == []
    # SGLang's auto KV dtype is the served dtype too (model_runner: kv_cache_dtype "auto" → model_config.dtype)
    assert out["sglang"]["cell_size_bytes"] == 4 * 2 * 64 * 2 * 4
    assert out["environment"]["torch_version"] and out["environment"]["vramctl_version"]
    assert terms[SLACK]["bytes"] >= 0 and terms[KV_CACHE]["bytes"] > 0
    # bytes are ints everywhere in the JSON, the device record included
    device = out["device"]
    assert all(isinstance(device[k], int) for k in device if k.endswith("_bytes") and device[k] is not None)
    assert device["host_total_bytes"] > 0


def test_profile_on_a_shared_host_is_a_share_of_its_available_memory(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --device-memory the cpu device is 90 % of the host memory available when it opens (one rule
    for profile, suggest and validate): other processes are outside it, and the profile says the host is
    shared. (Before, the whole host was the device and a pool sized on it failed validate's headroom.)"""
    from vramctl.measure import device

    monkeypatch.setattr(device, "host_memory", lambda: (3 * 1024 * MiB, 8 * 1024 * MiB))
    fast = [a for a in FAST if a not in ("--device-memory", "2GiB")]
    code, out = _run_json(
        capsys, ["profile", tiny_model_dir, *fast, "--gpu-memory-utilization", "0.3", "--json"]
    )
    assert code == 0
    assert out["capacity_bytes"] == int(0.9 * 3 * 1024 * MiB)
    assert "other_processes" not in out["terms"]
    assert any("the host is shared" in note for note in out["notes"])
    assert sum(t["bytes"] for t in out["terms"].values()) == out["capacity_bytes"]


def test_profile_defaults_to_vllm_cpu_scheduler_limits(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str
) -> None:
    code, out = _run_json(
        capsys, ["profile", tiny_model_dir, "--device", "cpu", "--device-memory", "2GiB", "--json"]
    )
    assert code == 0
    # vLLM's CPU-backend server defaults: 2048 tokens / 128 sequences (vllm.md §6)
    assert out["settings"]["max_num_batched_tokens"] == 2048
    assert out["settings"]["max_num_seqs"] == 128
    assert out["settings"]["gpu_memory_utilization"] == 0.92


def test_profile_rich_output_and_save(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, tmp_path: Path
) -> None:
    target = tmp_path / "p.yaml"
    code = main(["profile", tiny_model_dir, *FAST, "--save", str(target)])
    out = capsys.readouterr().out
    assert code == 0
    assert "measured budget" in out and "KV cache:" in out and "SGLang from the same run" in out
    import yaml

    doc = yaml.safe_load(target.read_text())
    assert doc["schema"] == "vramctl.profile/1"
    assert doc["model"]["fingerprint"]["hidden_size"] == 256
    assert doc["environment"]["device_kind"] == "cpu"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_compare_shows_which_terms_moved(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    # on the cpu device each run of a comparison gets a fresh process (RSS is the measurement)
    code, out = _run_json(
        capsys, ["profile", tiny_model_dir, *FAST, "--compare", "max-num-batched-tokens=2048", "--json"]
    )
    assert code == 0
    (flip,) = out["comparisons"]
    assert flip["flag"] == "max-num-batched-tokens" and flip["value"] == 2048
    assert {c["term"] for c in flip["changes"]} >= {"weights", "kv_cache", "activation_peak"}
    peak = {c["term"]: c for c in flip["changes"]}["activation_peak"]
    assert peak["delta_bytes"] > 0  # 8x the tokens of the max-shape forward: a larger transient peak
    assert "activation_peak" in flip["moved"] and "weights" not in flip["moved"]
    assert flip["result"]["settings"]["max_num_batched_tokens"] == 2048


def test_compare_marks_the_blocks_when_only_the_bytes_per_block_change(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str
) -> None:
    """fp8 KV moves no term by much, but doubles the blocks: the table says so."""
    assert main(["profile", tiny_model_dir, *FAST, "--compare", "kv-cache-dtype=fp8"]) == 0
    text = capsys.readouterr().out
    table = text[text.index("--compare kv-cache-dtype=fp8") :]
    (row,) = [line for line in table.splitlines() if line.startswith("blocks")]
    cells = [c.strip() for c in row.split("│")]
    base, other = (int(c.replace(",", "")) for c in cells[1:3])
    assert other > 3 * base  # float32 KV (FAST serves in float32) → 1-byte fp8: 4x the blocks, less noise
    assert cells[3] == f"{other - base:+,}" and cells[4] == "yes"


def test_parse_compare_values() -> None:
    from vramctl.measure.run import parse_compare

    assert parse_compare("enforce-eager") == ("enforce-eager", True)
    assert parse_compare("--enforce_eager=false") == ("enforce-eager", False)
    assert parse_compare("max-num-seqs=1,024") == ("max-num-seqs", 1024)
    assert parse_compare("kv-cache-dtype=fp8") == ("kv-cache-dtype", "fp8")
    assert parse_compare("gpu-memory-utilization=0.9") == ("gpu-memory-utilization", 0.9)
    for bad in ("max-num-seqs", "max-num-seqs=many", "enforce-eager=maybe", "colour=blue"):
        with pytest.raises(Exception, match="--compare"):
            parse_compare(bad)


def test_startup_check_uses_vllms_message(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    # an emulated device larger than the host: free memory (the host's) is below 0.92 × 1 TiB
    code = main(["profile", tiny_model_dir, *FAST, "--device-memory", "1TiB"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Free memory on device cpu (" in err
    assert "/1024.0 GiB) on startup is less than desired GPU memory utilization (0.92, 942.08 GiB)" in err
    assert "--gpu-memory-utilization" in err
    assert len([line for line in err.splitlines() if line.startswith("vramctl:")]) == 1


def test_no_kv_memory_is_exit_1(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    code, out = _run_json(
        capsys,
        [
            "profile",
            tiny_model_dir,
            *FAST,
            "--device-memory",
            "16MiB",
            "--gpu-memory-utilization",
            "0.5",
            "--json",
        ],
    )
    assert code == 1
    assert out["verdict"] == "no-kv-cache-memory"
    assert out["kv_cache_bytes"] < out["bytes_per_block"]


def test_no_cuda_is_exit_4(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = main(["profile", tiny_model_dir])
    err = capsys.readouterr().err
    assert code == 4
    assert "--device cpu" in err and "vramctl plan" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--device", "tpu"], "--device"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--num-layers", "9"], "--num-layers"),
        (["--kv-cache-dtype", "fp3"], "--kv-cache-dtype"),
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size 3"),
        (["--compare", "colour=blue"], "--compare"),
        (["--save", "out.txt"], "--save"),
        (["--device-memory", "lots"], "--device-memory"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, args: list[str], needle: str
) -> None:
    code = main(["profile", tiny_model_dir, *FAST, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err


def test_suggest_from_profile_and_direct(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, tmp_path: Path
) -> None:
    saved = tmp_path / "p.json"
    assert main(["profile", tiny_model_dir, *FAST, "--save", str(saved), "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)
    code, out = _run_json(capsys, ["suggest", "--kv-cache-memory", "--from-profile", str(saved), "--json"])
    assert code == 0
    rank = profile["measurements"]["ranks"][0]
    non_kv = rank["total_consumed_bytes"] + rank["transient_peak_bytes"]  # no graphs on cpu
    assert out["non_kv_bytes"] == non_kv
    assert out["fit_requested"]["kv_cache_memory_bytes"] == rank["requested_bytes"] - non_kv - 150 * MiB
    assert (
        out["fill_gpu"]["kv_cache_memory_bytes"]
        == rank["snapshots"]["init"]["free_bytes"] - non_kv - 150 * MiB
    )
    assert out["fit_requested"]["vllm_flag"].startswith("--kv-cache-memory-bytes=")
    assert "--mem-fraction-static=" in out["fit_requested"]["sglang_flags"]
    code = main(["suggest", "--from-profile", str(saved)])
    text = capsys.readouterr().out
    assert code == 0 and "--kv-cache-memory-bytes=" in text and "--max-total-tokens=" in text
    code, direct = _run_json(capsys, ["suggest", tiny_model_dir, *FAST, "--json"])
    assert code == 0 and direct["from"] == "this run"


def test_validate_from_profile_passes(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, tmp_path: Path
) -> None:
    saved = tmp_path / "p.json"
    assert main(["profile", tiny_model_dir, *FAST, "--device-memory", "400MiB", "--save", str(saved)]) == 0
    capsys.readouterr()
    code, out = _run_json(
        capsys,
        ["validate", "--from-profile", str(saved), "--device", "cpu", "--device-memory", "400MiB", "--json"],
    )
    assert code == 0, out
    assert out["passed"] and out["verdict"] == "pass"
    assert out["kv_cache_memory_bytes"] > 150 * MiB
    # the pool was really written: free memory dropped by about its size
    assert out["init_free_bytes"] - out["free_after_kv_bytes"] >= out["kv_cache_memory_bytes"] * 0.95
    assert out["free_left_bytes"] > 0


def test_validate_fails_below_min_free(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    code, out = _run_json(
        capsys,
        [
            "validate",
            tiny_model_dir,
            *FAST,
            "--kv-cache-memory-bytes",
            "64MiB",
            "--min-free",
            "4GiB",
            "--json",
        ],
    )
    assert code == 1
    assert out["passed"] is False and out["verdict"] == "fail"


def test_validate_absurd_pool_is_a_clean_oom_exit_5(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str
) -> None:
    code = main(["validate", tiny_model_dir, *FAST, "--kv-cache-memory-bytes", "1TiB"])
    err = capsys.readouterr().err
    assert code == 5
    assert "out of memory on cpu during kv-alloc" in err
    assert "kv-pool-overcommit" in err and "--kv-cache-memory-bytes" in err
    assert len([line for line in err.splitlines() if line.startswith("vramctl:")]) == 1


def test_oom_mid_forward_is_caught_released_exit_5(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from vramctl.measure import model as model_module

    def boom(self: object, *args: object, **kwargs: object) -> object:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.16 GiB.")

    monkeypatch.setattr(model_module.ReferenceModel, "forward", boom)
    code = main(["profile", tiny_model_dir, *FAST])
    err = capsys.readouterr().err
    assert code == 5
    assert "during profiling" in err and "Tried to allocate 1.16 GiB" in err
    assert "--max-num-batched-tokens" in err


def test_ctrl_c_releases_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vramctl.measure import model as model_module

    def interrupt(self: object, *args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(model_module.ReferenceModel, "sampler_warmup", interrupt)
    target = tmp_path / "p.json"
    code = main(["profile", tiny_model_dir, *FAST, "--save", str(target)])
    err = capsys.readouterr().err
    assert code == 130
    assert "interrupted" in err and "nothing saved" in err
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_num_layers_scales_weights(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    code, full = _run_json(capsys, ["profile", tiny_model_dir, *FAST, "--json"])
    code2, sliced = _run_json(capsys, ["profile", tiny_model_dir, *FAST, "--num-layers", "1", "--json"])
    assert code == code2 == 0
    r = sliced["measurements"]["ranks"][0]
    assert r["layers_built"] == 1 and r["layers_total"] == 4
    assert r["unbuilt_weight_bytes"] == 3 * 590_336 * 4  # float32
    assert abs(sliced["terms"]["weights"]["bytes"] - full["terms"]["weights"]["bytes"]) < 8 * MiB
    assert sliced["bytes_per_block"] == full["bytes_per_block"]
    assert any("--num-layers 1" in n for n in sliced["notes"])


def test_suggest_and_validate_when_the_request_leaves_no_block(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str, tmp_path: Path
) -> None:
    saved = tmp_path / "low.json"
    # u = 0.05 of 2 GiB: the profile still fits (≈ 50 MiB KV), but not with vLLM's 150 MiB buffer on top
    assert (
        main(["profile", tiny_model_dir, *FAST, "--gpu-memory-utilization", "0.05", "--save", str(saved)])
        == 0
    )
    capsys.readouterr()
    assert main(["suggest", "--from-profile", str(saved)]) == 0  # "fill the card" still has a size
    out = capsys.readouterr().out
    assert "no KV block fits" in out and "--kv-cache-memory-bytes=0" not in out
    code = main(["validate", "--from-profile", str(saved), "--device", "cpu", "--device-memory", "2GiB"])
    err = capsys.readouterr().err
    assert code == 1
    assert "leaves no KV block" in err and "--target gpu" in err and err.count("\n") == 1


def test_an_sglang_fraction_that_leaves_no_pool_says_sglang_stops(
    capsys: pytest.CaptureFixture[str], tiny_model_dir: str
) -> None:
    """On a 2 GiB device SGLang's own reserve exceeds the card: no negative pool is printed as a size."""
    assert main(["profile", tiny_model_dir, *FAST]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "SGLang from the same run: no KV pool: mem_fraction_static -" in text
    assert "SGLang would stop at start-up" in text and "→ KV -" not in text


@pytest.mark.parametrize("command", ["profile", "validate"])
def test_a_hybrid_model_is_refused_before_the_device_opens(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reference model has no Mamba / Gated DeltaNet layers: measuring it would measure another model."""
    assert main([command, "nvidia/NVIDIA-Nemotron-Nano-9B-v2", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the reference model has no mamba2 layers" in err[0]
