"""The seeded hostile-input campaign (tests/qa/campaign.py): a fast slice in every run, the whole of it behind the
`campaign` marker (`python -m pytest -m campaign tests/qa/test_qa_campaign.py`; figures in docs/hostile-input.md).

The whole campaign: >= 10,000 in-process calls over every command, 1,500 mutated logs through explain-oom and
read-log, and signals / special files in subprocesses. Set VRAMCTL_CAMPAIGN_REPORT=FILE to write its figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.qa import campaign

FAST_SLICE_CALLS = 150
FULL_CALLS = 10_500
FULL_SEEDS = (1, 2, 3, 4, 5, 6, 7)


def _assert_clean(tally: campaign.Tally) -> None:
    assert not tally.failures, tally.summary()


def test_campaign_fast_slice(tmp_path: Path) -> None:
    """A seeded slice of the campaign: no crash, no broken contract, no hang, nothing replaced."""
    tally = campaign.campaign(16, FAST_SLICE_CALLS, tmp_path)
    _assert_clean(tally)
    assert sum(tally.calls.values()) == FAST_SLICE_CALLS
    assert len(tally.calls) >= 10  # the slice reaches (nearly) every command


def test_mutated_logs_fast_slice(tmp_path: Path) -> None:
    _assert_clean(_logs(tmp_path, seed=16, count=40))


def _logs(tmp_path: Path, *, seed: int, count: int) -> campaign.Tally:
    tally = campaign.Tally()
    log = tmp_path / "mutated.log"
    for n, data in enumerate(campaign.iter_mutated_logs(seed, count)):
        log.write_bytes(data)
        command = "explain-oom" if n % 2 == 0 else "read-log"
        argv = [command, "--json", str(log)]
        code, out, err, seconds, hung = campaign.run_in_process(argv, limit_s=campaign.HANG_S)
        tally.add(
            campaign.Outcome(
                argv, command, code, seconds, campaign.judge(argv, command, code, out, err, hung)
            )
        )
    return tally


# --- subprocess cases: signals at any moment, SIGKILL leftovers --------------------------------------------------

PROFILE = [
    sys.executable,
    "-m",
    "vramctl",
    "profile",
    str(campaign.TINY),
    *campaign.FAST_PROFILE,
]


def signal_run(argv: list[str], signum: int, delay_s: float, *, cwd: Path) -> tuple[int, str]:
    """Start `argv` in its own process group, send `signum` to the group after `delay_s` (as a terminal's Ctrl-C
    does), and return (exit code, stderr)."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    time.sleep(delay_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def during_interpreter_startup(err: str) -> bool:
    """The signal came while Python itself started (its `site` module, `.pth` files), before vramctl's first line:
    the interpreter's own traceback, no vramctl frame in it (docs/limitations.md)."""
    return "init_import_site" in err or ("Traceback" in err and "vramctl" not in err)


def judge_signal(code: int, err: str, signum: int, saved: Path | None) -> list[str]:
    if during_interpreter_startup(err):
        return []
    problems = []
    expected = 128 + signum
    if code not in (expected, 0):  # 0: the run finished before the signal came
        problems.append(f"crash: exit {code}")
    if "Traceback" in err:
        problems.append("crash: traceback")
    if code == expected:
        last = [ln for ln in err.splitlines() if ln.strip()][-1:]
        word = "terminated" if signum == signal.SIGTERM else "interrupted"
        if not last or not last[0].startswith(f"vramctl: {word}"):
            problems.append(f"contract: last line {last}")
        if saved is not None and saved.exists():
            problems.append("replaced: --save written after the interrupt")
    return problems


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_profile_interrupted_early_and_late(signum: int, tmp_path: Path) -> None:
    """At 0.4 s (inside the imports), 1.2 s (inside `import torch`) and 3 s (measuring): the clean interrupted
    path, exit 130 / 143, nothing written."""
    saved = tmp_path / "p.json"
    for delay in (0.4, 1.2, 3.0):
        code, err = signal_run([*PROFILE, "--save", str(saved)], signum, delay, cwd=tmp_path)
        assert judge_signal(code, err, signum, saved) == [], (delay, code, err[-2000:])
        if code == 0:  # the run finished before the signal came (a fast or idle machine): its save is legitimate
            saved.unlink(missing_ok=True)
    assert list(tmp_path.iterdir()) == []  # no temporary left behind by an interrupted save


def test_profile_tensor_parallel_ctrl_c_has_no_rank_tracebacks(tmp_path: Path) -> None:
    """-tp 2 on gloo: Ctrl-C reaches the whole process group; the ranks start with SIGINT blocked and the parent
    kills them: one line, exit 130, no rank left behind (was ~80 lines of KeyboardInterrupt tracebacks)."""
    for delay in (4.0, 2.5, 1.5):  # the ranks must be up: a run that finished first (exit 0) is tried sooner
        code, err = signal_run([*PROFILE, "-tp", "2", "--json"], signal.SIGINT, delay, cwd=tmp_path)
        assert judge_signal(code, err, signal.SIGINT, None) == [], err[-3000:]
        if code != 0:
            assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err[-3000:]
            return
    pytest.skip("every -tp 2 run finished before its Ctrl-C (an idle machine); nothing was interrupted")


def test_bench_sigterm_removes_its_data_file(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "vramctl",
        "tiers",
        "bench",
        "--device",
        "cpu",
        "--skip-device",
        "--dir",
        str(tmp_path),
        "--size",
        "256MiB",
        "--repeat",
        "3",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".kv") for p in tmp_path.iterdir()):  # SIGTERM while the data file exists
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "vramctl: terminated"
    assert list(tmp_path.iterdir()) == []


def test_bench_cleans_a_sigkill_leftover(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f"vramctl-tiers-bench-{dead.pid}-0123456789.direct.kv"
    leftover.write_bytes(b"\0" * 4096)
    mine = tmp_path / "vramctl-tiers-bench-notes.txt"  # not in our form: stays
    mine.write_text("mine")
    argv = [
        "tiers",
        "bench",
        "--device",
        "cpu",
        "--skip-device",
        "--dir",
        str(tmp_path),
        "--size",
        "4MiB",
        "--repeat",
        "1",
        "--json",
    ]
    code, out, err, _, _ = campaign.run_in_process(argv, limit_s=120)
    assert code == 0, err
    assert not leftover.exists() and mine.exists()
    assert any("left in" in note for note in json.loads(out)["disk"]["notes"]), out


# --- the whole campaign ----------------------------------------------------------------------------------------


@pytest.mark.campaign
def test_campaign_full(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """>= 10,000 in-process calls over every command, 1,500 mutated logs, signals at 12 moments per signal."""
    if "campaign" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the whole campaign runs with `-m campaign` (minutes); the fast slice runs always")
    started = time.perf_counter()
    total = campaign.Tally()
    per_seed = FULL_CALLS // len(FULL_SEEDS)
    for seed in FULL_SEEDS:
        tally = campaign.campaign(seed, per_seed, tmp_path / f"seed{seed}")
        for name, n in tally.calls.items():
            total.calls[name] += n
        total.exits.update(tally.exits)
        for kind, outcomes in tally.failures.items():
            total.failures.setdefault(kind, []).extend(outcomes)
        total.slowest_s = max(total.slowest_s, tally.slowest_s)
        total.peak_rss_bytes = max(total.peak_rss_bytes, tally.peak_rss_bytes)
    logs = _logs(tmp_path, seed=99, count=1500)
    for name, n in logs.calls.items():
        total.calls[f"{name} (mutated log)"] += n
    total.exits.update(logs.exits)
    for kind, outcomes in logs.failures.items():
        total.failures.setdefault(kind, []).extend(outcomes)
    signal_calls = 0
    startup_signals = 0
    for signum in (signal.SIGINT, signal.SIGTERM):
        for delay in (0.3, 0.45, 0.6, 0.8, 1.0, 1.2, 1.6, 2.0, 2.5, 3.0, 4.0, 6.0):
            saved = tmp_path / "sig.json"
            code, err = signal_run([*PROFILE, "--save", str(saved)], signum, delay, cwd=tmp_path)
            problems = judge_signal(code, err, signum, saved)
            startup_signals += during_interpreter_startup(err)
            total.add(
                campaign.Outcome(
                    ["profile", signal.Signals(signum).name, str(delay)],
                    "profile (signal)",
                    code,
                    0.0,
                    problems,
                )
            )
            signal_calls += 1
            if saved.exists():
                saved.unlink()
    elapsed = time.perf_counter() - started
    report = os.environ.get("VRAMCTL_CAMPAIGN_REPORT")
    if report:
        Path(report).write_text(
            json.dumps(
                {
                    "calls": dict(total.calls),
                    "total_calls": sum(total.calls.values()),
                    "exit_codes": {str(k): v for k, v in sorted(total.exits.items())},
                    "failures": {k: len(v) for k, v in total.failures.items()},
                    "slowest_non_measuring_s": round(total.slowest_s, 2),
                    "peak_rss_mib": total.peak_rss_bytes >> 20,
                    "signal_runs": signal_calls,
                    "signals_during_interpreter_startup": startup_signals,
                    "seconds": round(elapsed, 1),
                    "summary": total.summary(),
                },
                indent=2,
            )
            + "\n"
        )
    assert sum(total.calls.values()) >= 10_000
    _assert_clean(total)


def test_a_signal_after_the_run_ends_keeps_its_exit_code(tmp_path: Path) -> None:
    """A SIGTERM that lands while the interpreter shuts down (here: sent by an atexit hook, after the command
    returned 0) must not turn the finished run into a killed one (exit -15, seen under load in CI) or into a
    "terminated" one (143)."""
    script = (
        "import atexit, os, signal, sys\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "sys.argv = ['vramctl', 'gpus', '--json']\n"
        "from vramctl.__main__ import run\n"
        "run()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "terminated" not in proc.stderr


@pytest.mark.parametrize("committed", [True, False])
def test_an_interrupt_after_the_save_does_not_claim_nothing_was_saved(committed: bool, tmp_path: Path) -> None:
    """`profile --save`: once the file is in place (`interrupts.commit()`), a SIGTERM while the result prints is
    ignored (exit 0, the file stays); before it, the same signal stops the run (Terminated, exit 143)."""
    script = (
        "import os, signal, time\n"
        "from vramctl.core import interrupts\n"
        "with interrupts.handling_signals():\n"
        f"    {'interrupts.commit()' if committed else 'pass'}\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(0.2)\n"
        "        print('finished')\n"
        "    except interrupts.Terminated:\n"
        "        print('terminated')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ("finished" if committed else "terminated")
