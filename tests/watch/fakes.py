"""Fake engine /metrics servers on loopback, in vLLM's and SGLang's exposition (the names and label sets of
vllm/v1/metrics/loggers.py at v0.32 and sglang python/sglang/srt/metrics/collector.py), with our own numbers."""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import dataclass, field


@dataclass
class EngineState:
    kv_usage: float = 0.25
    running: int = 2
    waiting: int = 0
    preemptions: int = 0
    start_time: float = field(default_factory=lambda: round(time.time(), 2))
    model: str = "tiny-llama"


def vllm_body(s: EngineState, *, old_names: bool = False) -> str:
    labels = f'engine="0",model_name="{s.model}"'
    kv_name = "vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc"
    return "\n".join(
        [
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {s.start_time}",
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(s.running)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {float(s.waiting)}",
            f"# HELP {kv_name} KV-cache usage. 1 means 100 percent usage.",
            f"# TYPE {kv_name} gauge",
            f"{kv_name}{{{labels}}} {s.kv_usage}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{labels}}} {float(s.preemptions)}",
            "# TYPE vllm:cache_config_info gauge",
            'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.9",'
            'kv_cache_memory_bytes="None",num_gpu_blocks="4096"} 1.0',
            "",
        ]
    )


def sglang_body(s: EngineState) -> str:
    labels = f'model_name="{s.model}",tp_rank="0",dp_rank="0"'
    return "\n".join(
        [
            f"process_start_time_seconds {s.start_time}",
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{labels}}} {float(s.running)}",
            f"sglang:num_queue_reqs{{{labels}}} {float(s.waiting)}",
            f"sglang:token_usage{{{labels}}} {s.kv_usage}",
            f"sglang:num_used_tokens{{{labels}}} {int(s.kv_usage * 200000)}",
            f"sglang:max_total_num_tokens{{{labels}}} 200000.0",
            f"sglang:num_retracted_requests_total{{{labels}}} {float(s.preemptions)}",
            "",
        ]
    )


class FakeEngine:
    """A /metrics server on 127.0.0.1; `body` is called per request. stop() / restart() on the same port."""

    def __init__(self, kind: str = "vllm", port: int = 0, *, raw: str | None = None) -> None:
        self.kind = kind
        self.state = EngineState()
        self.raw = raw
        self._port = port
        self.requests = 0
        self.server: http.server.ThreadingHTTPServer | None = None
        self.start()

    def body(self) -> str:
        if self.raw is not None:
            return self.raw
        return sglang_body(self.state) if self.kind == "sglang" else vllm_body(self.state, old_names=self.kind == "vllm-old")

    def start(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                data = owner.body().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    def wait_for_scrapes(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.requests < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.requests} scrapes in {timeout:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def restart(self) -> None:
        self.stop()
        self.state.start_time = round(time.time() + 1.0, 2)
        self.state.preemptions = 0
        self.start()
