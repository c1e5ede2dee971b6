"""`vramctl watch` against the real vLLM CPU server under a bounded loopback load, for over two minutes.

Marked `engine`: runs with VRAMCTL_ENGINE_TESTS=1 or `-m engine`, and needs the vLLM CPU environment
(VRAMCTL_ENGINE_VENV, default ~/.cache/vramctl/engine-venv); skipped with the reason otherwise. The server (a 2-layer Llama, head_dim 64, dummy weights) is started
here; the load is a fixed number of completions from 4 threads, bounded in time.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("VRAMCTL_ENGINE_VENV", Path.home() / ".cache" / "vramctl" / "engine-venv"))
PYTHON = VENV / "bin" / "python"
KV_SPACE_GIB = 1
WATCH_S = 130
REQUESTS = 300
LOAD_S = 150
PACE_S = 125 / REQUESTS
"""Request n is not sent before n × PACE_S: the load spans the whole watch instead of ending early."""

TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2,
}


def _engine_ok() -> str | None:
    if not PYTHON.exists():
        return f"needs the vLLM CPU engine environment at {VENV} (set VRAMCTL_ENGINE_VENV)"
    probe = subprocess.run([str(PYTHON), "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return f"the engine environment at {VENV} cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}"
    return None


pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def _asked_for(config: pytest.Config) -> bool:
    """Like the rest of the engine tier: only with VRAMCTL_ENGINE_TESTS=1 or `-m engine` (a server takes minutes)."""
    expr = str(config.getoption("markexpr", default="") or "")
    return os.environ.get("VRAMCTL_ENGINE_TESTS") == "1" or ("engine" in expr and "not engine" not in expr)


class Server:
    """The vLLM CPU server of this module; `restart()` kills it and starts a new one on the same port."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.folder / f"server-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}
        cmd = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.folder),
               "--load-format", "dummy", "--skip-tokenizer-init", "--max-model-len", "512", "--enforce-eager",
               "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 900
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM exited {self.proc.returncode} before serving:\n{self.log.read_text()[-3000:]}")
            try:
                _get(self.url + "/v1/models")
                return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM did not come up in 900 s:\n{self.log.read_text()[-3000:]}")
                time.sleep(2)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def vllm_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not _asked_for(request.config):
        pytest.skip("engine tier: run with VRAMCTL_ENGINE_TESTS=1 or -m engine (starts a vLLM server, ~4 min)")
    reason = _engine_ok()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY))
    server = Server(folder, _free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _complete(url: str, model: str, prompt_len: int) -> bool:
    body = json.dumps(
        {"model": model, "prompt": list(range(3, 3 + prompt_len)), "max_tokens": 48, "ignore_eos": True}
    ).encode()
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status == 200
    except OSError:
        return False


def test_watch_the_real_engine_under_load(vllm_server: Server, tmp_path: Path) -> None:
    url, folder = vllm_server.url, vllm_server.folder
    assert _complete(url, str(folder), 16), "the warm-up request failed"
    done: list[bool] = []
    begin = time.monotonic()
    stop = begin + LOAD_S
    lock = threading.Lock()
    issued = [0]

    def load() -> None:
        while time.monotonic() < stop:
            with lock:
                if issued[0] >= REQUESTS:
                    return
                issued[0] += 1
                n = issued[0]
            time.sleep(max(0.0, begin + n * PACE_S - time.monotonic()))
            done.append(_complete(url, str(folder), 32 + (n % 8) * 24))

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    timeline = tmp_path / "tl.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "vramctl", "watch", url, "--device", "cpu", "--interval", "1", "--duration", str(WATCH_S),
         "--json", "--record", str(timeline), "--record-samples", "600", "--model", str(folder)],
        capture_output=True, text=True, cwd=ROOT, timeout=WATCH_S + 120,
    )
    for thread in threads:
        thread.join(timeout=LOAD_S + 130)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    last = data["last"]
    assert last["status"] == "up", last
    engine = last["engine"]
    assert engine["engine"] == "vllm" and engine["names"] == "vllm:kv_cache_usage_perc"
    assert engine["kv_pool_bytes"] == KV_SPACE_GIB << 30  # VLLM_CPU_KVCACHE_SPACE, from cache_config_info
    device = last["devices"][0]
    assert sum(last["terms"].values()) == device["capacity_bytes"]
    assert len(device["processes"]) >= 2  # the API server and its EngineCore (found from the port)
    assert last["terms"]["weights"] > 0 and last["terms"]["kv_cache"] > 0
    from vramctl.watch.ring import read_timeline

    samples = read_timeline(timeline).samples
    assert len(samples) == data["samples"]
    gaps = [b.t - a.t for a, b in itertools.pairwise(samples)]
    # The watch samples for its whole duration and never stalls. Each sample waits for the server's /metrics,
    # which a busy server on a loaded 2-core machine answers in up to a second or more (CI saw 87 samples in
    # 130 s): the cadence is the interval or the scrape, whichever is longer, so the count is not asserted
    # against the interval; the span and the longest gap (interval + the 2 s scrape timeout + slack) are.
    assert samples[-1].t - samples[0].t >= WATCH_S - 5, (len(samples), samples[-1].t - samples[0].t)
    assert max(gaps) <= 1 + 2 + 5, f"a {max(gaps):.1f} s gap between samples"
    assert len(samples) >= WATCH_S / 3, len(samples)
    busy = [s for s in samples if s.engine is not None and s.engine.running > 0]
    assert busy and busy[-1].t - busy[0].t >= 100, "the load did not span the watch"
    report_path = os.environ.get("VRAMCTL_ENGINE_WATCH_REPORT")
    if report_path:  # what the run saw, for docs and the report
        summary = {
            "samples": len(samples), "busy_samples": len(busy),
            "gap_s_median_max": [sorted(gaps)[len(gaps) // 2], max(gaps)], "requests_ok": sum(done), "requests": len(done),
            "max_running": max((s.engine.running for s in samples if s.engine), default=0),
            "max_waiting": max((s.engine.waiting for s in samples if s.engine), default=0),
            "max_kv_usage": max((s.engine.kv_usage or 0.0 for s in samples if s.engine), default=0.0),
            "transient_first_last_max": [samples[0].term("transient"), samples[-1].term("transient"),
                                         max(s.term("transient") for s in samples)],
            "server_first_last": [samples[0].server_bytes, samples[-1].server_bytes],
            "watch": data,
        }
        Path(report_path).write_text(json.dumps(summary, indent=1))
    assert busy, "the load never showed in vllm:num_requests_running"
    assert sum(done) >= 20, f"only {sum(done)} of {len(done)} requests completed"
    causes = [a["cause"] for a in data["trends"]["alarms"]]
    assert "memory-leak" not in causes, data["trends"]


def test_watch_follows_a_real_restart(vllm_server: Server, tmp_path: Path) -> None:
    """The server is killed and started again on the same port: the watch says so and goes on."""
    watch = subprocess.Popen(
        [sys.executable, "-m", "vramctl", "watch", vllm_server.url, "--device", "cpu", "--interval", "1",
         "--down-timeout", "900", "--record", str(tmp_path / "tl.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    messages: list[str] = []
    try:
        assert watch.stdout is not None and watch.stderr is not None
        first = watch.stdout.readline()
        assert "| up |" in first, first
        from vramctl.watch.procmem import server_pids

        old_pids = set(server_pids(vllm_server.port))
        vllm_server.stop()
        vllm_server.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = watch.stderr.readline()
            if line:
                messages.append(line.strip())
            if any("server restarted" in m for m in messages):
                break
    finally:
        watch.terminate()
        watch.wait(timeout=60)
    assert any(m.startswith("vramctl: server down") for m in messages), messages
    restarted = next(m for m in messages if "server restarted" in m)
    assert old_pids and not old_pids & set(json.loads(restarted[restarted.index("[") :])), (old_pids, restarted)
    from vramctl.watch.ring import read_timeline

    statuses = [s.status for s in read_timeline(tmp_path / "tl.jsonl").samples]
    assert "down" in statuses and "restarted" in statuses

