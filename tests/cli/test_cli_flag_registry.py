"""One flag table (vramctl.core.engines.flags): every consumer reads an engine flag, and a value, the same way.

Each test names the inconsistency it pins (issue 10, "Five flag tables, five behaviours")."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.check import parse_spec
from vramctl.core.engines import flags
from vramctl.core.errors import BadInputError
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.units import GiB

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = _run(capsys, "plan", *argv, "--json")
    assert code in (0, 1), err
    return dict(json.loads(out))


# --- values: one spelling everywhere -------------------------------------------------------------------------------
def test_32k_is_read_alike_by_plan_profile_check_compare_and_the_serve_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: `32k` worked in `plan` and was a usage error in `profile` (`'32k' is not a valid int`)."""
    from vramctl.cli.profile import _engine_settings
    from vramctl.measure.run import parse_compare

    plan = _plan_json(capsys, "qwen3-8b", "--max-model-len", "32k")
    assert plan["settings"]["max_model_len"] == 32_000
    options = dict.fromkeys(
        (
            "engine_version",
            "gpu_memory_utilization",
            "max_num_batched_tokens",
            "max_num_seqs",
            "kv_cache_dtype",
            "block_size",
            "enforce_eager",
            "tensor_parallel_size",
            "dtype",
            "mem_fraction_static",
        )
    )
    assert _engine_settings({**options, "max_model_len": "32k"}).max_model_len == 32_000
    assert _engine_settings({**options, "max_model_len": "32K", "max_num_seqs": "1k"}).max_num_seqs == 1_000
    assert parse_compare("max-model-len=32k") == ("max-model-len", 32_000)
    spec = parse_spec("gpu: h100-sxm\nmodel: qwen3-8b\nflags: {max-model-len: 32k, max-num-seqs: 1k}\n")
    assert spec.settings.max_model_len == 32_000 and spec.settings.max_num_seqs == 1_000
    command = parse_serve_command("vllm serve Qwen/Qwen3-8B --max-model-len 32k --max-num-seqs 1k")
    assert dict(command.changes) == {"max_model_len": 32_000, "max_num_seqs": 1_000}


def test_profile_takes_32k_on_its_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The value is read before anything is measured: a bad --block-size beside it is the only complaint."""
    code, _, err = _run(capsys, "profile", "llama-3-8b", "--max-model-len", "32k", "--block-size", "7")
    assert code == 2
    assert "--block-size 7" in err and "not a valid int" not in err


def test_a_bare_memory_size_is_gib_on_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `--gpu-memory 80` was an error in `plan` and 80 GiB in `read-log`; `--host-memory 512` GiB in
    `check` and refused in `plan`."""
    plan = _plan_json(capsys, "llama-3-8b", "--gpu-memory", "80")
    assert plan["gpu"]["total_bytes"] == 80 * GiB
    host = _plan_json(capsys, "llama-3-8b", "--kv-offloading-size", "16", "--host-memory", "512")
    assert host["host_tier"]["host_memory_bytes"] == 512 * GiB
    spec = parse_spec("gpu: h100-sxm\nmodel: llama-3-8b\nhost_memory: 512\ngpu_memory: 80\nfree_memory: 60\n")
    assert spec.settings.host_memory_bytes == 512 * GiB
    assert spec.gpu_memory_bytes == 80 * GiB and spec.settings.free_memory_bytes == 60 * GiB
    from vramctl.cli.engine_flags import read_memory

    assert read_memory("80", "--gpu-memory") == read_memory("80GiB", "--gpu-memory") == 80 * GiB
    assert read_memory("85899345920B", "--gpu-memory") == 80 * GiB
    with pytest.raises(BadInputError, match="a bare number is GiB"):
        read_memory("85899345920", "--gpu-memory")  # bytes without their unit: refused, not 80 EiB


def test_read_log_reads_a_bare_gpu_memory_as_gib(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "startup.log"
    log.write_text(
        "INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
        "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 163,840 tokens\n"
    )
    code_bare, out_bare, _ = _run(capsys, "read-log", str(log), "--gpu-memory", "80", "--json")
    code_unit, out_unit, _ = _run(capsys, "read-log", str(log), "--gpu-memory", "80GiB", "--json")
    assert code_bare == code_unit
    assert json.loads(out_bare)["capacity_bytes"] == json.loads(out_unit)["capacity_bytes"] == 80 * GiB


def test_engine_sizes_take_a_written_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """`--kv-offloading-size` is GiB and `--hicache-size` GB as the engines read a bare number; a unit works too."""
    assert flags.by_name("--kv-offloading-size").parse("64") == 64.0
    assert flags.by_name("--kv-offloading-size").parse("64GiB") == 64.0
    assert flags.by_name("--hicache-size").parse("40GB") == 40.0
    assert flags.by_name("--kv-cache-memory-bytes").parse("8589934592") == 8 * GiB
    a = _plan_json(capsys, "llama-3-8b", "--kv-offloading-size", "64", "--host-memory", "512GiB")
    b = _plan_json(capsys, "llama-3-8b", "--kv-offloading-size", "64GiB", "--host-memory", "512GiB")
    assert a["host_tier"] == b["host_tier"]


def test_check_reads_auto_max_model_len_like_plan() -> None:
    spec = parse_spec("gpu: h100-sxm\nmodel: llama-3-8b\nflags: {max-model-len: auto}\n")
    assert spec.settings.max_model_len == -1
    assert parse_serve_command("vllm serve m --max-model-len auto").changes == (("max_model_len", -1),)


# --- --block-size: one concept per name ---------------------------------------------------------------------------
def test_tiers_simulate_names_its_trace_block_apart_from_the_engine_block_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`plan --block-size` is vLLM's KV block; `tiers simulate`'s was the trace's tokens per hash id."""
    code, out, _ = _run(capsys, "tiers", "simulate", "--help")
    assert code == 0 and "--trace-block-size" in out and "hash id" in out
    trace = ["--synthetic", "sessions=2,turns=2,seed=1", "--json"]
    code, new, _ = _run(capsys, "tiers", "simulate", *trace, "--trace-block-size", "64")
    code_old, old, _ = _run(capsys, "tiers", "simulate", *trace, "--block-size", "64")
    assert code == code_old == 0 and new == old
    assert flags.by_name("--block-size").help.startswith("KV cache block")


# --- vramctl's own flags after `--` -----------------------------------------------------------------------------
def test_plan_honours_offline_after_the_serve_command(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan_json(capsys, "--", "vllm", "serve", "llama-3-8b", "--offline", "--gpu", "l40s")
    assert plan["gpu"]["name"] == "l40s"
    assert not any("ignored --offline" in e or "ignored --gpu" in e for e in plan["explanations"])


@pytest.mark.parametrize("flag", [["--engine", "sglang"], ["--engine-version", "0.11.0"], ["--offline"]])
def test_diff_refuses_own_flags_it_does_not_take_after_the_command(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `diff -- vllm serve M --engine sglang` dropped `--engine` with an "ignored" note."""
    code, _, err = _run(capsys, "diff", "--from", "0.11.0", "--", "vllm", "serve", "llama-3-8b", *flag)
    assert code == 2
    assert f"{flag[0]} after the serve command" in err and len(err.strip().splitlines()) == 1


def test_diff_honours_its_sides_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "diff", "--", "vllm", "serve", "llama-3-8b", "--from", "0.11.0", "--json")
    assert code == 0, err
    assert json.loads(out)["kind"] == "versions"


# --- MODEL and --model ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["profile"], ["suggest"], ["validate"], ["tiers", "bench"], ["tiers", "plan"], ["plan"], ["diff", "--from", "0.11"]],
)
def test_model_as_positional_and_option_on_every_model_command(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, *command, "--help")
    assert code == 0 and "--model" in out
    if command[0] == "diff":
        return  # diff's positional is MODEL [ENGINE FLAGS…]; --model overrides the command's (as plan)
    code, _, err = _run(capsys, *command, "llama-3-8b", "--model", "qwen3-8b")
    assert code == 2 and "two models" in err


# --- the registry and its consumers -------------------------------------------------------------------------------
def _help(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    code, out, _ = _run(capsys, *command, "--help")
    assert code == 0
    return re.sub(r"\s+", " ", out)


def test_every_registry_flag_plan_takes_is_in_plan_help(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "plan")
    for entry in flags.REGISTRY:
        if not entry.cli:
            continue
        assert re.search(rf"(?<![\w-]){re.escape(entry.name)}(?![\w-])", text), entry.name
        assert entry.help.split(" ")[0] in text, entry.name


def test_profile_suggest_validate_flags_come_from_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("profile", "suggest", "validate"):
        text = _help(capsys, command)
        for name in ("--max-model-len", "--max-num-seqs", "--block-size", "--tensor-parallel-size", "--dtype"):
            assert name in text and flags.by_name(name).help.split(" ")[0] in text, (command, name)


def test_every_registry_flag_is_in_docs_cli_md() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    for entry in flags.REGISTRY:
        row = f"| `{entry.name}` |"
        assert row in text, entry.name
        for alias in entry.aliases:
            assert f"`{alias}`" in text, alias


def test_every_registry_flag_is_read_by_the_serve_command_and_a_check_spec() -> None:
    samples = {"count": "2", "max-model-len": "4096", "float": "0.5", "str": "fp8", "bytes": "8GiB", "gib": "4",
               "gb": "4", "counts": "1,2,4", "loader-mode": "'{\"mode\":\"copy\"}'",
               "compilation-config": "'{\"cudagraph_mode\":\"PIECEWISE\"}'",
               "speculative-config": "'{\"method\":\"ngram\",\"num_speculative_tokens\":2}'",
               "mm-limits": "'{\"image\":2}'", "mm-max-pixels": "'{\"max_pixels\":1003520}'"}
    for entry in flags.REGISTRY:
        for engine in entry.engines:
            head = "vllm serve llama-3-8b" if engine == "vllm" else "sglang serve --model-path llama-3-8b"
            value = "" if entry.kind == "bool" else f" {samples[entry.kind]}"
            if entry.target == "model":
                continue
            command = parse_serve_command(f"{head} {entry.name}{value}")
            assert not any(n.startswith(f"ignored {entry.name}") for n in command.notes), (engine, entry.name)
            text = f"gpu: h100-sxm\nengine: {engine}\ncommand: {head} {entry.name}{value}\n"
            if entry.target.startswith("load.") and entry.key not in flags.NO_MEMORY_EFFECT:
                with pytest.raises(BadInputError, match="changes the model's config"):
                    parse_spec(text)  # refused with its reason, not "unknown flag"
                continue
            assert parse_spec(text).flags, (engine, entry.name)


def test_read_log_reads_the_registry_settings() -> None:
    from vramctl.diagnose import startup

    keys = startup._SETTING_KEYS
    for entry in flags.REGISTRY:
        if entry.in_logs:
            assert keys[entry.key.replace("-", "_")] == entry.target, entry.name
    assert keys["max_seq_len"] == "max_model_len" and keys["tp_size"] == "tensor_parallel_size"


def test_no_consumer_keeps_its_own_flag_table() -> None:
    """The serve-command parser and check had a table each: both now read the registry."""
    serve = (ROOT / "vramctl" / "core" / "serve_command.py").read_text()
    spec = (ROOT / "vramctl" / "core" / "check" / "spec.py").read_text()
    assert "_VLLM_VALUE_FLAGS" not in serve and '"--max-num-seqs"' not in serve
    assert "FlagSpec" not in spec and '"max-num-seqs"' not in spec


def test_check_package_functions_are_short() -> None:
    files = [*sorted((ROOT / "vramctl" / "core" / "check").glob("*.py")), ROOT / "vramctl/core/serve_command.py"]
    files.append(ROOT / "vramctl" / "core" / "engines" / "flags.py")
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, f"{path.name}:{node.name} is {length} lines"
