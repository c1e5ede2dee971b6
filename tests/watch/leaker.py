"""A test "server": serves vLLM-style /metrics on loopback at steady load and leaks RATE bytes per second
(touched pages, so they are resident), on the wall clock so a busy machine does not change the rate.

python leaker.py RATE_BYTES_PER_S  → prints its port, then runs until killed.
"""

from __future__ import annotations

import http.server
import sys
import threading
import time

from tests.watch.fakes import EngineState, vllm_body

rate = float(sys.argv[1])
state = EngineState(kv_usage=0.3, running=4)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = vllm_body(state).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_address[1], flush=True)
held: list[bytes] = []
start = time.monotonic()
leaked = 0
while True:
    due = int(rate * (time.monotonic() - start))
    if due > leaked:
        held.append(b"\x01" * (due - leaked))  # written, so resident
        leaked = due
    time.sleep(0.02)
