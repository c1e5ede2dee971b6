"""`vramctl plan` end to end: the embedded default, verdicts and their exit codes, serve commands, bad input."""

from __future__ import annotations

import json

import pytest

from vramctl.cli.main import main
from vramctl.core.units import GiB


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code, out, err = run(capsys, "--json", *args)
    assert err == ""
    return code, json.loads(out)


def test_embedded_default_with_the_seed_kv_size_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--kv-cache-memory-bytes", "54.4GiB")
    assert code == 0
    assert d["model"]["name"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert d["gpu"]["name"] == "h100-sxm"
    assert d["engine"] == "vllm" and d["engine_version"] == "0.34.0"
    assert d["settings"]["max_model_len"] == 8192 and d["settings"]["max_num_batched_tokens"] == 8192
    assert d["kv_bytes_per_token"] == 131_072
    # 0.34's default block of 64 tokens: 54.4 GiB // 8 MiB = 6,963 blocks (27,852 blocks of 16 on 0.33); the same
    # 445,632 tokens either way
    assert d["block_size"] == 64
    assert d["num_blocks"] == 6_963
    assert d["kv_tokens"] == 445_632
    assert round(d["max_concurrency"], 1) == 54.4
    assert d["terms"]["kv_cache"]["source"] == "given"
    assert d["verdict"] == "fits"


def test_embedded_default_estimates_near_the_seed_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--engine-version", "0.33.0")  # the seed's numbers are the profile estimate's
    assert code == 0
    kv_gib = d["kv_cache_bytes"] / GiB
    assert 50 < kv_gib < 56  # the seed logs 54.4 GiB
    assert d["settings"]["gpu_memory_utilization"] == 0.92
    assert sum(t["bytes"] for t in d["terms"].values()) == d["gpu"]["total_bytes"]
    for name in ("activation_peak", "non_torch", "cuda_graph"):
        assert d["terms"][name]["source"] == "estimated"
        assert d["terms"][name]["uncertainty_bytes"] > 0
        assert d["terms"][name]["formula"]
    why = " ".join(d["explanations"])
    assert "79.6" in why and "79.18" in why and "sampler" in why
    assert d["requested_bytes"] == -(-d["gpu"]["total_bytes"] * 92 // 100)


def test_rich_output_has_ledger_bar_verdict_and_trade(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == 0
    for text in (
        "activation_peak",
        "kv_cache",
        "KV token slots",
        "verdict: fits",
        "utilisation trade",
        "0.98",
    ):
        assert text in out
    assert "K" * 10 in out  # the stacked bar


def test_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--markdown")
    assert code == 0
    assert "| term | GiB |" in out and "**verdict: fits**" in out and "| u |" in out


def test_json_keys_documented_in_the_issue(capsys: pytest.CaptureFixture[str]) -> None:
    _, d = run_json(capsys, "--engine", "both")
    for key in (
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
        "utilization_table",
        "host_tier",
        "warnings",
        "explanations",
    ):
        assert key in d, key
    for key in ("mem_fraction_static", "kv_cache_bytes", "max_total_num_tokens", "max_running_requests"):
        assert key in d["sglang"], key
    assert d["gap"]


def test_engine_sglang_top_level_from_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--engine", "sglang")
    assert code == 0
    assert d["engine"] == "sglang"
    assert d["kv_tokens"] == d["sglang"]["max_total_num_tokens"]
    assert d["verdict"] == d["sglang"]["verdict"]


def test_no_kv_cache_memory_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--gpu-memory-utilization", "0.2")
    assert code == 1
    assert d["verdict"] == "no-kv-cache-memory" or d["verdict"] == "weights-do-not-fit"
    code, d = run_json(capsys, "--gpu-memory-utilization", "0.25")
    assert code == 1
    assert d["verdict"] == "no-kv-cache-memory"
    assert d["verdict_message"].startswith("No available memory for the cache blocks.")


def test_kv_too_small_names_the_largest_fitting_length(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072")
    assert code == 1
    assert d["verdict"] == "kv-cache-too-small-for-max-model-len"
    fit = d["max_model_len_fit"]
    assert 0 < fit < 131072
    assert f"the estimated maximum model length is {fit}." in d["verdict_message"]
    # The suggested length does fit.
    code, d2 = run_json(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", str(fit))
    assert code == 0, d2["verdict_message"]


def test_free_memory_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--free-memory", "60GiB", "--engine-version", "0.33.0")
    assert code == 1
    assert d["verdict"] == "gpu-util-exceeds-free-memory"
    assert d["verdict_message"].startswith("Free memory on device cuda:0 (")
    assert "is less than desired GPU memory utilization (0.92, 72.85 GiB)" in d["verdict_message"]
    assert d["terms"]["other_processes"]["bytes"] > 0
    code, d = run_json(capsys, "--free-memory", "60GiB", "--gpu-memory-utilization", "0.7")
    assert code == 0


def test_weights_do_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192")
    assert code == 1
    assert d["verdict"] == "weights-do-not-fit"
    code, d = run_json(capsys, "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192", "-tp", "4")
    assert code == 0


def test_serve_command_after_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(
        capsys,
        "--",
        "vllm",
        "serve",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "--gpu-memory-utilization=0.95",
        "--max-model-len",
        "4k",
        "-O3",
        "--served-model-name",
        "llama",
    )
    assert code == 0
    assert d["settings"]["gpu_memory_utilization"] == 0.95
    assert d["settings"]["max_model_len"] == 4000
    assert any("ignored --served-model-name" in n for n in d["explanations"])


def test_sglang_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(
        capsys,
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-8B",
        "--mem-fraction-static",
        "0.8",
        "--context-length",
        "32768",
    )
    assert d["engine"] == "sglang"
    assert d["model"]["name"] == "Qwen/Qwen3-8B"
    assert d["sglang"]["mem_fraction_static"] == 0.8
    assert code in (0, 1)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no-such-model-xyz"], "unknown model"),
        (["--gpu", "h900"], "unknown GPU"),
        (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--gpu-memory-utilization", "lots"], "--gpu-memory-utilization"),
        (["--max-num-seqs", "-4"], "--max-num-seqs"),
        (["--max-num-seqs", "many"], "--max-num-seqs"),
        (["--max-model-len", "9000"], "--max-model-len 9000"),
        (["--max-model-len", "1e12"], "--max-model-len"),
        (["-tp", "3"], "must be divisible by tensor parallel size (3)"),
        (["-tp", "0"], "--tensor-parallel-size"),
        (["Qwen/Qwen2.5-14B-Instruct", "-tp", "5"], "KV heads"),
        (["--engine-version", "0.17.0", "--block-size", "7"], "--block-size 7: vLLM 0.17.0 accepts"),
        (["--kv-cache-memory-bytes", "-5GiB"], "--kv-cache-memory-bytes"),
        (["--kv-cache-memory-bytes", "54.4 parsecs"], "--kv-cache-memory-bytes"),
        (["--free-memory", "900GiB"], "--free-memory"),
        (["--kv-cache-dtype", "fp7"], "--kv-cache-dtype"),
        (["--engine", "tgi"], "--engine"),
        (["--engine-version", "banana"], "--engine-version"),
        (["--", "docker", "run", "vllm"], "serve command"),
        (["--", "vllm", "serve", "llama-3-8b", "--max-model-len"], "--max-model-len"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1, err
    assert err.startswith("vramctl: error:")
    assert needle.lower() in err.lower()
    assert "Traceback" not in err


def test_gpu_memory_override_for_an_unlisted_card(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--gpu-memory", "79.18GiB")
    assert code == 0
    assert d["gpu"]["total_bytes"] == round(79.18 * GiB)
    # 0.34's extensible KV cache skips the check (vllm/v1/worker/utils.py:783-797): the pool shrinks instead
    code, full = run_json(capsys)
    code, shared = run_json(capsys, "--free-memory", "60GiB")
    assert code == 0 and shared["verdict"] == "fits"
    assert shared["kv_cache_bytes"] < full["kv_cache_bytes"] - 15 * GiB
    code, off = run_json(capsys, "--free-memory", "60GiB", "--no-enable-extensible-kv-cache")
    assert code == 1 and off["verdict"] == "gpu-util-exceeds-free-memory"


def test_host_tier_vllm_offload(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "--kv-offloading-size", "64", "--host-memory", "512GiB")
    assert code == 0
    assert d["host_tier"]["mechanism"].startswith("vllm")


def test_max_model_len_auto_fits_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = run_json(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "auto")
    assert code == 0
    assert 0 < d["max_model_len"] < 131072
    # 0.34 logs the fit after graph capture and warm-up (vllm/v1/core/kv_cache_planning.py:1494-1514)
    assert d["explanations"][0].startswith("--max-model-len auto reduced max_model_len from 131072 to ")
    code, d = run_json(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "auto", "--engine-version", "0.33.0")
    assert d["explanations"][0].startswith("Auto-fit max_model_len: reduced from 131072 to ")
    code, d = run_json(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "-1")
    assert code == 0 and d["max_model_len"] == 131072
    code, _, err = run(capsys, "llama-3.1-8b", "--max-model-len", "auto", "--engine-version", "0.11.0")
    assert code == 2 and "auto-fit" in err
