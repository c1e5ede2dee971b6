"""`vramctl watch` against fake vLLM / SGLang servers on loopback: one sample, a dying and restarting server,
bad URLs and bad metrics (one line, exit 2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.watch.fakes import FakeEngine

ROOT = Path(__file__).resolve().parents[2]


def _watch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "watch", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


@pytest.mark.parametrize("kind, names", [("vllm", "vllm:kv_cache_usage_perc"), ("vllm-old", "vllm:gpu_cache_usage_perc"),
                                         ("sglang", "sglang:token_usage")])
def test_once_json(kind: str, names: str) -> None:
    fake = FakeEngine(kind)
    try:
        result = _watch(fake.url, "--once", "--json", "--device", "cpu")
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "up" and data["engine"]["names"] == names
    assert sum(data["terms"].values()) == data["devices"][0]["capacity_bytes"]
    # the fake runs inside this test's process: found from its port
    assert os.getpid() in [p["pid"] for p in data["devices"][0]["processes"]]


def test_once_text_view() -> None:
    fake = FakeEngine("sglang")
    try:
        result = _watch(fake.url, "--once", "--device", "cpu")
    finally:
        fake.stop()
    assert result.returncode == 0 and "KV pool" in result.stdout and "sglang" in result.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_url_is_one_line_exit_2() -> None:
    result = _watch(f"http://127.0.0.1:{_free_port()}", "--once", "--device", "cpu")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unreachable" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "raw, words",
    [("<html>gateway</html>\n", "not a metrics line"), ("node_load1 0.5\nup 1\n", "no vLLM"),
     ('vllm:renamed_in_2030{engine="0"} 1\n', "does not know")],
)
def test_bad_metrics_are_one_line_exit_2(raw: str, words: str) -> None:
    fake = FakeEngine(raw=raw)
    try:
        result = _watch(fake.url, "--once", "--device", "cpu")
    finally:
        fake.stop()
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and words in result.stderr


@pytest.mark.parametrize("args, words", [(["not a url"], "URL"), (["http://127.0.0.1:99999"], "port"),
                                         (["http://127.0.0.1:1", "--json"], "--once or --duration"),
                                         (["http://127.0.0.1:1", "--interval", "0"], "--interval"),
                                         (["http://127.0.0.1:1", "--serve", "127.0.0.1:x"], "--serve")])
def test_bad_usage_is_exit_2(args: list[str], words: str) -> None:
    result = _watch(*args, "--device", "cpu")
    assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1


def test_a_server_that_dies_and_restarts_is_followed() -> None:
    fake = FakeEngine("vllm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vramctl", "watch", fake.url, "--device", "cpu", "--interval", "0.2",
         "--duration", "8", "--json", "--down-timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        fake.wait_for_scrapes(3)
        fake.stop()
        time.sleep(1.0)
        fake.restart()
        out, err = proc.communicate(timeout=60)
    finally:
        fake.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    messages = [e["message"] for e in json.loads(out)["events"]]
    assert any(m.startswith("server down") for m in messages), messages
    assert any(m.startswith("server restarted") for m in messages), messages
    assert json.loads(out)["last"]["status"] == "up"


def test_a_server_that_stays_down_ends_the_watch_with_exit_2() -> None:
    fake = FakeEngine("sglang")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vramctl", "watch", fake.url, "--device", "cpu", "--interval", "0.2", "--duration",
         "30", "--down-timeout", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # the first sample is in: now the server dies
    fake.stop()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    last = err.strip().splitlines()[-1]
    assert "down for" in last and "--down-timeout" in last and "Traceback" not in err
    assert "server down" in err  # said when it happened, before giving up


def test_record_then_explain(tmp_path: Path) -> None:
    fake = FakeEngine("vllm")
    path = tmp_path / "tl.jsonl"
    try:
        result = _watch(fake.url, "--device", "cpu", "--interval", "0.1", "--duration", "1.5",
                        "--record", str(path), "--record-samples", "6")
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    assert len(path.read_text().splitlines()) <= 4  # header + at most 3 samples in the current segment
    from vramctl.watch.ring import read_timeline

    assert 3 <= len(read_timeline(path).samples) <= 6


def test_serve_from_the_cli_on_loopback() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fake = FakeEngine("vllm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vramctl", "watch", fake.url, "--device", "cpu", "--interval", "0.2",
         "--duration", "8", "--serve", ":0", "--label", "pod=vllm-0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("vramctl: exporting on http://127.0.0.1:"), line
        url = line.split()[-1]
        import urllib.request

        body = ""
        for _ in range(50):
            body = urllib.request.urlopen(url, timeout=5).read().decode()
            if "vramctl_memory_bytes" in body:
                break
            time.sleep(0.1)
        names = {s.name: s for f in text_string_to_metric_families(body) for s in f.samples}
        assert names["vramctl_up"].value == 1.0
        assert names["vramctl_capacity_bytes"].labels["pod"] == "vllm-0"
        assert names["vramctl_kv_cache_usage_ratio"].labels["model_name"] == "tiny-llama"
    finally:
        proc.kill()
        proc.wait()
        fake.stop()
