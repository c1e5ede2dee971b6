"""A seeded fuzz and fault-injection campaign over every vramctl command, as an attacker would try it.

Each call is an argv built from a command's good arguments with hostile values, hostile files and hostile output
targets mixed in (seeded: the same seed gives the same calls). Most calls run in-process through
`vramctl.cli.main.main` (fast); the signal and special-file cases run as subprocesses (tests/qa/test_qa_campaign.py).

The oracle, for every call:
- crash: exit 70 (internal error), an exit code outside the documented ones, or a traceback on stdout / stderr;
- contract: exit 2 prints exactly one `vramctl: error:` line (warnings aside); `--json` output parses when the
  command answered (exit 0, 1 or 3);
- hang: more than `HANG_S` seconds for a command that does not measure (profile, validate and tiers bench do);
- replaced: a FIFO, a symbolic link or a device node given as an output is still what it was, and the user's own
  file next to it is byte for byte the same;
- memory: the process's peak RSS stays under `MEMORY_BOUND_BYTES` over the whole campaign.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import resource
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "profiles" / "measured" / "tiny-llama"
TINY_PROFILE = REPO / "profiles" / "measured" / "tiny-llama-cpu.json"
SPEC = REPO / "examples" / "deploy-llama3-8b-h100.yaml"
HANG_S = 10.0
MEMORY_BOUND_BYTES = 3 << 30
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 5}
MEASURING = {"profile", "validate", "bench"}

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. "
    "Of the allocated memory 75.12 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
    "unallocated.\n"
)
STARTUP_LINES = (
    "INFO 01-01 00:00:00 [gpu_worker.py:298] Available KV cache memory: 52.53 GiB\n"
    "INFO 01-01 00:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 430,352 tokens\n"
    "INFO 01-01 00:00:00 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 52.53x\n"
)
TRACE_LINE = '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n'

HOSTILE_VALUES = [
    "e5",
    "E9",
    "e-5GiB",
    "+e3",
    ".e2",
    "1e400",
    "-1e400",
    "1e-400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "-1",
    "0",
    "-0",
    "9" * 400,
    "9" * 5000,
    "",
    " ",
    "\n",
    "1\n2",
    "x\ny",
    "é中😀",
    "0x10",
    "1__0",
    "1,2,3",
    "1,0000",
    "--json",
    "-",
    "%s%n",
    "$(touch /tmp/vramctl-pwned)",
    "`id`",
    "../../etc/passwd",
    "auto",
    ".5",
    "1.5GiB",
    "8k",
    "32K",
    "1TiB",
    "1e30TiB",
    "\x00",
    "\t",
    "true",
    "[]",
    "{}",
    "a=b",
    "sessions=1e9",
    "1" * 20,
    "2**64",
    "18446744073709551617",
]
FLAGS = {
    "plan": [
        "--model",
        "--gpu",
        "--gpu-memory",
        "--engine",
        "--engine-version",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--kv-cache-dtype",
        "--block-size",
        "--max-loras",
        "--max-lora-rank",
        "--kv-cache-memory-bytes",
        "--free-memory",
        "--dtype",
        "--mem-fraction-static",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--max-total-tokens",
        "--page-size",
        "--cuda-graph-max-bs",
        "--hicache-ratio",
        "--hicache-size",
        "--kv-offloading-size",
        "--host-memory",
        "-tp",
        "-pp",
        "--quantization",
    ],
    "check": ["--host-memory"],
    "explain-oom": [],
    "read-log": ["--gpu", "--gpu-memory", "--model", "--run"],
    "models": [],
    "gpus": [],
    "tiers plan": [
        "--gpu",
        "--kv-cache-dtype",
        "--prefill-rate",
        "--achieved-flops",
        "--context",
        "--tier",
        "--tokens",
        "--gpu-tokens",
        "--host-tokens",
        "--arrival-rate",
        "--host-memory",
        "--model",
    ],
    "tiers simulate": [
        "--block-size",
        "--gpu-capacity",
        "--host-capacity",
        "--disk-capacity",
        "--write-policy",
        "--eviction",
        "--hierarchy",
        "--prefetch-threshold",
        "--load-back-threshold",
        "--lazy-window",
        "--sweep",
        "--model",
        "--kv-bytes-per-token",
        "--kv-cache-dtype",
        "--gpu",
        "--prefill-rate",
        "--achieved-flops",
        "--synthetic",
    ],
    "suggest": [
        "--kv-cache-memory",
        "--device-memory",
        "--engine-version",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--kv-cache-dtype",
        "--block-size",
        "--dtype",
        "--num-layers",
        "--mem-fraction-static",
    ],
    "validate": ["--kv-cache-memory-bytes", "--target", "--min-free", "--device-memory"],
    "profile": [
        "--device-memory",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--kv-cache-dtype",
        "--block-size",
        "--dtype",
        "--num-layers",
        "--mem-fraction-static",
        "--compare",
        "-tp",
    ],
    "bench": [
        "--blocks",
        "--size",
        "--block-bytes",
        "--block-size",
        "--kv-cache-dtype",
        "--repeat",
        "--io-size",
        "--checksum",
        "--gpu",
        "-tp",
    ],
}
FAST_PROFILE = [
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


@dataclass
class Outcome:
    argv: list[str]
    command: str
    code: int | None
    seconds: float
    problems: list[str]


@dataclass
class Tally:
    """The campaign's figures: calls per command, and every failure by kind."""

    calls: Counter[str] = field(default_factory=Counter)
    exits: Counter[int] = field(default_factory=Counter)
    failures: dict[str, list[Outcome]] = field(default_factory=dict)
    slowest_s: float = 0.0
    peak_rss_bytes: int = 0

    def add(self, outcome: Outcome) -> None:
        self.calls[outcome.command] += 1
        self.exits[outcome.code if outcome.code is not None else -1] += 1
        if outcome.command not in MEASURING:
            self.slowest_s = max(self.slowest_s, outcome.seconds)
        for problem in outcome.problems:
            self.failures.setdefault(problem.split(":", 1)[0], []).append(outcome)

    def count(self, kind: str) -> int:
        return len(self.failures.get(kind, []))

    def summary(self) -> str:
        kinds = ["crash", "contract", "hang", "replaced", "memory"]
        lines = [f"{sum(self.calls.values())} calls; " + ", ".join(f"{k}: {self.count(k)}" for k in kinds)]
        lines.append("per command: " + ", ".join(f"{c} {n}" for c, n in sorted(self.calls.items())))
        lines.append("exit codes: " + ", ".join(f"{c}: {n}" for c, n in sorted(self.exits.items())))
        lines.append(
            f"slowest non-measuring call: {self.slowest_s:.2f} s; peak RSS {self.peak_rss_bytes >> 20} MiB"
        )
        for kind, outcomes in self.failures.items():
            for outcome in outcomes[:5]:
                lines.append(
                    f"  {kind}: {[a[:60] for a in outcome.argv]} -> {outcome.code}: {outcome.problems}"
                )
        return "\n".join(lines)


def make_files(root: Path) -> dict[str, str]:
    """The hostile (and a few good) input files, by name."""
    root.mkdir(parents=True, exist_ok=True)
    bomb = "&a0 [" + ", ".join(["lol"] * 10) + "]"
    for level in range(1, 10):
        bomb = f"&a{level} [{bomb}, " + ", ".join([f"*a{level - 1}"] * 9) + "]"
    config = (TINY / "config.json").read_text()
    files: dict[str, bytes | str] = {
        "garbage": random.Random(0).randbytes(256 << 10),
        "empty": "",
        "spec": SPEC.read_text(),
        "bomb_spec": f"model: llama-3-8b\ngpu: h100-sxm\nengine: {bomb}\n",
        "bomb_profile": f"schema: {bomb}\n",
        "loop_spec": "model: llama-3-8b\ngpu: h100-sxm\nengine: &a [*a]\n",
        "deep": "[" * 50_000 + "]" * 50_000,
        "bigint_spec": "model: llama-3-8b\ngpu: h100-sxm\ngpu_memory: " + "9" * 400 + "\n",
        "huge_int_spec": "model: llama-3-8b\ngpu: h100-sxm\nflags: {max-num-seqs: " + "9" * 4299 + "}\n",
        "cfg_bigint.json": config.replace('"hidden_size": 256', '"hidden_size": ' + "9" * 4299),
        "cfg_400.json": config.replace('"intermediate_size": 1024', '"intermediate_size": ' + "9" * 400),
        "oom.log": "INFO starting\n" + OOM_LINE,
        "nul_oom.log": b"\x00" * (100 << 10) + OOM_LINE.encode(),
        "startup.log": STARTUP_LINES,
        "trace.jsonl": TRACE_LINE * 4,
        "long_line.jsonl": '{"timestamp": 0, "x": "' + "a" * (1 << 20) + '"}\n',
        "bench.json": json.dumps(
            {
                "schema": "vramctl.tiers.bench/1",
                "tiers": {
                    "host-pinned": {
                        "read_bytes_per_s": 1e10,
                        "write_bytes_per_s": 1e10,
                        "method": "m",
                        "verified": True,
                    }
                },
            }
        ),
    }
    out: dict[str, str] = {}
    for name, content in files.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        out[name] = str(path)
    with (root / "sparse").open("wb") as handle:
        handle.truncate(64 << 20)
    out["sparse"] = str(root / "sparse")
    (root / "adir").mkdir(exist_ok=True)
    out["adir"] = str(root / "adir")
    out["missing"] = str(root / "no-such-file")
    for a, b in (("loop1", "loop2"), ("loop2", "loop1")):
        with contextlib.suppress(FileExistsError):
            os.symlink(root / b, root / a)
    out["loop"] = str(root / "loop1")
    out.update(
        {
            "dev_null": "/dev/null",
            "dev_zero": "/dev/zero",
            "dev_urandom": "/dev/urandom",
            "proc": "/proc/self/status",
            "long_name": "x" * 5000,
            "long_path": str(root / ("y" * 300)) + "/config.json",
            "tilde_user": "~vramctl-no-such-user/x",
            "model_dir": str(TINY),
            "profile": str(TINY_PROFILE),
        }
    )
    return out


INPUT_FILES = [
    "garbage",
    "empty",
    "spec",
    "bomb_spec",
    "bomb_profile",
    "loop_spec",
    "deep",
    "bigint_spec",
    "huge_int_spec",
    "cfg_bigint.json",
    "cfg_400.json",
    "oom.log",
    "nul_oom.log",
    "startup.log",
    "trace.jsonl",
    "long_line.jsonl",
    "bench.json",
    "sparse",
    "adir",
    "missing",
    "loop",
    "dev_null",
    "dev_zero",
    "dev_urandom",
    "proc",
    "long_name",
    "long_path",
    "tilde_user",
    "model_dir",
    "profile",
]


TRACE_READER_OWNED_ELSEWHERE: tuple[str, ...] = ()
"""Trace inputs kept out of the campaign: none since the bounded trace reader (issue 15) landed; endless and
over-long input (`/dev/zero`, `/dev/urandom`, a line over the cap) reaches `tiers simulate --trace` too."""


class Targets:
    """Output targets that must never be replaced: a FIFO, links to a FIFO, to /dev/null and to a user's file,
    and the user's file itself. `snapshot()` before, `replaced()` after each call."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.user_file = root / "mine.json"
        self.fifo = root / "fifo.json"
        self.paths: dict[str, Path] = {
            "fifo": self.fifo,
            "link_fifo": root / "link-fifo.json",
            "link_null": root / "link-null.json",
            "link_user": root / "link-mine.json",
            "user": self.user_file,
            "fifo_png": root / "fifo.png",
            "fifo_jsonl": root / "fifo.jsonl",
            "link_null_svg": root / "null.svg",
        }
        self.reset()

    def reset(self) -> None:
        for path in self.paths.values():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self.user_file.write_text("# my notes, not a vramctl output\n")
        os.mkfifo(self.fifo)
        os.mkfifo(self.paths["fifo_png"])
        os.mkfifo(self.paths["fifo_jsonl"])
        os.symlink(self.fifo, self.paths["link_fifo"])
        os.symlink("/dev/null", self.paths["link_null"])
        os.symlink("/dev/null", self.paths["link_null_svg"])
        os.symlink(self.user_file.name, self.paths["link_user"])

    def snapshot(self) -> dict[str, tuple[int, str]]:
        state: dict[str, tuple[int, str]] = {}
        for name, path in self.paths.items():
            mode = os.lstat(path).st_mode
            detail = os.readlink(path) if stat.S_ISLNK(mode) else ""
            if stat.S_ISREG(mode):
                detail = path.read_text()
            state[name] = (stat.S_IFMT(mode), detail)
        state["/dev/null"] = (stat.S_IFMT(os.stat("/dev/null").st_mode), "")
        return state

    def replaced(self, before: dict[str, tuple[int, str]]) -> list[str]:
        try:
            after = self.snapshot()
        except OSError as exc:
            return [f"replaced: {exc}"]
        problems = [
            f"replaced: {name} {before[name]} -> {after.get(name)}"
            for name in before
            if before[name] != after.get(name)
        ]
        leftovers = sorted(p.name for p in self.root.iterdir() if p.name.endswith(".tmp"))
        if leftovers:
            problems.append(f"replaced: temporary files left: {leftovers}")
        return problems


class Hang(BaseException):
    """Raised by SIGALRM in the main thread when a call runs past its bound."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang()


def run_in_process(argv: list[str], *, limit_s: float) -> tuple[int | None, str, str, float, bool]:
    """`main(argv)` with stdout / stderr captured and a SIGALRM bound: (code, out, err, seconds, hung)."""
    from vramctl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(STDIN_BYTES), encoding="utf-8", errors="surrogateescape")
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    started = time.perf_counter()
    code: int | None = None
    hung = False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(stdin):
            code = main(argv)
    except Hang:
        hung = True
    except SystemExit as exc:  # main never raises it; if it does, that is a crash
        code = exc.code if isinstance(exc.code, int) else 70
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - started, hung


STDIN_BYTES = b"model: llama-3-8b\ngpu: h100-sxm\n" + b"\x00garbage\xff" * 10 + b"\n"
"""What `-` reads in the campaign: a spec start, then binary garbage."""


@contextlib.contextmanager
def _stdin(stream: io.TextIOWrapper) -> Iterator[None]:
    import sys

    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


def judge(argv: list[str], command: str, code: int | None, out: str, err: str, hung: bool) -> list[str]:
    problems: list[str] = []
    if hung:
        return [f"hang: over {HANG_S} s"]
    if code == 70 or code not in DOCUMENTED_EXITS:
        problems.append(f"crash: exit {code}: {err.strip()[-300:]}")
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        problems.append("crash: traceback")
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("vramctl: warning")]
        if command == "profile" or command == "validate" or command == "bench":
            lines = [ln for ln in lines if ln.startswith("vramctl:")]  # progress lines aside
        if len(lines) != 1 or not lines[0].startswith("vramctl: error: "):
            problems.append(f"contract: exit 2 without exactly one error line: {lines[:3]}")
    if "--json" in argv and code in (0, 1, 3) and out.strip():
        try:
            json.loads(out)
        except ValueError:
            problems.append("contract: --json output is not JSON")
    return problems


def _value(rng: random.Random) -> str:
    return rng.choice(HOSTILE_VALUES)


def _file(rng: random.Random, files: dict[str, str]) -> str:
    return files[rng.choice(INPUT_FILES)]


def generate(rng: random.Random, files: dict[str, str], targets: Targets) -> tuple[str, list[str]]:
    """One hostile call: (command key, argv)."""
    command = rng.choice(
        ["plan"] * 6
        + ["check"] * 3
        + ["explain-oom"] * 3
        + ["read-log"] * 3
        + ["models", "gpus"]
        + ["tiers plan"] * 3
        + ["tiers simulate"] * 4
        + ["suggest"] * 2
        + ["validate", "profile", "bench"]
    )
    flags = FLAGS[command]
    argv: list[str]
    if command == "plan":
        argv = ["plan"] + (
            [rng.choice([_file(rng, files), _value(rng), "llama-3-8b", "qwen3-8b"])]
            if rng.random() < 0.5
            else []
        )
    elif command == "check":
        argv = ["check", rng.choice([_file(rng, files), files["spec"], files["bomb_spec"], _value(rng)])]
    elif command in ("explain-oom", "read-log"):
        argv = [command, rng.choice([_file(rng, files), files["oom.log"], files["nul_oom.log"], _value(rng)])]
    elif command in ("models", "gpus"):
        argv = [command] + (
            [rng.choice([_value(rng), _file(rng, files), "llama-3-8b", "h100-sxm"])]
            if rng.random() < 0.8
            else []
        )
    elif command == "tiers plan":
        argv = ["tiers", "plan"]
        if rng.random() < 0.3:
            argv += ["--bandwidths", rng.choice([_file(rng, files), files["bench.json"]])]
    elif command == "tiers simulate":
        if rng.random() < 0.5:
            trace = rng.choice([_file(rng, files), files["trace.jsonl"]])
            if trace in {files[name] for name in TRACE_READER_OWNED_ELSEWHERE}:
                trace = files["trace.jsonl"]
            argv = ["tiers", "simulate", "--trace", trace]
        else:
            argv = [
                "tiers",
                "simulate",
                "--synthetic",
                rng.choice(["sessions=2", "sessions=3,turns=2", _value(rng)]),
            ]
    elif command == "suggest":
        argv = [
            "suggest",
            "--from-profile",
            rng.choice([_file(rng, files), files["profile"], files["bomb_profile"]]),
        ]
    elif command == "validate":
        argv = [
            "validate",
            "--from-profile",
            rng.choice([_file(rng, files), files["bomb_profile"]]),
            "--device",
            "cpu",
        ]
    elif command == "profile":
        argv = ["profile", rng.choice([files["model_dir"], _file(rng, files)]), *FAST_PROFILE]
    else:
        argv = [
            "tiers",
            "bench",
            "--device",
            "cpu",
            "--skip-device",
            "--skip-disk",
            "--blocks",
            "2",
            "--repeat",
            "1",
        ]
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        if flags:
            argv += [rng.choice(flags), _value(rng)]
    if command in MEASURING and not any(v in HOSTILE_VALUES for v in argv[2:]) and flags:
        argv += [rng.choice(flags), _value(rng)]  # a measuring command gets at least one hostile value
    writer = {
        "profile": "--save",
        "bench": "--save",
        "tiers simulate": "--save-trace",
        "tiers plan": "--plot",
    }
    if command in writer and rng.random() < 0.4:
        name = rng.choice(list(targets.paths))
        if command == "tiers simulate" and rng.random() < 0.5:
            argv += [
                "--sweep",
                "4096",
                "--plot",
                str(targets.paths[rng.choice(["fifo_png", "link_null_svg", "user"])]),
            ]
        else:
            argv += [writer[command], str(targets.paths[name])]
    if (rng.random() < 0.3 and command not in ("explain-oom", "read-log", "check")) or rng.random() < 0.2:
        argv.append("--json")
    if (
        command in ("explain-oom", "read-log", "check")
        and "--json" in argv
        and "--markdown" not in argv
        and rng.random() < 0.05
    ):
        argv.append("--markdown")
    return command, argv


def campaign(
    seed: int, calls: int, root: Path, *, on_outcome: Callable[[Outcome], None] | None = None
) -> Tally:
    """Run `calls` in-process calls from `seed`; returns the figures."""
    rng = random.Random(seed)
    files = make_files(root / "in")
    targets = Targets(root / "out")
    tally = Tally()
    cwd = os.getcwd()
    os.chdir(root)  # a relative output path lands in the sandbox
    try:
        for _ in range(calls):
            command, argv = generate(rng, files, targets)
            before = targets.snapshot()
            limit = 600.0 if command in MEASURING else HANG_S
            code, out, err, seconds, hung = run_in_process(argv, limit_s=limit)
            problems = judge(argv, command, code, out, err, hung)
            problems += targets.replaced(before)
            if any(p.startswith("replaced") for p in problems):
                targets.reset()
            outcome = Outcome(argv, command, code, seconds, problems)
            tally.add(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
    finally:
        os.chdir(cwd)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tally.peak_rss_bytes = peak
    if peak > MEMORY_BOUND_BYTES:
        tally.failures.setdefault("memory", []).append(
            Outcome([], "all", None, 0.0, [f"memory: peak {peak}"])
        )
    return tally


def iter_mutated_logs(seed: int, count: int) -> Iterator[bytes]:
    """Byte-level mutations of a small OOM log: NUL runs, cuts, flipped bytes, repeated and spliced lines."""
    rng = random.Random(seed)
    base = ("INFO 01-01 00:00:00 starting\n" + STARTUP_LINES + OOM_LINE).encode()
    for _ in range(count):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(6)
            at = rng.randrange(len(data) + 1)
            if kind == 0:
                data[at:at] = b"\x00" * rng.choice([1, 100, 70_000])
            elif kind == 1:
                del data[at:]
            elif kind == 2 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == 3:
                data[at:at] = rng.randbytes(rng.randint(1, 64))
            elif kind == 4:
                data[at:at] = b"\r" * rng.randint(1, 3)
            else:
                data += data[: rng.randint(0, len(data))]
        yield bytes(data)
