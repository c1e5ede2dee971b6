"""The watch loop's one step: scrape the engine's /metrics, read the devices, map both onto a Sample.

A failed scrape is a `down` sample (the watch goes on); a scrape after a failure whose server start time
changed (prometheus_client's `process_start_time_seconds`) or whose counters went backwards is a
`restarted` sample: the server's processes are found again.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from vramctl.core.errors import BadInputError
from vramctl.watch import procmem
from vramctl.watch.devices import DeviceReader
from vramctl.watch.engines import EngineMetrics, read_engine
from vramctl.watch.promtext import parse_metrics
from vramctl.watch.sample import DOWN, RESTARTED, UP, Sample, ServerSizes, make_sample

MAX_BODY_BYTES = 16 << 20
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class ScrapeError(Exception):
    """The server did not answer (refused, timed out, an HTTP error): a `down` sample, not bad input."""


def metrics_url(url: str) -> str:
    """`host:port`, `http://host:port` or a full /metrics URL → the /metrics URL."""
    text = url.strip()
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise BadInputError(f"URL {url!r}: give the server as http://HOST:PORT (its /metrics is read)")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInputError(f"URL {url!r}: give the server as http://HOST:PORT (its /metrics is read)")
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise BadInputError(f"URL {url!r}: the port is not a number in 1–65535") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def fetch(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"{url} unreachable ({reason})") from None
    if len(body) > MAX_BODY_BYTES:
        raise BadInputError(f"{url}: the /metrics body is over {MAX_BODY_BYTES >> 20} MiB")
    return body.decode("utf-8", errors="replace")


@dataclass
class Event:
    t: float
    message: str


class Sampler:
    """Keeps what one sample needs of the previous one: the server's pids and its start time."""

    def __init__(
        self,
        url: str,
        reader: DeviceReader,
        *,
        sizes: ServerSizes = ServerSizes(),
        pids: frozenset[int] | None = None,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        fetcher: Callable[[str, float], str] = fetch,
    ) -> None:
        self.url = metrics_url(url)
        self.reader = reader
        self.sizes = sizes
        self.fixed_pids = pids
        self.timeout_s = timeout_s
        self.clock = clock
        self.fetcher = fetcher
        self.pids: frozenset[int] = pids or frozenset()
        self.discovered = False
        self.last_engine: EngineMetrics | None = None
        self.was_down = False
        self.events: list[Event] = []
        parts = urllib.parse.urlsplit(self.url)
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.local = (parts.hostname or "") in LOOPBACK

    def _discover(self) -> None:
        self.discovered = True
        if self.fixed_pids is None and self.local:
            self.pids = procmem.server_pids(self.port)

    def _restarted(self, engine: EngineMetrics) -> bool:
        before = self.last_engine
        if before is None:
            return False
        if engine.start_time_s is not None and before.start_time_s is not None:
            return abs(engine.start_time_s - before.start_time_s) > 0.5
        return (
            engine.preemptions_total is not None
            and before.preemptions_total is not None
            and engine.preemptions_total < before.preemptions_total
        )

    def step(self) -> Sample:
        """One sample. Bad metrics (garbage, unknown names) raise BadInputError; an unreachable server is `down`."""
        t = self.clock()
        try:
            body = self.fetcher(self.url, self.timeout_s)
        except ScrapeError as exc:
            if not self.was_down:
                self.events.append(Event(t, f"server down: {exc}; still watching"))
            self.was_down = True
            return make_sample(t, DOWN, None, self.reader.read(self.pids), self.sizes, error=str(exc))
        engine = read_engine(parse_metrics(body), source=self.url)
        status = UP
        if not self.discovered or self._restarted(engine) or self.was_down:
            self._discover()
        if self._restarted(engine):
            status = RESTARTED
            self.events.append(Event(t, f"server restarted (new start time); processes {sorted(self.pids)}"))
        elif self.was_down:
            self.events.append(Event(t, "server back up (same process)"))
        self.was_down = False
        self.last_engine = engine
        return make_sample(t, status, engine, self.reader.read(self.pids), self.sizes)
