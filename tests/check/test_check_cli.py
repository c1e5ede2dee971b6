"""`vramctl check`: spec errors (exit 2, one line), pass (0) and fail (1) with reasons, --json, --markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.cli.main import main
from vramctl.core.check import DeploySpec, parse_spec, run_check, split_serve_command
from vramctl.core.errors import BadInputError
from vramctl.registry import load_gpu, load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GOOD = EXAMPLES / "deploy-llama3-8b-h100.yaml"
BAD = EXAMPLES / "deploy-llama3-8b-h100-too-ambitious.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --- examples -------------------------------------------------------------------------------------------------
def test_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(GOOD))
    assert code == 0, err
    out = " ".join(out.split())  # piped output wraps at 80 columns (docs/cli.md)
    assert "PASS (6/6 requirements hold)" in out and "min_concurrency@8192" in out


def test_example_fails_on_purpose_with_flags_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(BAD), "--json")
    assert code == 1
    data = json.loads(out)
    assert data["passed"] is False and data["exit_code"] == 1 and data["failed"] == 3
    failed = {c["requirement"]: c["message"] for c in data["checks"] if not c["ok"]}
    assert set(failed) == {"min_concurrency@32768", "min_headroom", "max_utilization"}
    assert "--tensor-parallel-size 4" in failed["min_concurrency@32768"]
    assert "lower --gpu-memory-utilization to 0.9" in failed["min_headroom"]
    assert "set --gpu-memory-utilization 0.95" in failed["max_utilization"]


@pytest.mark.parametrize("spec", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_runs(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(spec), "--json")
    assert code == (1 if "too-ambitious" in spec.name else 0), err
    data = json.loads(out)
    assert data["engines"] and all(e["kv_cache_bytes"] > 0 for e in data["engines"])


def test_markdown_comment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(BAD), "--markdown")
    assert code == 1
    assert out.startswith("### ❌ vramctl check:")
    assert "| ❌ | min_headroom | vLLM |" in out and "<details><summary>plan</summary>" in out
    code, out, _ = run(capsys, str(GOOD), "--markdown")
    assert code == 0 and out.startswith("### ✅ vramctl check:") and "passes" in out


def test_both_engines_and_host_tier(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(EXAMPLES / "deploy-llama3-8b-h100-both.yaml"), "--json")
    assert code == 0
    data = json.loads(out)
    engines = {e["engine"]: e for e in data["engines"]}
    assert set(engines) == {"vllm", "sglang"}
    host = engines["sglang"]["host_tier"]
    assert host["mechanism"] == "sglang-hicache" and host["host_tokens"] == 2 * engines["sglang"]["kv_tokens"]
    # the host RAM given on the command line overrides the spec's: 96 GiB cannot take ~100 GiB pinned
    code, out, _ = run(
        capsys, str(EXAMPLES / "deploy-llama3-8b-h100-both.yaml"), "--json", "--host-memory", "96GiB"
    )
    assert code == 1
    failed = [c for c in json.loads(out)["checks"] if not c["ok"]]
    # the server would not start (must_fit: host-pinned-memory-failure) and the tier is above its share
    assert [c["requirement"] for c in failed] == ["must_fit", "max_host_memory_fraction"]
    assert "--hicache-ratio 2" in failed[0]["message"]


# --- bad specs: exit 2, one line naming the field ---------------------------------------------------------
BAD_SPECS = {
    "malformed": ("model: [llama-3-8b\ngpu: h100-sxm\n", "malformed YAML"),
    "not a mapping": ("- llama-3-8b\n", "top level"),
    "unknown key": ("model: llama-3-8b\ngpu: h100-sxm\nmodle: x\n", "modle: unknown key"),
    "missing model": ("gpu: h100-sxm\n", "model: missing"),
    "missing gpu": ("model: llama-3-8b\n", "gpu: missing"),
    "unknown model": ("model: llama-9-8b\ngpu: h100-sxm\n", "model: unknown model"),
    "unknown gpu": ("model: llama-3-8b\ngpu: h999\n", "gpu: unknown GPU"),
    "bad engine": ("model: llama-3-8b\ngpu: h100-sxm\nengine: tgi\n", "engine: 'tgi' is not one of"),
    "unknown flag": (
        "model: llama-3-8b\ngpu: h100-sxm\nflags:\n  gpu-mem-util: 0.9\n",
        "unknown flag --gpu-mem-util",
    ),
    "wrong engine flag": (
        "model: llama-3-8b\ngpu: h100-sxm\nengine: vllm\nflags:\n  mem-fraction-static: 0.9\n",
        "--mem-fraction-static is a sglang flag",
    ),
    "flag type": ("model: llama-3-8b\ngpu: h100-sxm\nflags:\n  max-num-seqs: lots\n", "flags.max-num-seqs"),
    "flags not a mapping": ("model: llama-3-8b\ngpu: h100-sxm\nflags: [a]\n", "flags: must be a mapping"),
    "unknown requirement": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  min_tokens: 5\n",
        "requirements.min_tokens: unknown requirement",
    ),
    "concurrency shape": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  min_concurrency: 32\n",
        "requirements.min_concurrency: must be a mapping",
    ),
    "negative kv tokens": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  min_kv_tokens: -5\n",
        "requirements.min_kv_tokens: -5 must be ≥ 1",
    ),
    "utilization range": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  max_utilization: 1.5\n",
        "requirements.max_utilization: 1.5 must be in (0, 1]",
    ),
    "headroom size": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  min_headroom: lots\n",
        "requirements.min_headroom",
    ),
    "bool type": ("model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  must_fit: maybe\n", "must_fit"),
    "flags and command": (
        "model: llama-3-8b\ngpu: h100-sxm\nflags: {}\ncommand: vllm serve x\n",
        "either `flags` or `command`",
    ),
    "bad command": ("gpu: h100-sxm\ncommand: tgi-launcher --model x\n", "command: expected `vllm serve"),
    "host fraction without host": (
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  max_host_memory_fraction: 0.5\n",
        "host_memory: missing",
    ),
    "bad utilisation flag": (
        "model: llama-3-8b\ngpu: h100-sxm\nflags:\n  gpu-memory-utilization: 1.5\n",
        "gpu-memory-utilization",
    ),
    "version as a float": (
        "model: llama-3-8b\ngpu: h100-sxm\nengine_version: 0.20\n",
        "write the version as a string",
    ),
    "engine version": (
        "model: llama-3-8b\ngpu: h100-sxm\nengine: sglang\nengine_version: newest\n",
        "engine-version",
    ),
}


@pytest.mark.parametrize(("text", "expected"), BAD_SPECS.values(), ids=list(BAD_SPECS))
def test_bad_spec_exit_2_one_line(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(text)
    code, out, err = run(capsys, str(spec))
    assert code == 2, (out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramctl: error: "), err
    assert expected in lines[0], lines[0]


def test_missing_file_and_option_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such spec file" in err
    code, _, err = run(capsys, str(GOOD), "--json", "--markdown")
    assert code == 2 and "pick one" in err
    code, _, err = run(capsys, str(GOOD), "--host-memory", "-3GiB")
    assert code == 2 and "--host-memory" in err
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00model")
    code, _, err = run(capsys, str(binary))
    assert code == 2 and "UTF-8" in err


# --- the pure core --------------------------------------------------------------------------------------------
def test_split_serve_commands() -> None:
    engine, model, flags = split_serve_command(
        "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --gpu-memory-utilization=0.95 -tp 2 --enforce-eager "
        "--port 8000 --trust-remote-code --max-model-len 32k"
    )
    assert (engine, model) == ("vllm", "meta-llama/Meta-Llama-3-8B-Instruct")
    assert flags == {
        "gpu-memory-utilization": "0.95",
        "tp": "2",
        "enforce-eager": True,
        "port": "8000",
        "trust-remote-code": True,
        "max-model-len": "32k",
    }
    engine, model, flags = split_serve_command(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.85 --chunked-prefill-size -1"
    )
    assert (engine, model, flags) == (
        "sglang",
        "Qwen/Qwen3-8B",
        {"mem-fraction-static": "0.85", "chunked-prefill-size": "-1"},
    )
    with pytest.raises(BadInputError, match="needs a value"):
        split_serve_command("vllm serve m --max-model-len")


def test_spec_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD.read_text()))
    code, out, _ = run(capsys, "-", "--json")
    assert code == 0 and json.loads(out)["spec"] == "<stdin>"


def test_sglang_serve_and_env_style_commands() -> None:
    engine, model, flags = split_serve_command(
        "sglang serve --model-path Qwen/Qwen3-8B --tp-size=2 --enable-hicache"
    )
    assert (engine, model, flags) == ("sglang", "Qwen/Qwen3-8B", {"tp-size": "2", "enable-hicache": True})
    spec = parse_spec(
        "gpu: h100-sxm\ncommand: sglang serve --model-path Qwen/Qwen3-8B --tp-size=2 --enable-hicache\n"
    )
    assert spec.engine == "sglang" and spec.settings.tensor_parallel_size == 2
    assert spec.settings.enable_hierarchical_cache


def test_command_spec_maps_flags() -> None:
    spec = parse_spec(
        "command: vllm serve llama-3-8b -tp 2 --max-model-len 32k --kv-cache-dtype fp8 --no-enable-chunked-prefill\n"
        "gpu: h100-sxm\n"
    )
    s = spec.settings
    assert (spec.engine, spec.model) == ("vllm", "llama-3-8b")
    assert (s.tensor_parallel_size, s.max_model_len, s.kv_cache_dtype, s.enable_chunked_prefill) == (
        2,
        32000,
        "fp8",
        False,
    )
    sg = parse_spec(
        "model: llama-3-8b\ngpu: h100-sxm\nengine: sglang\nflags:\n  dp-size: 2\n  enable-dp-attention: true\n"
        "  disaggregation-mode: decode\n  hicache-size: 30\n  context-length: 8192\n"
    )
    assert sg.sglang_options.dp_size == 2 and sg.sglang_options.enable_dp_attention
    assert sg.sglang_options.disaggregation_mode == "decode"
    assert sg.settings.hicache_size_gb == 30 and sg.settings.max_model_len == 8192


def test_gpu_memory_instead_of_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "d.yaml"
    spec.write_text("model: llama-3-8b\ngpu_memory: 79.18GiB\nrequirements:\n  must_fit: true\n")
    code, out, err = run(capsys, str(spec), "--json")
    assert code == 0, err
    assert json.loads(out)["engines"][0]["capacity_bytes"] == round(79.18 * 2**30)


def test_requirement_thresholds_are_exact() -> None:
    """A requirement set exactly at the planned value passes; one step above fails."""
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-sxm")
    base = "model: llama-3-8b\ngpu: h100-sxm\nengine: sglang\nrequirements:\n"
    result = run_check(parse_spec(base + "  must_fit: true\n"), model, gpu)
    tokens = result.outcomes[0].kv_tokens
    ok = run_check(parse_spec(base + f"  min_kv_tokens: {tokens}\n"), model, gpu)
    assert ok.passed
    bad = run_check(parse_spec(base + f"  min_kv_tokens: {tokens + 1}\n"), model, gpu)
    assert not bad.passed and "raise --mem-fraction-static to 0.8" in bad.items[0].message


@settings(max_examples=30, deadline=None)
@given(value=st.integers(min_value=1, max_value=200), context=st.sampled_from([1024, 8192, 32768]))
def test_concurrency_requirement_matches_plan(value: int, context: int) -> None:
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-sxm")
    spec: DeploySpec = parse_spec(
        f"model: llama-3-8b\ngpu: h100-sxm\nengine: both\nflags:\n  max-model-len: 8192\n"
        f"requirements:\n  min_concurrency: {{context: {context}, value: {value}}}\n"
    )
    result = run_check(spec, model, gpu)
    for item, outcome in zip(result.items, result.outcomes, strict=True):
        assert item.ok == (outcome.concurrency_at(context) >= value)


def test_scheduler_cap_is_named() -> None:
    """The KV pool holds plenty, but --max-num-seqs 16 runs at most 16 at once."""
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-sxm")
    spec = parse_spec(
        "model: llama-3-8b\ngpu: h100-sxm\nflags:\n  max-num-seqs: 16\n  max-model-len: 8192\n"
        "requirements:\n  min_concurrency: {context: 1024, value: 32}\n"
    )
    (item,) = run_check(spec, model, gpu).items
    assert not item.ok and item.actual == "16.00"
    assert "raise --max-num-seqs to 32" in item.message


def test_sliding_window_concurrency_matches_the_plan() -> None:
    """At max_model_len the check uses the planner's own blocks per request (windowed layers capped)."""
    from vramctl.core.plan import plan

    model, gpu = load_model("google/gemma-3-27b-it"), load_gpu("h100-sxm")
    spec = parse_spec(
        "model: google/gemma-3-27b-it\ngpu: h100-sxm\nflags:\n  max-model-len: 32768\n  tp: 2\n"
        "requirements:\n  min_concurrency: {context: 32768, value: 1}\n"
    )
    result = run_check(spec, model, gpu)
    planned = plan(model, gpu, spec.settings)
    assert result.outcomes[0].kv_concurrency_at(32768) == pytest.approx(planned.max_concurrency)
