"""QA: a hostile-input sweep over the whole CLI, like a demanding SRE (docs/exit-codes.md, DESIGN.md contracts).

Every case runs `vramctl` through `main([...])` and asserts the contract for bad input: the documented exit code
(2 for bad input), ONE line on stderr starting `vramctl: error:` that names the problem, never a traceback,
never exit 70; with `--json`, stdout is empty or one valid JSON object. Files that must survive are checked
byte for byte. Arguments may hold `{name}` placeholders for the hostile files made once per module.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
# The real logs beside the project when they are there; else logs of the project's own (a clone alone).
OOM_LOG = SHARED / "samples" / "oom" / "001.log"
if not OOM_LOG.exists():
    OOM_LOG = REPO / "examples" / "vllm-oom.log"
STARTUP_LOG = SHARED / "samples" / "startup" / "001.log"
if not STARTUP_LOG.exists():
    STARTUP_LOG = REPO / "tests" / "fixtures" / "startup_collected" / "001.log"
TINY = REPO / "profiles" / "measured" / "tiny-llama"
TINY_PROFILE = REPO / "profiles" / "measured" / "tiny-llama-cpu.json"
GOOD_TRACE_LINE = '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n'
BENCH_SCHEMA = "vramctl.tiers.bench/1"
LONG = "x" * 5000
DIGITS_5000 = "9" * 5000
FAST = [
    "--device",
    "cpu",
    "--device-memory",
    "2GiB",
    "--max-num-batched-tokens",
    "256",
    "--max-num-seqs",
    "8",
    "--dtype",
    "float32",
    "--max-model-len",
    "256",
]


def _bench_file(tiers: str) -> str:
    return json.dumps({"schema": BENCH_SCHEMA}).rstrip("}") + f', "tiers": {tiers}}}'


def _tier(read: str) -> str:
    return '{"host-pinned": {"read_bytes_per_s": READ, "write_bytes_per_s": 1e9, "method": "m", "verified": true}}'.replace(
        "READ", read
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The hostile files, by name: garbage, empty, a directory, a symlink loop, a 1 GiB sparse file, bombs."""
    d = tmp_path_factory.mktemp("hostile")
    files: dict[str, str | bytes] = {
        "garbage": os.urandom(1 << 20),
        "empty": "",
        "trunc_json": '{"a": 1',
        "list_json": "[1, 2, 3]",
        "bigint_json": '{"hidden_size": N}'.replace("N", DIGITS_5000),
        "deep_json": "[" * 100_000 + "]" * 100_000,
        "bomb_yaml": "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(
            f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        # check specs
        "spec_nul": "model: llama-3-8b\x00\ngpu: h100-sxm\n",
        "spec_bigint": "model: llama-3-8b\ngpu: h100-sxm\nflags: {max-num-seqs: N}\n".replace(
            "N", DIGITS_5000
        ),
        "spec_kv_tokens_huge": "model: llama-3-8b\ngpu: h100-sxm\nrequirements: {min_kv_tokens: N}\n".replace(
            "N", "9" * 500
        ),
        "spec_host_zero": "model: llama-3-8b\ngpu: h100-sxm\nhost_memory: 0\n",
        "spec_gpu_memory_zero": "model: llama-3-8b\ngpu_memory: 0\n",
        "spec_long_model": f"model: {LONG}\ngpu: h100-sxm\n",
        "spec_long_gpu": f"model: llama-3-8b\ngpu: {LONG}\n",
        "spec_list": "- a\n- b\n",
        "spec_python_tag": 'model: !!python/object/apply:os.system ["true"]\ngpu: h100-sxm\n',
        "spec_nan_util": "model: llama-3-8b\ngpu: h100-sxm\nflags: {gpu-memory-utilization: .nan}\n",
        "spec_unknown_flag": "model: llama-3-8b\ngpu: h100-sxm\nflags: {bogus-flag: 3}\n",
        "spec_tp3": "model: llama-3-8b\ngpu: h100-sxm\nflags: {tensor-parallel-size: 3}\n",
        "spec_dup_key": "model: a\nmodel: b\ngpu: h100-sxm\n",
        # Mooncake traces
        "trace_bigint": GOOD_TRACE_LINE.replace("1024", DIGITS_5000),
        "trace_neg_len": GOOD_TRACE_LINE.replace("1024", "-1024"),
        "trace_str_len": GOOD_TRACE_LINE.replace("1024", '"1024"'),
        "trace_missing": '{"input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n',
        "trace_nan_ts": GOOD_TRACE_LINE.replace('"timestamp": 0', '"timestamp": NaN'),
        "trace_hash_str": GOOD_TRACE_LINE.replace("[0, 1]", '"abc"'),
        "trace_list": "[1, 2, 3]\n",
        "trace_trunc": GOOD_TRACE_LINE + '{"timestamp": 1, "input_len',
        "trace_good": GOOD_TRACE_LINE,
        # bandwidths files
        "bw_list": "[1]",
        "bw_no_schema": '{"tiers": {}}',
        "bw_tier_str": _bench_file('{"host": "fast"}'),
        "bw_rate_str": _bench_file(_tier('"1e9"')),
        "bw_rate_neg": _bench_file(_tier("-1")),
        "bw_rate_nan": _bench_file(_tier("NaN")),
        "bw_rate_bigint": _bench_file(_tier(DIGITS_5000)),
        "bw_rate_400_digits": _bench_file(_tier("9" * 400)),
        # model config.json
        "cfg_bigint": (TINY / "config.json")
        .read_text()
        .replace('"hidden_size": 256', f'"hidden_size": {DIGITS_5000}'),
        "cfg_str": (TINY / "config.json").read_text().replace('"hidden_size": 256', '"hidden_size": "256"'),
        "cfg_kv3": (TINY / "config.json")
        .read_text()
        .replace('"num_key_value_heads": 2', '"num_key_value_heads": 3'),
    }
    out: dict[str, str] = {}
    for name, content in files.items():
        suffix = ".json" if name.startswith(("cfg_", "bw_")) or name.endswith("_json") else ""
        suffix = suffix or (".yaml" if name.startswith("spec_") or name.endswith("_yaml") else "")
        suffix = suffix or (".jsonl" if name.startswith("trace_") else "")
        path = d / f"{name}{suffix}"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        out[name] = str(path)
    (d / "adir").mkdir()
    out["adir"] = str(d / "adir")
    out["missing"] = str(d / "no-such-file")
    os.symlink(d / "loop2", d / "loop1")
    os.symlink(d / "loop1", d / "loop2")
    out["loop"] = str(d / "loop1")
    sparse = d / "sparse.bin"
    with sparse.open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB of holes
    out["sparse"] = str(sparse)
    log = OOM_LOG.read_bytes() * 20
    packed = gzip.compress(log)
    (d / "trunc.log.gz").write_bytes(packed[: len(packed) // 2])
    out["trunc_gz"] = str(d / "trunc.log.gz")
    out["tmp"] = str(d)
    return out


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def assert_contract(
    args: list[str], code: int, out: str, err: str, expected: int, needle: str | None
) -> None:
    """The bad-input contract: the exit code, one `vramctl: error:` line naming the problem, JSON stays JSON."""
    assert "Traceback" not in err and "Traceback" not in out, err
    assert code != 70, err
    assert code == expected, (code, err)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("vramctl: warning")]
    assert len(lines) == 1, err
    assert lines[0].startswith("vramctl: error: "), err
    if needle is not None:
        assert needle in lines[0], (needle, lines[0])
    if "--json" in args and out.strip():
        json.loads(out)


def _expand(args: list[str], hostile: dict[str, str]) -> list[str]:
    return [arg.format(**hostile) if "{" in arg and "}" in arg else arg for arg in args]


# (id, args, exit code, a piece of the one stderr line)
BAD_INPUT: list[tuple[str, list[str], int, str | None]] = [
    # --- registry names: too long for a file name, or nothing like a name ---------------------------------------
    ("plan-model-5000-chars", ["plan", "--json", "--model", LONG], 2, "unknown model"),
    ("plan-gpu-5000-chars", ["plan", "--json", "--gpu", LONG], 2, "unknown GPU"),
    ("plan-gpu-400-digits", ["plan", "--gpu", "9" * 400], 2, "unknown GPU"),
    ("read-log-gpu-5000-chars", ["read-log", "--json", str(STARTUP_LOG), "--gpu", LONG], 2, "unknown GPU"),
    ("tiers-plan-gpu-5000-chars", ["tiers", "plan", "--gpu", LONG], 2, "unknown GPU"),
    (
        "tiers-sim-model-5000-chars",
        ["tiers", "simulate", "--trace", "{trace_good}", "--model", LONG],
        2,
        "unknown",
    ),
    ("profile-model-5000-chars", ["profile", LONG, "--device", "cpu"], 2, "unknown model"),
    ("plan-unknown-model-suggests", ["plan", "llama-3-8"], 2, "did you mean llama-3-8b"),
    ("plan-unknown-gpu-suggests", ["plan", "--gpu", "h1OO"], 2, "did you mean h100"),
    ("plan-model-twice", ["plan", "llama-3-8b", "--model", "qwen3-8b"], 2, "two models"),
    ("plan-json-and-markdown", ["plan", "--json", "--markdown"], 2, "pick one output format"),
    (
        "plan-serve-command-bad-quote",
        ["plan", "--json", "--", "vllm serve llama-3-8b --max-model-len '4096"],
        2,
        "No closing quotation",
    ),
    ("plan-serve-command-no-model", ["plan", "--json", "--", "vllm", "serve"], 2, "no model"),
    ("plan-serve-command-docker", ["plan", "--", "docker", "run", "x"], 2, "not a vLLM or SGLang launcher"),
    (
        "plan-serve-command-value-missing",
        ["plan", "--", "vllm", "serve", "llama-3-8b", "--max-model-len"],
        2,
        "needs a value",
    ),
    (
        "plan-serve-command-tp-x",
        ["plan", "--", "vllm", "serve", "llama-3-8b", "-tp", "x"],
        2,
        "'x' is not a number",
    ),
    (
        "plan-serve-command-nan-util",
        ["plan", "--", "vllm", "serve", "llama-3-8b", "--gpu-memory-utilization=nan"],
        2,
        "--gpu-memory-utilization",
    ),
    ("plan-tp0", ["plan", "-tp", "0"], 2, "must be at least 1"),
    ("plan-tp3", ["plan", "-tp", "3"], 2, "must be divisible by tensor parallel size (3)"),
    ("plan-tp1024", ["plan", "llama-3-70b", "-tp", "1024"], 2, "(1024)"),
    ("plan-max-model-len-1e12", ["plan", "--max-model-len", str(10**12)], 2, "absurdly large"),
    ("plan-gpu-memory-1e400", ["plan", "--gpu-memory", "1e400"], 2, "not a finite size"),
    ("plan-gpu-memory-negative", ["plan", "--gpu-memory", "-1GiB"], 2, "is negative"),
    ("plan-gpu-memory-1e30TiB", ["plan", "--gpu-memory", "1e30TiB"], 2, "absurdly large"),
    (  # a bare memory size is GiB on every command (docs/cli.md, Values): bytes without their unit are refused
        "plan-gpu-memory-bytes-no-unit",
        ["plan", "--json", "--gpu-memory", "85899345920"],
        2,
        "85899345920: a bare number is GiB; write the unit",
    ),
    ("plan-free-memory-bytes-no-unit", ["plan", "--free-memory", "42949672960"], 2, "a bare number is GiB"),
    ("plan-host-memory-bytes-no-unit", ["plan", "--host-memory", "549755813888"], 2, "a bare number is GiB"),
    ("plan-gpu-memory-hex", ["plan", "--gpu-memory", "0x10"], 2, "is not a size"),
    ("plan-util-nan", ["plan", "--json", "--gpu-memory-utilization", "nan"], 2, "is not a number"),
    ("plan-util-0", ["plan", "--gpu-memory-utilization", "0"], 2, "must be in (0, 1]"),
    ("plan-kv-bytes-whitespace", ["plan", "--kv-cache-memory-bytes", " "], 2, "is not a size"),
    ("plan-engine-unicode", ["plan", "--engine", "é中😀"], 2, "use vllm, sglang or both"),
    ("plan-engine-version-garbage", ["plan", "--engine-version", "banana"], 2, "not a vLLM version"),
    ("plan-kv-dtype-unknown", ["plan", "--kv-cache-dtype", "fp9"], 2, "unknown KV cache dtype"),
    ("plan-free-memory-above-card", ["plan", "--free-memory", "80GiB"], 2, "more than the card's total"),
    ("plan-unknown-option", ["plan", "--nope"], 2, "No such option: --nope"),
    ("plan-quantization-unicode", ["plan", "-q", "é中😀"], 2, "not a quantization method name"),
    (
        "plan-quantization-path",
        ["plan", "--json", "--quantization", "../../etc/passwd"],
        2,
        "not a quantization method",
    ),
    ("plan-quantization-needs-checkpoint", ["plan", "-q", "awq"], 2, "needs a checkpoint quantised with it"),
    # --- check: deployment specs ---------------------------------------------------------------------------------
    ("check-nul-byte", ["check", "{spec_nul}"], 2, "unacceptable character #x0000"),
    ("check-5000-digit-int", ["check", "--json", "{spec_bigint}"], 2, "number too long"),
    ("check-500-digit-requirement", ["check", "{spec_kv_tokens_huge}"], 2, "requirements.min_kv_tokens"),
    ("check-host-memory-zero", ["check", "{spec_host_zero}"], 2, "host_memory: 0 must be more than 0"),
    ("check-gpu-memory-zero", ["check", "{spec_gpu_memory_zero}"], 2, "gpu_memory: 0 must be more than 0"),
    ("check-long-model", ["check", "{spec_long_model}"], 2, "model: unknown model"),
    ("check-long-gpu", ["check", "{spec_long_gpu}"], 2, "gpu: unknown GPU"),
    ("check-empty-path", ["check", ""], 2, "empty file name"),
    ("check-symlink-loop", ["check", "{loop}"], 2, "symbolic link loop"),
    ("check-directory", ["check", "{adir}"], 2, "is a directory"),
    ("check-missing", ["check", "{missing}"], 2, "no such spec file"),
    ("check-garbage", ["check", "{garbage}"], 2, "not UTF-8"),
    ("check-sparse-1gib", ["check", "{sparse}"], 2, "larger than 1 MiB"),
    ("check-billion-laughs", ["check", "{bomb_yaml}"], 2, "alias bomb"),
    ("check-deep", ["check", "{deep_json}"], 2, "nested too deeply"),
    ("check-list", ["check", "{spec_list}"], 2, "top level: must be a mapping"),
    ("check-python-tag", ["check", "{spec_python_tag}"], 2, "malformed YAML"),
    ("check-nan-utilization", ["check", "{spec_nan_util}"], 2, "not a finite number"),
    ("check-unknown-flag", ["check", "{spec_unknown_flag}"], 2, "unknown flag --bogus-flag"),
    ("check-tp3", ["check", "{spec_tp3}"], 2, "--tensor-parallel-size 3"),
    ("check-duplicate-key", ["check", "{spec_dup_key}"], 2, "duplicate key 'model'"),
    ("check-proc-unreadable", ["check", "/proc/self/mem"], 2, "cannot read"),
    (
        "check-host-memory-nan",
        ["check", str(REPO / "examples/deploy-llama3-8b-h100.yaml"), "--host-memory", "nan"],
        2,
        "--host-memory",
    ),
    # --- plan: model config.json ------------------------------------------------------------------------------
    ("plan-config-5000-digit-int", ["plan", "--json", "{cfg_bigint}"], 2, "number too long"),
    ("plan-config-string-number", ["plan", "{cfg_str}"], 2, "'hidden_size' must be an integer"),
    ("plan-config-kv-heads-3", ["plan", "{cfg_kv3}"], 2, "must divide num_attention_heads"),
    ("plan-config-garbage", ["plan", "{garbage}"], 2, "not UTF-8 text (byte"),
    ("plan-config-sparse-1gib", ["plan", "--model", "{sparse}"], 2, "larger than 64 MiB"),
    ("bw-sparse-1gib", ["tiers", "plan", "--bandwidths", "{sparse}"], 2, "larger than 16 MiB"),
    ("bw-garbage", ["tiers", "plan", "--bandwidths", "{garbage}"], 2, "not UTF-8 text (byte"),
    ("plan-config-trunc", ["plan", "--json", "{trunc_json}"], 2, "not valid JSON"),
    ("plan-config-list", ["plan", "{list_json}"], 2, "expected a JSON object"),
    ("plan-config-deep", ["plan", "{deep_json}"], 2, "nested too deeply"),
    ("plan-config-directory", ["plan", "--model", "{adir}"], 2, "no config.json"),
    ("plan-config-missing", ["plan", "--model", "{missing}"], 2, None),
    # --- explain-oom / read-log: logs ---------------------------------------------------------------------------
    ("explain-oom-directory", ["explain-oom", "--json", "{adir}"], 2, "is a directory"),
    ("explain-oom-missing", ["explain-oom", "{missing}"], 2, "no such file"),
    ("explain-oom-symlink-loop", ["explain-oom", "{loop}"], 2, "Too many levels of symbolic links"),
    ("explain-oom-unreadable", ["explain-oom", "/proc/self/mem"], 2, "/proc/self/mem"),
    ("explain-oom-json-and-markdown", ["explain-oom", "--json", "--markdown", str(OOM_LOG)], 2, "pick one"),
    ("explain-oom-two-logs", ["explain-oom", str(OOM_LOG), str(OOM_LOG)], 2, None),
    ("read-log-directory", ["read-log", "--json", "{adir}"], 2, "is a directory"),
    ("read-log-missing", ["read-log", "{missing}"], 2, "no such file"),
    ("read-log-unreadable", ["read-log", "/proc/self/mem"], 2, "/proc/self/mem"),
    ("read-log-run-99", ["read-log", "--json", str(STARTUP_LOG), "--run", "99"], 2, "--run 99"),
    ("read-log-run-nan", ["read-log", str(STARTUP_LOG), "--run", "nan"], 2, "'--run'"),
    ("read-log-gpu-memory-0", ["read-log", str(STARTUP_LOG), "--gpu-memory", "0"], 2, "--gpu-memory 0"),
    (
        "read-log-gpu-and-memory",
        ["read-log", str(STARTUP_LOG), "--gpu", "h100-sxm", "--gpu-memory", "80GiB"],
        2,
        "not both",
    ),
    (
        "read-log-compare-unknown-model",
        ["read-log", str(STARTUP_LOG), "--compare-plan", "--model", "llama-3-8"],
        2,
        "did you mean",
    ),
    ("models-extra-argument", ["models", "extra"], 2, "unknown model 'extra'"),
    ("gpus-unknown-option", ["gpus", "--bogus"], 2, "No such option: --bogus"),
    ("unknown-command", ["nosuchcommand"], 2, "nosuchcommand"),
    # --- tiers simulate: Mooncake traces ------------------------------------------------------------------------
    (
        "trace-5000-digit-int",
        ["tiers", "simulate", "--json", "--trace", "{trace_bigint}"],
        2,
        "number too long",
    ),
    ("trace-negative-length", ["tiers", "simulate", "--trace", "{trace_neg_len}"], 2, "input_length"),
    ("trace-string-length", ["tiers", "simulate", "--trace", "{trace_str_len}"], 2, "must be an integer"),
    (
        "trace-missing-field",
        ["tiers", "simulate", "--trace", "{trace_missing}"],
        2,
        "missing field 'timestamp'",
    ),
    ("trace-nan-timestamp", ["tiers", "simulate", "--trace", "{trace_nan_ts}"], 2, "timestamp"),
    (
        "trace-hash-ids-string",
        ["tiers", "simulate", "--trace", "{trace_hash_str}"],
        2,
        "hash_ids must be a list",
    ),
    ("trace-list-line", ["tiers", "simulate", "--trace", "{trace_list}"], 2, "expected a JSON object"),
    ("trace-truncated", ["tiers", "simulate", "--trace", "{trace_trunc}"], 2, "line 2: not valid JSON"),
    ("trace-empty", ["tiers", "simulate", "--trace", "{empty}"], 2, "empty trace"),
    ("trace-garbage", ["tiers", "simulate", "--trace", "{garbage}"], 2, "not UTF-8"),
    ("trace-directory", ["tiers", "simulate", "--trace", "{adir}"], 2, "is a directory"),
    ("trace-deep", ["tiers", "simulate", "--trace", "{deep_json}"], 2, "nested too deeply"),
    (
        "trace-and-synthetic",
        ["tiers", "simulate", "--trace", "{trace_good}", "--synthetic", "sessions=2"],
        2,
        "exactly one",
    ),
    (
        "sim-write-policy-empty",
        ["tiers", "simulate", "--trace", "{trace_good}", "--write-policy", ""],
        2,
        "--write-policy ''",
    ),
    (
        "sim-gpu-capacity-nan",
        ["tiers", "simulate", "--trace", "{trace_good}", "--gpu-capacity", "nan"],
        2,
        "--gpu-capacity",
    ),
    (
        "sim-sweep-empty-item",
        ["tiers", "simulate", "--trace", "{trace_good}", "--sweep", "1,,2"],
        2,
        "--sweep",
    ),
    (
        "sim-synthetic-huge",
        ["tiers", "simulate", "--synthetic", "sessions=1000000000,turns=1000000000"],
        2,
        None,
    ),
    (
        "sim-kv-bytes-per-token-huge",
        ["tiers", "simulate", "--json", "--trace", "{trace_good}", "--kv-bytes-per-token", "9" * 23],
        2,
        "--kv-bytes-per-token",
    ),
    ("sim-tp-without-model", ["tiers", "simulate", "--trace", "{trace_good}", "-tp", "2"], 2, "give --model"),
    # --- tiers plan / simulate: bandwidths files -----------------------------------------------------------------
    (
        "bw-5000-digit-int",
        ["tiers", "plan", "--json", "--bandwidths", "{bw_rate_bigint}"],
        2,
        "number too long",
    ),
    ("bw-400-digit-int", ["tiers", "plan", "--bandwidths", "{bw_rate_400_digits}"], 2, "absurdly large"),
    ("bw-list", ["tiers", "plan", "--bandwidths", "{bw_list}"], 2, "expected a JSON object"),
    ("bw-no-schema", ["tiers", "plan", "--bandwidths", "{bw_no_schema}"], 2, "schema is None"),
    ("bw-tier-string", ["tiers", "plan", "--bandwidths", "{bw_tier_str}"], 2, "must be an object"),
    ("bw-rate-string", ["tiers", "plan", "--bandwidths", "{bw_rate_str}"], 2, "read_bytes_per_s"),
    ("bw-rate-negative", ["tiers", "plan", "--bandwidths", "{bw_rate_neg}"], 2, "positive finite"),
    ("bw-rate-nan", ["tiers", "plan", "--bandwidths", "{bw_rate_nan}"], 2, "positive finite"),
    ("bw-empty", ["tiers", "plan", "--bandwidths", "{empty}"], 2, "not valid JSON"),
    ("bw-missing", ["tiers", "plan", "--bandwidths", "{missing}"], 2, "no such file"),
    (
        "bw-sim-400-digit-int",
        ["tiers", "simulate", "--trace", "{trace_good}", "--bandwidths", "{bw_rate_400_digits}"],
        2,
        "absurdly large",
    ),
    ("tiers-plan-tp3", ["tiers", "plan", "-tp", "3"], 2, "--tensor-parallel-size 3"),
    ("tiers-plan-tp1024", ["tiers", "plan", "llama-3-70b", "-tp", "1024"], 2, "--tensor-parallel-size 1024"),
    ("tiers-plan-tier-no-rate", ["tiers", "plan", "--tier", "nvme"], 2, "--tier"),
    # --- tiers bench (rejected before anything is measured) ------------------------------------------------------
    (
        "bench-tp3",
        ["tiers", "bench", "--device", "cpu", "-tp", "3", "--skip-disk"],
        2,
        "--tensor-parallel-size 3",
    ),
    (
        "bench-unknown-gpu",
        ["tiers", "bench", "--device", "cpu", "--skip-disk", "--gpu", "h1OO"],
        2,
        "did you mean h100",
    ),
    (
        "bench-blocks-0",
        ["tiers", "bench", "--device", "cpu", "--blocks", "0", "--skip-disk"],
        2,
        "--blocks 0",
    ),
    (
        "bench-size-huge",
        ["tiers", "bench", "--device", "cpu", "--size", "1e30TiB", "--skip-disk"],
        2,
        "--size",
    ),
    (
        "bench-blocks-and-size",
        ["tiers", "bench", "--device", "cpu", "--size", "1MiB", "--blocks", "3"],
        2,
        "one or the other",
    ),
    ("bench-dir-is-file", ["tiers", "bench", "--device", "cpu", "--dir", "{garbage}"], 2, "not a directory"),
    ("bench-skip-everything", ["tiers", "bench", "--skip-disk", "--skip-device"], 2, "nothing left"),
    ("bench-checksum", ["tiers", "bench", "--device", "cpu", "--checksum", "md5"], 2, "--checksum 'md5'"),
    # --- profile / suggest / validate (rejected before anything is measured) ------------------------------------
    (
        "profile-batched-tokens-1e20",
        ["profile", str(TINY), *FAST, "--max-num-batched-tokens", "9" * 20],
        2,
        "absurdly large",
    ),
    (
        "profile-max-num-seqs-1e30",
        ["profile", str(TINY), *FAST, "--max-num-seqs", "9" * 30],
        2,
        "--max-num-seqs",
    ),
    (
        "profile-max-model-len-1e12",
        ["profile", str(TINY), *FAST, "--max-model-len", str(10**12)],
        2,
        "absurdly large",
    ),
    (
        "profile-block-size-12",
        ["profile", str(TINY), *FAST, "--block-size", "12"],
        2,
        "vLLM accepts 1, 8, 16",
    ),
    ("profile-block-size-1e30", ["profile", str(TINY), *FAST, "--block-size", "9" * 30], 2, "--block-size"),
    ("profile-tp3", ["profile", str(TINY), *FAST, "-tp", "3"], 2, "--tensor-parallel-size 3"),
    ("profile-tp1024", ["profile", str(TINY), *FAST, "-tp", "1024"], 2, "--tensor-parallel-size 1024"),
    ("profile-util-nan", ["profile", str(TINY), *FAST, "--gpu-memory-utilization", "nan"], 2, "is not a number"),
    ("profile-device-tpu", ["profile", str(TINY), "--device", "tpu"], 2, "--device 'tpu'"),
    (
        "profile-device-memory-huge",
        ["profile", str(TINY), "--device", "cpu", "--device-memory", "1e30TiB"],
        2,
        "absurdly",
    ),
    ("profile-compare-unknown", ["profile", str(TINY), *FAST, "--compare", "bogus"], 2, "--compare 'bogus'"),
    (
        "profile-compare-huge-batch",
        ["profile", str(TINY), *FAST, "--compare", "max-num-batched-tokens=" + "9" * 20],
        2,
        "--compare max-num-batched-tokens=",
    ),
    (
        "profile-compare-block-size-12",
        ["profile", str(TINY), *FAST, "--compare", "block-size=12"],
        2,
        "vLLM accepts",
    ),
    (
        "profile-compare-seqs-1e20",
        ["profile", str(TINY), *FAST, "--compare", "max-num-seqs=" + "9" * 20],
        2,
        "absurdly large",
    ),
    ("profile-config-5000-digit-int", ["profile", "{cfg_bigint}", "--device", "cpu"], 2, "number too long"),
    ("profile-save-txt", ["profile", str(TINY), *FAST, "--save", "{tmp}/x.txt"], 2, ".json, .yaml or .yml"),
    (
        "profile-save-unwritable-folder",
        ["profile", str(TINY), *FAST, "--save", "/proc/self/x.json"],
        2,
        "cannot write in",
    ),
    (
        "bench-save-unwritable-folder",
        ["tiers", "bench", "--device", "cpu", "--save", "/sys/x.json"],
        2,
        "cannot write in",
    ),
    ("profile-save-directory", ["profile", str(TINY), *FAST, "--save", "{adir}"], 2, "is a folder"),
    (
        "suggest-from-profile-with-util",
        ["suggest", "--from-profile", str(TINY_PROFILE), "--gpu-memory-utilization", "2"],
        2,
        "--gpu-memory-utilization 2 would be ignored",
    ),
    (
        "suggest-from-profile-with-len",
        ["suggest", "--json", "--from-profile", str(TINY_PROFILE), "--max-model-len", "0"],
        2,
        "--max-model-len 0",
    ),
    (
        "validate-from-profile-with-eager",
        ["validate", "--from-profile", str(TINY_PROFILE), "--device", "cpu", "--enforce-eager"],
        2,
        "--enforce-eager would be ignored",
    ),
    ("suggest-from-garbage", ["suggest", "--from-profile", "{garbage}"], 2, "not UTF-8"),
    ("suggest-from-empty", ["suggest", "--from-profile", "{empty}"], 2, "empty"),
    ("suggest-from-list", ["suggest", "--from-profile", "{list_json}"], 2, None),
    ("suggest-from-bigint", ["suggest", "--from-profile", "{bigint_json}"], 2, "number too long"),
    ("suggest-from-bomb", ["suggest", "--from-profile", "{bomb_yaml}"], 2, "alias bomb"),
    ("suggest-from-deep", ["suggest", "--from-profile", "{deep_json}"], 2, "nested too deeply"),
    ("suggest-nothing", ["suggest"], 2, "give MODEL"),
    (
        "validate-target",
        ["validate", "--from-profile", str(TINY_PROFILE), "--target", "max"],
        2,
        "--target 'max'",
    ),
    (
        "validate-min-free-nan",
        ["validate", "--from-profile", str(TINY_PROFILE), "--min-free", "nan"],
        2,
        "--min-free",
    ),
]


@pytest.mark.parametrize(
    ("args", "expected", "needle"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_qa_hostile_bad_input(
    args: list[str],
    expected: int,
    needle: str | None,
    hostile: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _expand(args, hostile)
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, expected, needle)


# --- nothing the user has is overwritten or lost ------------------------------------------------------------------

FOREIGN = "# my deployment, not a vramctl output\nmodel: llama-3-8b\ngpu: h100-sxm\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["profile", str(TINY), *FAST, "--save", "{target}"], "not a vramctl profile"),
        (
            ["tiers", "bench", "--device", "cpu", "--blocks", "2", "--repeat", "1", "--save", "{target}"],
            "bandwidths",
        ),
        (
            ["tiers", "simulate", "--synthetic", "sessions=2", "--save-trace", "{target}"],
            "not a Mooncake JSONL",
        ),
        (["tiers", "plan", "--plot", "{target}"], "not a PNG or SVG"),
        (
            ["tiers", "simulate", "--trace", "{trace}", "--sweep", "4096", "--plot", "{target}"],
            "not a PNG or SVG",
        ),
    ],
    ids=["profile-save", "bench-save", "save-trace", "tiers-plan-plot", "simulate-plot"],
)
def test_qa_hostile_output_never_clobbers_a_user_file(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--save / --save-trace / --plot onto an existing file that is not ours: exit 2 before any work, file intact."""
    suffix = ".png" if "--plot" in args else (".jsonl" if "--save-trace" in args else ".json")
    target = tmp_path / f"mine{suffix}"
    target.write_text(FOREIGN)
    trace = tmp_path / "t.jsonl"
    trace.write_text(GOOD_TRACE_LINE)
    argv = [a.format(target=target, trace=trace) for a in args]
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, needle)
    assert target.read_text() == FOREIGN
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.jsonl", target.name])


def test_qa_hostile_save_trace_never_replaces_the_trace_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    original = GOOD_TRACE_LINE.replace("}", ', "extra": "kept"}')  # a rewrite would drop the extra field
    trace.write_text(original)
    argv = ["tiers", "simulate", "--trace", str(trace), "--save-trace", str(trace)]
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, "is the --trace being replayed")
    assert trace.read_text() == original


def test_qa_hostile_our_own_outputs_are_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal is for foreign files only: a second `--save-trace` / `--plot` run replaces its own output."""
    for argv in (
        ["tiers", "simulate", "--synthetic", "sessions=2", "--save-trace", str(tmp_path / "s.jsonl")],
        ["tiers", "plan", "--plot", str(tmp_path / "c.svg")],
    ):
        assert main(argv) == 0
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_qa_hostile_failed_save_leaves_the_old_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (disk full at the rename) is one line, exit 2; the previous profile is intact, no temp file."""
    saved = tmp_path / "p.json"
    saved.write_bytes(TINY_PROFILE.read_bytes())

    def disk_full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    argv = [
        "profile",
        str(TINY),
        *FAST,
        "--json",
        "--save",
        str(saved),
    ]  # --json: no progress lines on stderr
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, "--save")
    assert "No space left on device" in err
    assert saved.read_bytes() == TINY_PROFILE.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


# --- the environment: pipes, odd terminals, an ASCII locale -------------------------------------------------------


def _vramctl(
    args: list[str], env: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("VRAMCTL_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "vramctl", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        timeout=120,
        **kwargs,
    )


def test_qa_hostile_broken_pipe_is_quiet() -> None:
    """`vramctl plan --json | head -c 10`: the reader goes away; no traceback, no 'Exception ignored' noise."""
    shell = f"{sys.executable} -m vramctl plan --json | head -c 10; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, timeout=120)
    assert done.stdout == b'{\n  "engin'
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"", done.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"LC_ALL": "POSIX", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
        {"COLUMNS": "10", "LINES": "2"},
        {"COLUMNS": "abc"},
        {"TERM": "dumb", "NO_COLOR": "1"},
    ],
    ids=["ascii-stdout", "posix-locale", "columns-10", "columns-garbage", "dumb-terminal"],
)
@pytest.mark.parametrize(
    "args",
    [["plan"], ["plan", "--json", "--gpu", "h100-sxm"], ["check", "examples/deploy-llama3-8b-h100.yaml"]],
    ids=["plan", "plan-json", "check"],
)
def test_qa_hostile_environment(env: dict[str, str], args: list[str]) -> None:
    """An ASCII-only stdout prints `?` for × ≥ → (was exit 70, UnicodeEncodeError); --json stays exact JSON."""
    done = _vramctl(args, env)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr and done.stderr == b"", done.stderr
    if "--json" in args:
        assert json.loads(done.stdout)["gpu"]
    else:
        assert done.stdout.strip()


# --- pipes as input files: `vramctl check <(render-spec)`, `explain-oom <(kubectl logs …)` -----------------------


def _through_a_fifo(
    tmp_path: Path, content: bytes, argv_for: Any, timeout: float = 60
) -> tuple[int, str, str]:
    """Run the CLI on a named pipe that a writer process fills, like bash's `<(…)` (a subprocess, so a reader that
    blocks or misreads shows as an exit code, not a hung test)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    source = tmp_path / "content"
    source.write_bytes(content)
    argv = argv_for(str(fifo))
    code = f"import sys; from vramctl.cli.main import main; sys.exit(main({argv!r}))"
    writer = subprocess.Popen(["bash", "-c", f"cat {source} > {fifo}"])
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
    finally:
        writer.kill()
        writer.wait()
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    ("content", "argv_for"),
    [
        ((REPO / "examples/deploy-llama3-8b-h100.yaml").read_bytes(), lambda p: ["check", "--json", p]),
        ((TINY / "config.json").read_bytes(), lambda p: ["plan", "--json", "--model", p]),
        (STARTUP_LOG.read_bytes(), lambda p: ["read-log", "--json", p]),
        (GOOD_TRACE_LINE.encode(), lambda p: ["tiers", "simulate", "--json", "--trace", p]),
    ],
    ids=["check-spec", "plan-config", "read-log", "simulate-trace"],
)
def test_qa_hostile_input_through_a_pipe(content: bytes, argv_for: Any, tmp_path: Path) -> None:
    """A spec / config.json through a pipe was 'no such spec file' / 'no config.json in /dev/fd' (exit 2)."""
    code, out, err = _through_a_fifo(tmp_path, content, argv_for)
    assert code == 0, err
    assert json.loads(out)


def test_qa_hostile_explain_oom_through_a_pipe(tmp_path: Path) -> None:
    code, out, err = _through_a_fifo(
        tmp_path, OOM_LOG.read_bytes(), lambda p: ["explain-oom", "--json", p], 5
    )
    assert code == 0, err
    assert json.loads(out)["cause"] != "no-failure"


@pytest.mark.parametrize("command", ["explain-oom", "read-log"])
def test_qa_hostile_binary_log_is_bad_input(
    command: str, hostile: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, hostile["garbage"]]
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, "binary")


@pytest.mark.parametrize("command", ["explain-oom", "read-log"])
@pytest.mark.parametrize("name", ["empty", "sparse", "trunc_json"])
def test_qa_hostile_log_without_failure_is_nothing_found(
    command: str, name: str, hostile: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty log, 1 GiB of NULs, a JSON fragment: exit 3 (nothing found), the answer as JSON on stdout."""
    code, out, err = _run(capsys, [command, "--json", hostile[name]])
    assert code == 3, err
    assert "Traceback" not in err
    assert isinstance(json.loads(out), dict)


def test_qa_hostile_truncated_gzip_log_is_read_up_to_the_cut(
    hostile: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, ["explain-oom", "--json", hostile["trunc_gz"]])
    assert code == 0, err
    result = json.loads(out)
    assert result["cause"] != "no-failure"
    assert any("truncated gzip" in w for w in result["warnings"])


@pytest.mark.parametrize("command", ["explain-oom", "read-log"])
def test_qa_hostile_empty_log_path_is_named(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, ""]
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, "empty")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            (REPO / "examples/deploy-llama3-8b-h100.yaml").read_bytes() + b"# pad\n" * 200_000,
            "larger than 1 MiB",
        ),
        (os.urandom(100_000), "not UTF-8"),
        (b"", "top level: must be a mapping"),
    ],
    ids=["over-1mib", "binary", "empty"],
)
def test_qa_hostile_check_spec_on_stdin(
    data: bytes, needle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`... | vramctl check -`: a spec over 1 MiB was cut at 1 MiB and checked (PASS without the requirements after
    the cut); binary bytes were 'unacceptable character #xdcd8'."""
    import io

    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    )
    argv = ["check", "--json", "-"]
    code, out, err = _run(capsys, argv)
    assert_contract(argv, code, out, err, 2, needle)
