"""`vramctl read-log` as a user runs it: output, JSON keys, exit codes, bad input."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import pytest

from vramctl.cli.main import main

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"
JSON_KEYS = {
    "engine",
    "engine_version",
    "settings",
    "terms",
    "capacity_bytes",
    "requested_bytes",
    "kv_cache_bytes",
    "num_blocks",
    "kv_tokens",
    "max_concurrency",
    "kv_cache_memory_bytes_suggestion",
    "lines",
    "missing",
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["read-log", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.shared("samples/startup")
def test_rich_output_v0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "026.log"))
    assert code == 0
    assert "vLLM" in out and "V0 worker" in out
    assert "39.50 GiB" in out  # capacity from the log
    assert "weights" in out and "14.96" in out and "kv_cache" in out and "11.12" in out
    assert "5,691" in out and "11.12x @ 8,192 tokens" in out


@pytest.mark.shared("samples/startup")
def test_json_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "051.log"), "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= JSON_KEYS
    assert data["engine"] == "vllm" and data["engine_version"] == "0.10.2"
    assert data["kv_cache_bytes"] == 59212694937  # the exact bytes the suggestion line prints
    assert data["kv_cache_memory_bytes_suggestion"] == 58333988249
    assert data["kv_tokens"] == 451744 and data["max_concurrency"] == 110.29
    assert data["lines"]["kv_cache_in_use"] == 13 and data["lines"]["settings.model"] == 5
    terms = data["terms"]
    assert sum(t["bytes"] for t in terms.values()) == data["capacity_bytes"]
    assert terms["weights"]["source"] == "given" and terms["slack"]["source"] == "derived"
    assert data["settings"]["max_model_len"] == 4096


@pytest.mark.shared("samples/startup")
def test_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "121.log"), "--markdown")
    assert code == 0
    assert out.startswith("### vramctl read-log: vLLM 0.6.5")
    assert "| kv_cache | 10.02 |" in out and "| **total** | 21.95 |" in out


@pytest.mark.shared("samples/startup")
def test_sglang_needs_capacity_then_gpu_gives_a_ledger(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "111.log"), "--json")
    data = json.loads(out)
    assert code == 0 and data["capacity_bytes"] is None
    assert any(m.startswith("capacity") for m in data["missing"])
    code, out, _ = run(capsys, str(SAMPLES / "111.log"), "--json", "--gpu", "h100-sxm")
    data = json.loads(out)
    assert code == 0 and data["capacity_source"] == "--gpu h100-sxm"
    assert sum(t["bytes"] for t in data["terms"].values()) == data["capacity_bytes"]
    code, out, _ = run(capsys, str(SAMPLES / "111.log"), "--json", "--gpu-memory", "79.19")
    assert json.loads(out)["capacity_bytes"] == round(79.19 * 2**30)


@pytest.mark.shared("samples/startup")
def test_compare_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "049.log"), "--compare-plan", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["comparison"]["rows"]}
    assert rows["kv_cache"]["logged"] == round(56.21 * 2**30)
    assert rows["kv_cache"]["planned"] > 0
    assert rows["kv_cache"]["difference"] == rows["kv_cache"]["planned"] - rows["kv_cache"]["logged"]
    assert abs(rows["kv_cache"]["percent"]) < 10
    code, out, _ = run(capsys, str(SAMPLES / "049.log"), "--compare-plan")
    assert code == 0 and "planned" in out


@pytest.mark.shared("samples/startup")
def test_compare_plan_unknown_model_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(SAMPLES / "117.log"), "--compare-plan", "--model", "no-such-model-xyz")
    assert code == 2 and "unknown model" in err and "Traceback" not in err


@pytest.mark.shared("samples/startup")
def test_compare_plan_finds_a_local_checkpoint_named_like_the_hf_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 117 served /models/Meta-Llama-3.1-70B-Instruct: the registry knows it without the org part.
    code, out, _ = run(capsys, str(SAMPLES / "117.log"), "--compare-plan", "--json")
    assert code == 0 and json.loads(out)["comparison"]["rows"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "h100-sxm", "--gpu-memory", "80GiB"], "give one capacity"),
        (["--gpu-memory", "lots"], "--gpu-memory"),
        (["--gpu", "no-such-gpu"], "no-such-gpu"),
        (["--model", "llama-3-8b"], "--compare-plan"),
        (["--json", "--markdown"], "pick one"),
        pytest.param(["--run", "7"], "--run 7", marks=pytest.mark.shared("samples/startup")),
    ],
)
def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code, _, err = run(capsys, str(SAMPLES / "049.log"), *args)
    assert code == 2 and needle in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_and_directory_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, str(tmp_path / "nope.log"))
    assert code == 2 and "no such file" in err
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2 and "directory" in err


def test_binary_data_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Bytes that are not text (a PNG header, invalid UTF-8, control characters) are the wrong file: exit 2."""
    path = tmp_path / "x.log"
    path.write_bytes(b"\x00\xff\xfe garbage \x89PNG\r\n\x1a\n" * 100)
    code, out, err = run(capsys, str(path))
    assert code == 2 and out == "" and "binary data, not a text log" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00" * 100_000, b"INFO just a server\nnothing about memory\n"],
    ids=["empty", "zero-filled", "no-memory-lines"],
)
def test_nothing_found_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(content)
    code, out, err = run(capsys, str(path))
    assert code == 3 and "no start-up memory lines" in err and out == ""
    code, out, _ = run(capsys, str(path), "--json")
    assert code == 3 and json.loads(out)["engine"] is None


@pytest.mark.shared("samples/startup")
def test_huge_line_and_gzip_and_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (SAMPLES / "026.log").read_bytes()
    big = tmp_path / "big.log.gz"
    with gzip.open(big, "wb") as fh:
        fh.write(b"x" * (5 << 20) + b"\n" + text)
    code, out, _ = run(capsys, str(big), "--json")
    assert code == 0 and json.loads(out)["num_blocks"] == 5691
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    code, out, _ = run(capsys, "-", "--json")
    assert code == 0 and json.loads(out)["log"] == "<stdin>"


@pytest.mark.shared("samples/startup")
def test_truncated_gzip_uses_what_was_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = gzip.compress((SAMPLES / "026.log").read_bytes() * 50)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) - 20])
    code, _out, err = run(capsys, str(path))
    assert code == 0 and "truncated" in err


def test_every_sample_runs(capsys: pytest.CaptureFixture[str]) -> None:
    for path in sorted(SAMPLES.glob("*.log")):
        code, out, err = run(capsys, str(path), "--json")
        assert code == 0, (path.name, err)
        data = json.loads(out)
        if data["capacity_bytes"] is not None and "kv_cache" in data["terms"]:
            assert sum(t["bytes"] for t in data["terms"].values()) == data["capacity_bytes"]


@pytest.mark.shared("samples/startup")
def test_small_uncertainty_bands_print_in_mib(capsys: pytest.CaptureFixture[str]) -> None:
    """A log's ±0.005 GiB rounding shows as `± 5.1 MiB`, never `± 0.00` (rich and Markdown)."""
    from vramctl.render.ledger import format_band

    assert format_band(0) == ""
    assert format_band(round(0.005 * 2**30)) == "5.1 MiB"
    assert format_band(round(0.25 * 2**30)) == "0.25 GiB"
    assert format_band(1000) == "1,000 B"
    code, out, _ = run(capsys, str(SAMPLES / "026.log"))
    assert code == 0 and "± 5.1 MiB" in out and "± 0.00" not in out
    code, out, _ = run(capsys, str(SAMPLES / "026.log"), "--markdown")
    assert code == 0 and "| 5.1 MiB |" in out and "| 0.00 |" not in out


@pytest.mark.shared("samples/startup")
def test_kv_rows_show_what_the_start_up_error_and_the_graph_hint_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, str(SAMPLES.parent / "oom" / "022.log"), "--markdown")
    assert code == 0
    assert "| KV cache | 48.66 GiB | line 3 |" in out
    assert "| max_model_len that fits | 205728 | line 3 |" in out
    collected = Path(__file__).resolve().parents[1] / "fixtures" / "startup_collected"
    code, out, _ = run(capsys, str(collected / "010.log"))
    assert code == 0 and "0.9129" in out and "0.9271" in out and "implies a device total" in out


_V1_NO_VERSION = """\
(EngineCore_0 pid=1) INFO 08-20 18:04:10 [gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.8 seconds
(EngineCore_0 pid=1) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB
"""


def _planned_weights(capsys: pytest.CaptureFixture[str], log: Path, *extra: str) -> float:
    code, out, _ = run(
        capsys, str(log), "--compare-plan", "--json", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", *extra
    )
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["comparison"]["rows"]}
    return float(rows["weights"]["planned"])


def test_engine_version_plans_a_log_that_states_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log without a version line is planned at the version --engine-version names: vLLM 0.10.1 keeps gpt-oss's
    MXFP4 experts on Marlin on an H100 (torch 2.7.1), whose padding the newer Triton path does not have."""
    log = tmp_path / "start.log"
    log.write_text(_V1_NO_VERSION)
    at_0101 = _planned_weights(capsys, log, "--engine-version", "0.10.1")
    at_0141 = _planned_weights(capsys, log, "--engine-version", "0.14.1")
    assert at_0101 > at_0141 + 2**30
    code, out, _ = run(
        capsys,
        str(log),
        "--compare-plan",
        "--model",
        "gpt-oss-120b",
        "--gpu",
        "h100-sxm",
        "--engine-version",
        "0.10.1",
    )
    assert code == 0 and "planned with vLLM 0.10.1 (--engine-version 0.10.1)" in " ".join(out.split())


def test_engine_version_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "start.log"
    log.write_text("INFO 01-01 00:00:00 api_server.py:1] vLLM API server version 0.14.1\n" + _V1_NO_VERSION)
    code, _, err = run(capsys, str(log), "--engine-version", "0.10.1")
    assert code == 2 and "only used with --compare-plan" in err and "Traceback" not in err
    code, _, err = run(
        capsys,
        str(log),
        "--compare-plan",
        "--model",
        "gpt-oss-120b",
        "--gpu",
        "h100-sxm",
        "--engine-version",
        "0.10.1",
    )
    assert code == 2 and "the log states vllm 0.14.1" in err
    code, _, err = run(
        capsys,
        str(log),
        "--compare-plan",
        "--model",
        "gpt-oss-120b",
        "--gpu",
        "h100-sxm",
        "--engine-version",
        "banana",
    )
    assert code == 2 and "not a version" in err and len(err.strip().splitlines()) == 1
