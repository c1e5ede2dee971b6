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
from pathlib import Path

import pytest

from vramctl.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
OOM_LOG = SHARED / "samples" / "oom" / "001.log"
STARTUP_LOG = SHARED / "samples" / "startup" / "001.log"
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
    ("check-billion-laughs", ["check", "{bomb_yaml}"], 2, "unknown key"),
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
    ("plan-config-garbage", ["plan", "{garbage}"], 2, None),
    ("plan-config-trunc", ["plan", "--json", "{trunc_json}"], 2, "not valid JSON"),
    ("plan-config-list", ["plan", "{list_json}"], 2, "expected a JSON object"),
    ("plan-config-deep", ["plan", "{deep_json}"], 2, "nested too deeply"),
    ("plan-config-directory", ["plan", "--model", "{adir}"], 2, "no config.json"),
    ("plan-config-missing", ["plan", "--model", "{missing}"], 2, None),
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
