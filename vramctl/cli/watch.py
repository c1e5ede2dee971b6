"""`vramctl watch URL`: the live memory ledger of a running vLLM / SGLang server.

Thin glue: a Sampler (engine /metrics + a device reader) → `watch_loop` (pure core: trends, ring) → render
(rich), and optionally the Prometheus exporter. Never imports torch; pynvml only with a GPU, prometheus_client
only with --serve.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from vramctl.core.errors import BadInputError
from vramctl.render.jsonout import dumps


def _reader(device: str) -> Any:
    from vramctl.watch.procmem import HostReader

    if device == "cpu":
        return HostReader()
    try:
        from vramctl.measure.nvml import NvmlReader

        return NvmlReader()
    except Exception:
        if device == "cuda":
            raise
        return HostReader()


def _sizes(model: str | None, block_size: int | None) -> Any:
    from vramctl.watch.sample import ServerSizes

    if model is None:
        return ServerSizes()
    from vramctl.core.kv import bytes_per_block, kv_bytes_per_token
    from vramctl.core.params import rank_weight_bytes
    from vramctl.registry import load_model

    spec = load_model(model)
    weights = rank_weight_bytes(spec, 1, pad_vocab=True).total
    block = bytes_per_block(spec, block_size=block_size) if block_size else None
    return ServerSizes(
        weights_bytes=weights, kv_block_bytes=block, kv_token_bytes=kv_bytes_per_token(spec), source=spec.name
    )


def _labels(items: list[str]) -> dict[str, str]:
    import re

    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", key) or key.startswith("__"):
            raise BadInputError(f"--label {item!r}: give KEY=VALUE with a Prometheus label name, e.g. pod=vllm-0")
        out[key] = value
    return out


def register(app: typer.Typer) -> None:
    """Add `watch` to the app."""

    @app.command("watch")
    def watch(
        url: str = typer.Argument(..., metavar="URL", help="The server: http://HOST:PORT (its /metrics is read)."),
        interval: float = typer.Option(1.0, "--interval", help="Seconds between samples."),
        once: bool = typer.Option(False, "--once", help="Take one sample and exit."),
        json_out: bool = typer.Option(
            False, "--json", help="Print one JSON object: the sample (--once) or the run's summary (--duration)."
        ),
        device: str = typer.Option("auto", "--device", help="cuda (NVML), cpu (/proc + cgroup) or auto."),
        pid: list[int] = typer.Option([], "--pid", help="The server's processes (default: the local listener on the URL's port and its children)."),
        model: Optional[str] = typer.Option(
            None, "--model", help="The served model (name or config.json folder): splits weights off the server's memory."
        ),
        block_size: Optional[int] = typer.Option(
            None, "--block-size", help="KV block size, when /metrics does not state the pool's bytes (with --model)."
        ),
        serve: Optional[str] = typer.Option(
            None, "--serve", help="Export Prometheus series on HOST:PORT (e.g. 127.0.0.1:9400; loopback unless given)."
        ),
        label: list[str] = typer.Option([], "--label", help="KEY=VALUE added to every exported series (pod, namespace, container)."),
        record: Optional[str] = typer.Option(None, "--record", help="Keep a bounded ring of samples in FILE (and FILE.1)."),
        record_samples: int = typer.Option(3600, "--record-samples", help="Samples the ring keeps on disk (both files)."),
        window: float = typer.Option(300.0, "--window", help="Seconds of samples the trends and alarms look at."),
        duration: Optional[float] = typer.Option(None, "--duration", help="Stop after this many seconds."),
        down_timeout: float = typer.Option(60.0, "--down-timeout", help="Exit 2 when the server stays down this long."),
        timeout: float = typer.Option(2.0, "--timeout", help="Seconds one scrape may take."),
    ) -> None:
        """Watch a running server's memory: the plan's ledger terms live, trends and alarms, a Prometheus exporter.

        Exit 0 at the end of --duration / --once; 2 on an unreachable URL, metrics that are not vLLM's or
        SGLang's, or a server down longer than --down-timeout (a restart is reported and the watch goes on).
        """
        from vramctl.watch.run import watch_loop
        from vramctl.watch.sampler import Sampler
        from vramctl.watch.trends import TrendConfig

        if device not in ("auto", "cuda", "cpu"):
            raise BadInputError(f"--device {device!r}: use cuda, cpu or auto")
        for name, value, low in (("--interval", interval, 0.01), ("--window", window, 1.0), ("--timeout", timeout, 0.01),
                                 ("--down-timeout", down_timeout, 0.0)):
            if not value >= low or value == float("inf"):
                raise BadInputError(f"{name} {value:g}: give a finite number of seconds ≥ {low:g}")
        if duration is not None and not 0 < duration < float("inf"):
            raise BadInputError(f"--duration {duration:g}: give a positive number of seconds")
        if json_out and not once and duration is None:
            raise BadInputError("--json prints one object: use it with --once or --duration")
        labels = _labels(label)
        sizes = _sizes(model, block_size)
        reader = _reader(device)
        sampler = Sampler(url, reader, sizes=sizes, pids=frozenset(pid) if pid else None, timeout_s=timeout)
        config = TrendConfig(window_s=window)
        state = None
        if serve is not None:
            from vramctl.watch.exporter import WatchState, parse_listen
            from vramctl.watch.exporter import serve as start_exporter

            host, port = parse_listen(serve)
            state = WatchState(labels)
            _, bound = start_exporter(state, host, port)
            print(f"vramctl: exporting on http://{host}:{bound}/metrics", file=sys.stderr)
        recorder = None
        if record is not None:
            from vramctl.watch.ring import RingRecorder

            recorder = RingRecorder(
                record, max_samples=record_samples, meta={"url": sampler.url, "interval_s": interval}
            )
        from vramctl.render.watch import render_sample, sample_line

        live: Any = None
        console: Any = None
        if not json_out:
            from rich.console import Console

            console = Console()
            if console.is_terminal and not once:
                from rich.live import Live

                live = Live(console=console, auto_refresh=False)
                live.start()

        def on_sample(sample: Any, report: Any, events: Any) -> None:
            if state is not None:
                state.update(sample, report, sample.status == "restarted")
            if json_out:
                return
            if live is not None:
                live.update(render_sample(sample, report, events), refresh=True)
            elif once:
                console.print(render_sample(sample, report, events))
            else:
                for event in events:
                    print(f"vramctl: {event.message}", file=sys.stderr, flush=True)
                print(sample_line(sample, report), flush=True)

        try:
            result = watch_loop(
                sampler,
                interval_s=interval,
                config=config,
                duration_s=duration,
                max_samples=1 if once else None,
                down_timeout_s=down_timeout,
                recorder=recorder,
                on_sample=on_sample,
            )
        finally:
            if live is not None:
                live.stop()
            if recorder is not None:
                recorder.close()
            reader.close()
        if json_out:
            last = result.last
            if once:
                assert last is not None
                typer.echo(dumps(last.to_json()))
            else:
                typer.echo(
                    dumps(
                        {
                            "samples": result.samples,
                            "last": None if last is None else last.to_json(),
                            "trends": None if result.report is None else result.report.to_json(),
                            "events": [{"t": e.t, "message": e.message} for e in result.events],
                        }
                    )
                )
