"""Issue 16's findings, one test each (hostile input, signals and special files); each failed before its fix.

In-process through `main([...])` where possible; a subprocess where a signal, a FIFO or the environment is the
point. The seeded campaign around them is tests/qa/test_qa_campaign.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from tests.qa import campaign
from vramctl.cli.main import main

REPO = Path(__file__).resolve().parents[2]
TINY, TINY_PROFILE = campaign.TINY, campaign.TINY_PROFILE
SPEC = REPO / "examples" / "deploy-llama3-8b-h100.yaml"
FAST = campaign.FAST_PROFILE
GOOD_TRACE_LINE = '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n'


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, needle: str | None = None) -> str:
    """The bad-input contract: exactly one `vramctl: error:` line (warnings aside), no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("vramctl: warning")]
    assert len(lines) == 1, err
    assert lines[0].startswith("vramctl: error: "), err
    if needle is not None:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def timed_in_child(
    argv: list[str], *, timeout: float = 20, memory_bytes: int = 2 << 30
) -> tuple[int, str, float]:
    """`main(argv)` in a child process capped in time and address space (a bomb or a hang must not take the test
    run down with it): its exit code, its stderr (the timing line removed) and the seconds `main` took."""
    import resource

    code = (
        "import contextlib, io, sys, time; from vramctl.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    main([sys.argv[1], '--help'])  # the command's modules imported: the timing is the work alone\n"
        "t = time.perf_counter(); rc = main(sys.argv[1:])\n"
        "print(f'@@{time.perf_counter() - t:.3f}', file=sys.stderr); sys.exit(rc)"
    )

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=cap,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv}: still running after {timeout} s")
    lines = done.stderr.splitlines()
    seconds = float(lines[-1][2:]) if lines and lines[-1].startswith("@@") else float("inf")
    return done.returncode, "\n".join(line for line in lines if not line.startswith("@@")), seconds


def bomb(levels: int = 10, width: int = 10, key: str = "engine") -> str:
    """Ten levels of ten aliases, 586 bytes as a spec: 10^10 strings once expanded."""
    inner = "[" + ", ".join(["lol"] * width) + "]"
    text = f"&a0 {inner}"
    for level in range(1, levels):
        text = f"&a{level} [" + text + ", " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return f"model: llama-3-8b\ngpu: h100-sxm\n{key}: {text}\n"


# --- 1. output flags never replace a FIFO, a device node or a symbolic link ----------------------------------------

WRITERS = {
    "profile-save": (["profile", str(TINY), *FAST, "--save", "{target}"], ".json"),
    "bench-save": (
        [
            "tiers",
            "bench",
            "--device",
            "cpu",
            "--blocks",
            "2",
            "--repeat",
            "1",
            "--skip-disk",
            "--save",
            "{target}",
        ],
        ".json",
    ),
    "save-trace": (["tiers", "simulate", "--synthetic", "sessions=2", "--save-trace", "{target}"], ".jsonl"),
    "tiers-plan-plot": (["tiers", "plan", "--plot", "{target}"], ".svg"),
    "simulate-plot": (
        ["tiers", "simulate", "--trace", "{trace}", "--sweep", "4096", "--plot", "{target}"],
        ".svg",
    ),
}


def _argv(name: str, target: Path, trace: Path) -> list[str]:
    args, _ = WRITERS[name]
    return [a.format(target=target, trace=trace) for a in args]


@pytest.mark.parametrize("name", list(WRITERS))
def test_output_flag_refuses_a_fifo(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / f"out{WRITERS[name][1]}"
    os.mkfifo(target)
    trace = tmp_path / "t.jsonl"
    trace.write_text(GOOD_TRACE_LINE)
    code, _, err = run(capsys, _argv(name, target, trace))
    assert code == 2, err
    one_error_line(err, "FIFO")
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, "t.jsonl"])


@pytest.mark.parametrize("name", list(WRITERS))
def test_output_flag_refuses_a_link_to_a_pipe(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symbolic link to /proc/self/fd/N where N is a pipe (stdout in CI) became a 0666 regular file."""
    read_end, write_end = os.pipe()
    try:
        target = tmp_path / f"out{WRITERS[name][1]}"
        os.symlink(f"/proc/self/fd/{write_end}", target)
        trace = tmp_path / "t.jsonl"
        trace.write_text(GOOD_TRACE_LINE)
        code, _, err = run(capsys, _argv(name, target, trace))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert code == 2, err
    one_error_line(err, "not a regular file")
    assert os.path.islink(target)


def test_output_flag_refuses_a_device_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "null.jsonl"
    os.symlink("/dev/null", link)
    code, _, err = run(capsys, ["tiers", "simulate", "--synthetic", "sessions=2", "--save-trace", str(link)])
    assert code == 2
    one_error_line(err, "character device")
    assert os.path.islink(link) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_flag_writes_through_a_link_to_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link to an earlier output of ours: the file it points to is replaced, the link stays a link."""
    real = tmp_path / "real.jsonl"
    real.write_text(GOOD_TRACE_LINE)
    link = tmp_path / "link.jsonl"
    os.symlink(real.name, link)
    code, _, err = run(capsys, ["tiers", "simulate", "--synthetic", "sessions=3", "--save-trace", str(link)])
    assert code == 0, err
    assert os.path.islink(link) and os.readlink(link) == real.name
    assert real.read_text() != GOOD_TRACE_LINE and "hash_ids" in real.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "real.jsonl"]


def test_atomic_write_refuses_what_appeared_meanwhile(tmp_path: Path) -> None:
    """The library writer itself (not only the CLI's early check) never renames over a FIFO."""
    from vramctl.core.atomic import write_text_atomic
    from vramctl.core.errors import BadInputError

    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="FIFO"):
        write_text_atomic(fifo, "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert list(tmp_path.iterdir()) == [fifo]


def test_sigkill_leftover_temporary_is_cleaned_by_the_next_save(tmp_path: Path) -> None:
    from vramctl.core.atomic import write_text_atomic

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".p.json.{dead.pid}.abc123.tmp"
    stale.write_text("half a profi")
    alive = tmp_path / f".p.json.{os.getppid()}.xyz789.tmp"  # a save in progress elsewhere: left alone
    alive.write_text("")
    write_text_atomic(tmp_path / "p.json", "{}\n")
    assert not stale.exists()
    assert alive.exists()
    assert (tmp_path / "p.json").read_text() == "{}\n"


# --- 2. YAML alias budget ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["engine", "version", "model", "description"])
def test_alias_bomb_spec_is_refused_fast(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_text(bomb(key=key))
    assert len(spec.read_bytes()) < 600
    code, err, seconds = timed_in_child(["check", str(spec)])
    assert code == 2, err
    assert seconds < 3.0  # an unguarded bomb expands for minutes; 3 s leaves room for a loaded 2-core runner
    one_error_line(err, "alias")


@pytest.mark.parametrize("command", [["suggest"], ["validate", "--device", "cpu"]])
def test_alias_bomb_profile_is_refused_fast(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(bomb(key="schema"))
    code, err, seconds = timed_in_child([*command, "--from-profile", str(profile)])
    assert code == 2, err
    assert seconds < 3.0  # an unguarded bomb expands for minutes; 3 s leaves room for a loaded 2-core runner
    one_error_line(err, "alias")


def test_alias_referring_to_itself_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "loop.yaml"
    spec.write_text("model: llama-3-8b\ngpu: h100-sxm\nengine: &a [*a]\n")
    code, _, err = run(capsys, ["check", str(spec)])
    assert code == 2
    one_error_line(err, "refers to itself")


def test_twenty_thousand_aliased_requirements_are_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["model: llama-3-8b", "gpu: h100-sxm", "requirements:", "  min_concurrency:"]
    lines += ["  - &r {context: 8192, value: 1}"] + ["  - *r"] * 20_000
    spec = tmp_path / "many.yaml"
    spec.write_text("\n".join(lines) + "\n")
    code, err, seconds = timed_in_child(["check", "--json", str(spec)])
    assert code == 0, err
    assert seconds < 5.0
    code, out, err = run(capsys, ["check", "--json", str(spec)])
    assert sum(1 for item in json.loads(out)["checks"] if item["requirement"] == "min_concurrency@8192") == 1


# --- 6. one number and size parser ------------------------------------------------------------------------------

MANTISSA_LESS = ["e5", "E9", "e-5GiB", "e", "+e3", ".e2"]
NUMBER_FLAGS = [
    ["plan", "--gpu-memory", "{v}"],
    ["plan", "--max-model-len", "{v}"],
    ["plan", "--gpu-memory-utilization", "{v}"],
    ["plan", "--kv-cache-memory-bytes", "{v}"],
    ["plan", "--", "vllm", "serve", "llama-3-8b", "--max-num-seqs", "{v}"],
    ["tiers", "plan", "--host-memory", "{v}"],
    ["tiers", "simulate", "--synthetic", "sessions=2", "--gpu-capacity", "{v}"],
    ["tiers", "bench", "--device", "cpu", "--size", "{v}"],
    ["validate", "--from-profile", str(TINY_PROFILE), "--min-free", "{v}"],
    ["read-log", str(REPO / "tests"), "--gpu-memory", "{v}"],
]


@pytest.mark.parametrize("value", [*MANTISSA_LESS, "1e400", "nan", "inf", "-inf", "9" * 400])
@pytest.mark.parametrize("args", NUMBER_FLAGS, ids=lambda a: " ".join(a[:3])[:40])
def test_absurd_numbers_are_bad_input(
    value: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    if value == "inf" and "--gpu-capacity" in args:
        pytest.skip("--gpu-capacity inf is documented: an unlimited GPU tier")
    argv = [a.replace("{v}", value) for a in args]
    code, _, err = run(capsys, argv)
    assert code == 2, err
    one_error_line(err)


@pytest.mark.parametrize(
    "field",
    [
        "gpu_memory: {n}",
        "host_memory: {n}",
        "flags: {{gpu-memory-utilization: {n}}}",
        "requirements: {{min_headroom: {n}}}",
        "requirements: {{max_utilization: {n}}}",
        "requirements: {{min_concurrency: {{context: 8192, value: {n}}}}}",
    ],
)
def test_four_hundred_digit_integer_in_a_spec(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("model: llama-3-8b\ngpu: h100-sxm\n" + field.format(n="9" * 400) + "\n")
    code, _, err = run(capsys, ["check", str(spec)])
    assert code == 2, err
    assert len(one_error_line(err)) < 400  # the integer is named by its length, not printed


def test_unit_parser_directly() -> None:
    from vramctl.core.errors import BadInputError
    from vramctl.core.units import as_float, parse_bytes, parse_number

    for text in [*MANTISSA_LESS, "1e400", "nan", "inf", "1__0", "9" * 5000]:
        with pytest.raises(BadInputError):
            parse_number(text)
        with pytest.raises(BadInputError):
            parse_bytes(text)
    for value in [10**400, float("nan"), True, [1], None]:
        with pytest.raises(BadInputError):
            as_float(value)
    assert parse_number("1.5e3") == 1500.0 and parse_bytes("1e3") == 1000 and parse_bytes(".5KiB") == 512


# --- 3. signals: SIGTERM like SIGINT; the interrupt path never re-imports torch ------------------------------------


def test_sigterm_inside_a_command_is_exit_143(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM had no handler (the process died with no cleanup); now it unwinds like Ctrl-C, with its own code."""
    import signal

    import vramctl.core.check as check_module

    def terminated(*_: object, **__: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends

    monkeypatch.setattr(check_module, "parse_spec", terminated)
    code, _, err = run(capsys, ["check", str(SPEC)])
    assert code == 143
    assert err.strip().splitlines()[-1] == "vramctl: terminated"
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back


def test_interrupt_swallowed_by_a_library_still_stops_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C that a third-party import swallowed (it catches everything) must not let `--save` happen."""
    import signal

    import vramctl.measure.run as run_module

    real = run_module.run_profile

    def swallowing(*args: object, **kwargs: object) -> object:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # what a careless library does
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "run_profile", swallowing)
    saved = tmp_path / "p.json"
    code, _, err = run(capsys, ["profile", str(TINY), *FAST, "--json", "--save", str(saved)])
    assert code == 130, err
    assert not saved.exists()
    assert err.strip().splitlines()[-1].startswith("vramctl: interrupted")


def test_release_never_imports_a_half_initialised_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.abc
    import importlib.machinery
    import types

    from vramctl.measure import oom

    half = types.ModuleType("torch")
    half.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    half.__spec__._initializing = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", half)
    oom.release()  # touched nothing: the half module has no `cuda`

    class Recorder(importlib.abc.MetaPathFinder):
        """Sees every attempt to import torch once it is out of sys.modules (as after an interrupted import)."""

        attempts: ClassVar[list[str]] = []

        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            if name == "torch" or name.startswith("torch."):
                self.attempts.append(name)
                raise ImportError(f"{name}: blocked by the test")
            return None

    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(sys, "meta_path", [Recorder(), *sys.meta_path])
    oom.release()
    assert Recorder.attempts == []  # the cleanup never imports torch again


# --- 4. every input read bounded by the bytes read, not by stat ----------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize(
    "command",
    [
        ["suggest", "--from-profile"],
        ["validate", "--device", "cpu", "--from-profile"],
        ["explain-oom"],
        ["read-log"],
    ],
    ids=["suggest", "validate", "explain-oom", "read-log"],
)
def test_endless_device_input_is_one_line_fast(command: list[str], device: str) -> None:
    code, err, seconds = timed_in_child([*command, device], timeout=30, memory_bytes=1 << 30)
    assert code == 2, err
    one_error_line(err)
    assert seconds < 5.0


def test_endless_fifo_profile_is_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["bash", "-c", f"cat /dev/zero > {fifo}"], stderr=subprocess.DEVNULL)
    try:
        code, err, _ = timed_in_child(
            ["suggest", "--from-profile", str(fifo)], timeout=30, memory_bytes=1 << 30
        )
    finally:
        writer.kill()
        writer.wait()
    assert code == 2, err
    one_error_line(err, "too large")


# --- 5. a NUL run does not swallow the next line ----------------------------------------------------------------

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. "
    "Of the allocated memory 75.12 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
    "unallocated.\n"
)


@pytest.mark.parametrize("nuls", [100 << 10, 5 << 20])
def test_copytruncate_nul_run_keeps_the_next_line(
    nuls: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`logrotate copytruncate`: NULs up to the old size, then the new lines. The OOM line was glued to the NUL
    run, cut at 64 KiB and skipped: `no-failure`, exit 3."""
    log = tmp_path / "server.log"
    log.write_bytes(b"\x00" * nuls + OOM_LINE.encode())
    code, out, err = run(capsys, ["explain-oom", "--json", str(log)])
    assert code == 0, err
    assert json.loads(out)["cause"] != "no-failure"


def test_nul_dropping_in_the_reader_keeps_line_numbers(tmp_path: Path) -> None:
    from vramctl.diagnose.reader import iter_log_lines

    log = tmp_path / "a.log"
    log.write_bytes(b"first\n" + b"\x00" * (70 << 10) + b"second\nthird\x00\x00 line\n")
    lines = [(line.number, line.text) for line in iter_log_lines(log)]
    assert lines == [(1, "first"), (2, "second"), (3, "third line")]


# --- 6. paths: ~name, over-long names, no home ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "~vramctl-no-such-user/model"],
        ["plan", "--model", "~vramctl-no-such-user"],
        ["models", "~vramctl-no-such-user/m"],
        ["profile", "~vramctl-no-such-user/m", "--device", "cpu"],
        ["plan", "a/" + "x" * 5000],
        ["plan", "x" * 5000 + "/config.json"],
        ["models", "org/" + "x" * 5000],
        ["check", "x" * 5000],
        ["explain-oom", "x" * 5000],
        ["read-log", "y" * 5000],
    ],
    ids=lambda a: f"{a[0]}-{a[-1][:12]}",
)
def test_odd_paths_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, argv)
    assert code == 2, err
    assert len(one_error_line(err)) <= 4100


def test_hf_home_with_an_unknown_user(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HOME", "~vramctl-no-such-user/hf")
    code, _, err = run(capsys, ["plan", "org/model"])
    assert code == 2
    one_error_line(err, "HF_HOME")


def test_no_home_directory_at_all(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """HOME unset and no passwd entry (a container's random uid): Path.home() raises RuntimeError."""

    def no_home(*_: object) -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HOME", raising=False)
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Path, "home", classmethod(no_home))
    monkeypatch.setattr(Path, "expanduser", lambda self: no_home() if str(self).startswith("~") else self)
    code, _, err = run(capsys, ["plan", "~/model"])
    assert code == 2, err
    one_error_line(err, "cannot expand")
    code, _, err = run(capsys, ["plan", "org/model"])
    assert code == 2, err
    one_error_line(err, "org/model")  # a Hub id: not in the (offline) HF cache, named in one line


@pytest.mark.parametrize(
    "field", ["hidden_size", "num_hidden_layers", "vocab_size", "max_position_embeddings"]
)
def test_4299_digit_integer_in_config_json(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads((TINY / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps(config).replace(f'"{field}": {config[field]}', f'"{field}": {"9" * 4299}')
    )
    for command in (["models"], ["plan"], ["tiers", "plan", "--model"]):
        code, _, err = run(capsys, [*command, str(tmp_path)])
        assert code == 2, (command, err)
        assert len(one_error_line(err)) <= 4100


# --- tiers bench: --io-size 1TiB, ENOMEM, int3 ------------------------------------------------------------------

BENCH = ["tiers", "bench", "--device", "cpu", "--skip-device", "--size", "4MiB", "--repeat", "1"]


def test_bench_io_size_larger_than_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--io-size 1TiB` asked mmap for 2 TiB of buffers (ENOMEM, exit 70, its data file left): a request is never
    larger than the file."""
    code, out, err = run(capsys, [*BENCH, "--dir", str(tmp_path), "--io-size", "1TiB", "--json"])
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    assert list(tmp_path.iterdir()) == []


def test_bench_buffer_enomem_is_one_line_and_removes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno
    import mmap

    def enomem(*_: object, **__: object) -> None:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", enomem)
    code, _, err = run(capsys, [*BENCH, "--dir", str(tmp_path), "--io-size", "64MiB"])
    assert code == 2, err
    one_error_line(err, "--io-size")
    assert list(tmp_path.iterdir()) == []


def test_bench_unknown_kv_cache_dtype_with_block_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, ["tiers", "bench", "--device", "cpu", "--block-bytes", "2MiB", "--kv-cache-dtype", "int3"]
    )
    assert code == 2
    one_error_line(err, "int3")


# --- 9. small contract breaks -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "llama\nx"],
        ["plan", "--gpu-memory", "8\n0GiB"],
        ["tiers", "simulate", "--synthetic", "sessions=2\nx"],
        ["check", "a\rb"],
        ["gpus", "h100\u2028x"],
    ],
)
def test_error_line_escapes_the_users_newline(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, argv)
    assert code == 2
    assert err.count("\n") == 1 and err.endswith("\n"), repr(err)
    assert len(err.splitlines()) == 1, repr(err)


@pytest.mark.parametrize(
    "argv", [["models", "llama-3-8b"], ["gpus", "h100-sxm"], ["models"], ["gpus"], ["plan"]]
)
def test_output_into_head_exits_0(argv: list[str]) -> None:
    # `head -c 0` leaves before vramctl writes: the broken pipe is certain, not a race with the pipe's buffer
    shell = f"{sys.executable} -m vramctl {' '.join(argv)} | head -c 0; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
