"""`vramctl tiers simulate`: replay a request trace through a GPU prefix cache, a host tier and a disk tier.

    vramctl tiers simulate --trace examples/chat-trace.jsonl --gpu-capacity 2e4 \\
        --host-capacity 3e6
    vramctl tiers simulate --trace T.jsonl --sweep 1e5,1e6,3e6,1e7,unlimited --json
    vramctl tiers simulate --synthetic sessions=200,turns=6,think=exp:240 --model llama-3-8b \\
        --gpu-capacity 20GiB --host-capacity 60GiB --write-policy write_through_selective

Parse → `vramctl.tiers.simulate` → render. Pure Python, no torch. Exit 0, or 2 on bad input.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import typer

from vramctl.core.errors import BadInputError
from vramctl.core.units import parse_bytes, parse_number

DEFAULT_GPU = "h100-sxm"
_UNLIMITED = ("unlimited", "inf", "infinite", "none")
_PURE_NUMBER = re.compile(r"^\s*[+-]?[\d,_]*\.?\d*(?:[eE][+-]?\d+)?\s*$")
_TOKENS = re.compile(r"^\s*([\d.,_eE+]+)\s*([kKmMgG]?)\s*(?:tok|toks|tokens?)\s*$")
_COUNT_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


_MAX_CAPACITY_TOKENS = 1 << 50
"""Above a quadrillion tokens a capacity is a typo for `unlimited` (and overflows JSON readers' numbers)."""


def parse_capacity(text: str, *, flag: str, bytes_per_token: int | None) -> int | None:
    """Tokens (`3e6`, `445,632`), bytes with a unit (`40GiB`, converted with the model's bytes per token),
    or `unlimited`. Zero or negative is an error; so is a capacity above 2^50 tokens."""
    tokens = _parse_capacity(text, flag=flag, bytes_per_token=bytes_per_token)
    if tokens is not None and tokens > _MAX_CAPACITY_TOKENS:
        raise BadInputError(
            f"{flag} {text}: absurdly large (at most {_MAX_CAPACITY_TOKENS:,} tokens; write `unlimited` for no limit)"
        )
    return tokens


def _parse_capacity(text: str, *, flag: str, bytes_per_token: int | None) -> int | None:
    raw = text.strip()
    if raw.lower() in _UNLIMITED:
        return None
    if _PURE_NUMBER.match(raw) and any(ch.isdigit() for ch in raw):
        value = parse_number(raw, what=flag)
        if value <= 0:
            raise BadInputError(f"{flag} {text}: a capacity must be positive (tokens, or bytes with a unit)")
        if value != int(value):
            raise BadInputError(f"{flag} {text}: not a whole number of tokens")
        return int(value)
    if raw.startswith("-"):
        raise BadInputError(f"{flag} {text}: a capacity must be positive (tokens, or bytes with a unit)")
    tokens_match = _TOKENS.match(raw)
    if tokens_match is not None:
        value = parse_number(tokens_match.group(1), what=flag) * _COUNT_SCALE[tokens_match.group(2).lower()]
        if value < 1:
            raise BadInputError(f"{flag} {text}: a capacity must be positive")
        return int(value)
    if bytes_per_token is None and raw[-1:] in "kKmMgGtT" and raw[:-1].replace(".", "", 1).isdigit():
        raise BadInputError(
            f"{flag} {text}: a bare {raw[-1]} suffix means bytes; for tokens write e.g. 3e6 or '3M tokens', "
            f"for bytes give --model"
        )
    size = parse_bytes(raw, what=flag)
    if size <= 0:
        raise BadInputError(f"{flag} {text}: a capacity must be positive")
    if bytes_per_token is None:
        raise BadInputError(
            f"{flag} {text}: a size in bytes needs the model's KV bytes per token (give --model or --kv-bytes-per-token)"
        )
    tokens = size // bytes_per_token
    if tokens <= 0:
        raise BadInputError(f"{flag} {text}: smaller than one token of KV ({bytes_per_token:,} B)")
    return tokens


_MAX_KV_BYTES_PER_TOKEN = 1 << 30
"""1 GiB of KV per token: 200 × a 175B model's without GQA (96 layers × 12,288 × K,V × 2 B = 4.7 MB); a typo."""


def _refuse_overwriting(target: Any, trace: str | None) -> None:
    """--save-trace never replaces the --trace it read (a rewrite drops its extra fields) nor a file that is not a
    Mooncake trace (a user's file); an earlier --save-trace is replaced."""
    import json
    import os

    from vramctl.core.atomic import output_target

    target = output_target(target, flag="--save-trace")  # never a FIFO / device; a symbolic link: its file
    try:
        if not target.is_file() or target.stat().st_size == 0:
            return
        if trace is not None and os.path.samefile(target, trace):
            raise BadInputError(
                f"--save-trace {target}: is the --trace being replayed; not overwriting it (pick another name)"
            )
        with target.open("rb") as handle:
            first = handle.readline(1 << 20).decode("utf-8")
        ours = isinstance(json.loads(first), dict) and "hash_ids" in json.loads(first)
    except (OSError, ValueError, RecursionError):
        ours = False
    if not ours:
        raise BadInputError(
            f"--save-trace {target}: the file exists and is not a Mooncake JSONL trace; not overwriting it "
            "(remove it or pick another name)"
        )


def _blocks(capacity: int | None, block_size: int) -> int | None:
    return None if capacity is None else capacity // block_size


def _sampling_json(
    curve: Any, capacities: list[int | None], block_size: int, size: int | None, seed: int
) -> dict[str, Any] | None:
    """The SHARDS parameters and each point's expected error (null for an exact curve)."""
    if curve is None or curve.sample_rate is None:
        return None
    return {
        "method": curve.method,
        "sample_rate": curve.sample_rate,
        "sample_size": size,
        "seed": seed,
        "sampled_blocks": curve.sampled_blocks,
        "lookup_rate": curve.lookup_rate,
        "expected_error": [curve.expected_error(_blocks(c, block_size)) for c in capacities],
    }


def register(app: typer.Typer) -> None:
    """Add `simulate` to the `tiers` group."""

    @app.command("simulate")
    def tiers_simulate(
        trace: Optional[str] = typer.Option(None, "--trace", help="Mooncake-format JSONL trace."),
        synthetic: Optional[str] = typer.Option(
            None,
            "--synthetic",
            help="Generate a multi-turn chat trace: sessions=N,turns=N,think=exp:240,prompt=512,answer=256,"
            "system=0,rate=1,decode=50,seed=0.",
        ),
        block_size: int = typer.Option(
            512,
            "--trace-block-size",
            "--block-size",
            help="Tokens per trace hash id (512 for the Mooncake traces): the trace's block, not the engine's "
            "KV --block-size (--block-size is the older name of this option).",
        ),
        sort_trace: bool = typer.Option(
            False, "--sort-trace", help="Replay an unsorted trace in timestamp order."
        ),
        gpu_capacity: str = typer.Option(
            "unlimited",
            "--gpu-capacity",
            help="GPU tier: tokens, bytes with a unit (needs --model), or unlimited.",
        ),
        host_capacity: Optional[str] = typer.Option(
            None, "--host-capacity", help="Host tier (none without it)."
        ),
        disk_capacity: Optional[str] = typer.Option(
            None, "--disk-capacity", help="Disk tier (none without it)."
        ),
        write_policy: Optional[str] = typer.Option(
            None,
            "--write-policy",
            help="write_through (SGLang default), write_through_selective, write_back, lazy (vLLM) "
            "[default: write_through; write_back with --hierarchy exclusive].",
        ),
        eviction: str = typer.Option("lru", "--eviction", help="lru, lfu or arc (every tier)."),
        hierarchy: str = typer.Option("inclusive", "--hierarchy", help="inclusive or exclusive."),
        prefetch_threshold: int = typer.Option(
            256, "--prefetch-threshold", help="Tokens; SGLang's L3 prefetch floor."
        ),
        load_back_threshold: int = typer.Option(
            10, "--load-back-threshold", help="Tokens; SGLang's host load-back floor."
        ),
        lazy_window: int = typer.Option(
            16384, "--lazy-window", help="Tokens; vLLM lazy offload target (2 × batch)."
        ),
        sweep: Optional[str] = typer.Option(
            None, "--sweep", help="GPU capacities C1,C2,... (one pass for LRU)."
        ),
        sample_rate: Optional[str] = typer.Option(
            None, "--sample-rate", help="With --sweep: SHARDS spatial sampling at rate R (e.g. 0.01)."
        ),
        sample_size: Optional[int] = typer.Option(
            None, "--sample-size", help="With --sweep: fixed-size SHARDS, at most N sampled blocks."
        ),
        sample_seed: int = typer.Option(0, "--sample-seed", help="Seed of the sampling hash."),
        workers: int = typer.Option(
            1, "--workers", help="With --sweep: count the hash-partitioned shards on N local processes."
        ),
        dask_address: Optional[str] = typer.Option(
            None,
            "--dask",
            help="With --sweep: run the shards on a Dask scheduler (tcp://HOST:PORT) or `local` "
            "(a LocalCluster of --workers processes on 127.0.0.1); needs vramctl[tiers-cluster].",
        ),
        model: Optional[str] = typer.Option(
            None, "--model", help="Model for KV bytes per token (bytes, economics)."
        ),
        kv_bytes_per_token: Optional[int] = typer.Option(
            None, "--kv-bytes-per-token", help="Instead of --model."
        ),
        kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="With --model."),
        tensor_parallel_size: int = typer.Option(
            1, "--tensor-parallel-size", "-tp", help="With --model (per rank)."
        ),
        gpu: str = typer.Option(
            DEFAULT_GPU, "--gpu", help="GPU profile for the host link and FLOP/s (economics)."
        ),
        prefill_rate: Optional[str] = typer.Option(
            None, "--prefill-rate", help="Prefill tokens/s (economics)."
        ),
        achieved_flops: Optional[str] = typer.Option(
            None, "--achieved-flops", help="FLOP/s per GPU (economics)."
        ),
        bandwidths: Optional[str] = typer.Option(
            None, "--bandwidths", help="`tiers bench` results for the links."
        ),
        save_trace: Optional[str] = typer.Option(
            None, "--save-trace", help="Also write the (synthetic) trace replayed, as Mooncake JSONL."
        ),
        json_out: bool = typer.Option(False, "--json", help="One JSON object (docs/tiers.md)."),
        plot: Optional[str] = typer.Option(
            None, "--plot", help="With --sweep: hit rate vs capacity, FILE.png/.svg."
        ),
    ) -> None:
        """Hit rates per tier (token-weighted and per-request), bytes written, recompute avoided vs transfer."""
        from vramctl.cli.tiers_plan import parse_rate
        from vramctl.tiers.simulate import (
            DISK,
            EXCLUSIVE,
            GPU,
            HOST,
            LAZY,
            WRITE_BACK,
            WRITE_THROUGH,
            SimConfig,
            TierConfig,
            TierLinkRate,
            economics,
            lru_sweep,
            simulate,
            validate_config,
        )
        from vramctl.tiers.trace import load_mooncake, parse_synthetic, synthetic_trace

        if (trace is None) == (synthetic is None):
            raise BadInputError("give exactly one of --trace FILE and --synthetic SPEC")
        if block_size <= 0:
            raise BadInputError(f"--trace-block-size {block_size}: must be a positive number of tokens")
        if prefill_rate is not None and achieved_flops is not None:
            raise BadInputError(
                f"--prefill-rate {prefill_rate} and --achieved-flops {achieved_flops}: give one"
            )
        given_rate = parse_rate(prefill_rate, "--prefill-rate")
        given_flops = parse_rate(achieved_flops, "--achieved-flops")
        if model is not None and kv_bytes_per_token is not None:
            raise BadInputError("--model and --kv-bytes-per-token: give one or the other")
        if kv_bytes_per_token is not None and kv_bytes_per_token <= 0:
            raise BadInputError(f"--kv-bytes-per-token {kv_bytes_per_token}: must be positive")
        if kv_bytes_per_token is not None and kv_bytes_per_token > _MAX_KV_BYTES_PER_TOKEN:
            raise BadInputError(
                f"--kv-bytes-per-token {kv_bytes_per_token}: absurdly large (at most {_MAX_KV_BYTES_PER_TOKEN:,}; "
                "a 175B model without GQA holds about 4.7 MB per token)"
            )
        if tensor_parallel_size != 1 and model is None:
            raise BadInputError(
                f"--tensor-parallel-size {tensor_parallel_size}: splits --model's KV heads; give --model "
                "(with --kv-bytes-per-token give the per-rank bytes instead)"
            )
        if tensor_parallel_size < 1:
            raise BadInputError(f"--tensor-parallel-size {tensor_parallel_size}: must be at least 1")
        if plot is not None:
            if sweep is None:
                raise BadInputError(f"--plot {plot}: the hit-rate chart needs --sweep C1,C2,...")
            from vramctl.render.plots import check_plot_target

            check_plot_target(plot)

        from vramctl.registry import load_gpu
        from vramctl.tiers.bandwidths import load_bandwidths

        # Read --gpu and --bandwidths up front: a misspelt card or a missing file is an error even where the
        # run does not reach the economics that use them.
        card = load_gpu(gpu)
        measured = load_bandwidths(bandwidths) if bandwidths is not None else None
        spec = None
        bpt: int | None = kv_bytes_per_token
        if model is not None:
            from vramctl.core.kv import check_tensor_parallel
            from vramctl.core.kv import kv_bytes_per_token as kv_bpt
            from vramctl.registry import load_model

            spec = load_model(model)
            check_tensor_parallel(spec, tensor_parallel_size)
            bpt = kv_bpt(spec, kv_cache_dtype=kv_cache_dtype, tp=tensor_parallel_size)

        if write_policy is not None and not write_policy.strip():
            raise BadInputError(
                f"--write-policy {write_policy!r}: empty (give write_through, write_back, ...)"
            )
        policy = write_policy or (WRITE_BACK if hierarchy == EXCLUSIVE else WRITE_THROUGH)
        tiers = [TierConfig(GPU, parse_capacity(gpu_capacity, flag="--gpu-capacity", bytes_per_token=bpt))]
        if host_capacity is not None:
            tiers.append(
                TierConfig(HOST, parse_capacity(host_capacity, flag="--host-capacity", bytes_per_token=bpt))
            )
        if disk_capacity is not None:
            tiers.append(
                TierConfig(DISK, parse_capacity(disk_capacity, flag="--disk-capacity", bytes_per_token=bpt))
            )
        config = SimConfig(
            tiers=tuple(tiers),
            eviction=eviction,
            write_policy=policy,
            hierarchy=hierarchy,
            prefetch_threshold=prefetch_threshold,
            load_back_threshold=load_back_threshold,
            lazy_window_tokens=lazy_window,
            bytes_per_token=bpt,
        )
        if policy == LAZY and host_capacity is None:
            raise BadInputError("--write-policy lazy offloads to a host tier: give --host-capacity")
        validate_config(config, block_size=block_size)
        capacities: list[int | None] = []
        if sweep is not None:
            items = [item.strip() for item in sweep.split(",")]
            if not any(items):
                raise BadInputError(f"--sweep {sweep!r}: no capacities")
            if not all(items):
                raise BadInputError(f"--sweep {sweep!r}: an empty capacity between commas")
            capacities = [parse_capacity(item, flag="--sweep", bytes_per_token=bpt) for item in items]
            for item, cap in zip(items, capacities, strict=True):
                try:
                    validate_config(
                        SimConfig(tiers=(TierConfig(GPU, cap),), bytes_per_token=bpt), block_size=block_size
                    )
                except BadInputError as exc:
                    problem = str(exc).partition(": ")[2] or str(exc)
                    raise BadInputError(f"--sweep {item}: {problem}") from None

        sampling = sample_rate is not None or sample_size is not None
        fraction: float | None = None
        if sample_rate is not None:
            fraction = parse_number(sample_rate, what="--sample-rate")
            if not 0 < fraction <= 1:
                raise BadInputError(f"--sample-rate {sample_rate}: must be in (0, 1] (e.g. 0.01 for 1 %)")
        if sample_rate is not None and sample_size is not None:
            raise BadInputError(f"--sample-rate {sample_rate} and --sample-size {sample_size}: give one")
        if sample_size is not None and sample_size < 1:
            raise BadInputError(f"--sample-size {sample_size}: must be at least 1 block")
        if workers < 1 or workers > 256:
            raise BadInputError(f"--workers {workers}: must be between 1 and 256")
        scaled = sampling or workers > 1 or dask_address is not None
        single_lru = len(config.tiers) == 1 and config.eviction == "lru"
        if scaled:
            flag = (
                f"--sample-rate {sample_rate}"
                if sample_rate is not None
                else f"--sample-size {sample_size}"
                if sample_size is not None
                else f"--dask {dask_address}"
                if dask_address is not None
                else f"--workers {workers}"
            )
            if sweep is None:
                raise BadInputError(f"{flag}: applies to the one-pass LRU curve; give --sweep C1,C2,...")
            if not single_lru:
                raise BadInputError(
                    f"{flag}: the stack-distance curve models one LRU tier; "
                    + (
                        "drop --host-capacity/--disk-capacity (a tiered sweep replays each point)"
                        if len(config.tiers) > 1
                        else f"drop --eviction {eviction} (only LRU has stack distances)"
                    )
                )
            if sampling and (workers > 1 or dask_address is not None):
                raise BadInputError(f"{flag}: a sampled curve runs in one process; drop --workers/--dask")
        columns = None
        curve: Any = None
        if trace is not None and sampling and not sort_trace and save_trace is None:
            # Streamed: the sampled curve never holds the trace.
            from vramctl.tiers import stackdist

            stream = stackdist.TraceStream(trace, block_size=block_size)
            curve = stackdist.sampled_curve_stream(
                stream, block_size=block_size, rate=fraction, size=sample_size, seed=sample_seed
            )
            data: Any = stream
            source = trace
        elif trace is not None and sweep is not None and single_lru and save_trace is None:
            from vramctl.tiers.stackdist import load_columns

            columns = load_columns(trace, block_size=block_size, sort_by_time=sort_trace)
            data = columns
            source = trace
        elif trace is not None:
            data = load_mooncake(trace, block_size=block_size, sort_by_time=sort_trace)
            source = trace
        else:
            assert synthetic is not None
            data = synthetic_trace(parse_synthetic(synthetic), block_size=block_size)
            source = data.source
        warnings = list(data.warnings)
        if save_trace is not None:
            from pathlib import Path

            from vramctl.core.atomic import write_text_atomic
            from vramctl.tiers.trace import to_mooncake_jsonl

            target = Path(save_trace)
            if target.is_dir() or not (target.parent if str(target.parent) else Path(".")).is_dir():
                raise BadInputError(f"--save-trace {save_trace}: not a file in an existing directory")
            _refuse_overwriting(target, trace)
            try:
                write_text_atomic(target, to_mooncake_jsonl(data), flag="--save-trace")
            except OSError as exc:
                raise BadInputError(f"--save-trace {save_trace}: cannot write ({exc.strerror})") from None

        from dataclasses import replace

        if sweep is not None:
            if curve is not None:
                results = lru_sweep(data, capacities, bytes_per_token=bpt, profile=curve)
            elif single_lru:
                from vramctl.tiers import stackdist

                cols = columns if columns is not None else stackdist.columns_of(data)
                if sampling:
                    curve = stackdist.sampled_curve(cols, rate=fraction, size=sample_size, seed=sample_seed)
                elif dask_address is not None:
                    from vramctl.tiers.cluster import dask_runner

                    curve = stackdist.exact_curve(
                        cols, shards=workers, runner=dask_runner(dask_address, workers)
                    )
                elif workers > 1:
                    curve = stackdist.exact_curve(
                        cols, shards=workers, runner=stackdist.local_runner(workers)
                    )
                else:
                    curve = stackdist.exact_curve(cols)
                results = lru_sweep(data, capacities, bytes_per_token=bpt, profile=curve)
            else:
                results = [
                    simulate(data, replace(config, tiers=(TierConfig(GPU, cap), *config.tiers[1:])))
                    for cap in capacities
                ]
            if plot is not None:
                from vramctl.render.plots import plot_hit_curve

                short_source = source.rsplit("/", 1)[-1] if trace is not None else source

                plot_hit_curve(results, plot, title=f"{short_source}: prefix hit rate vs GPU capacity")
            if json_out:
                from vramctl.render.jsonout import dumps

                out: dict[str, Any] = {
                    "trace": source,
                    "requests": data.num_requests,
                    "input_tokens": data.input_tokens,
                    "block_size": data.block_size,
                    "unique_blocks": data.num_unique_blocks,
                    "method": results[0].method,
                    "sweep": [r.to_json() for r in results],
                    "warnings": warnings,
                    "sampling": _sampling_json(curve, capacities, block_size, sample_size, sample_seed),
                    "workers": workers if curve is not None and not sampling else None,
                    "dask": dask_address if curve is not None and not sampling else None,
                }
                typer.echo(dumps(out))
            else:
                from vramctl.render.tiers import print_renderable, render_sweep

                errors = None
                if curve is not None and curve.sample_rate is not None:
                    errors = [curve.expected_error(_blocks(c, block_size)) for c in capacities]
                print_renderable(render_sweep(results, source=source, warnings=warnings, errors=errors))
                if plot is not None:
                    typer.echo(f"wrote {plot}")
            return

        result = simulate(data, config)
        money = None
        if bpt is not None:
            from vramctl.tiers.crossover import (
                HOST_LATENCY_S,
                HOST_LATENCY_SOURCE,
                NVME_LATENCY_S,
            )
            from vramctl.tiers.crossover import (
                prefill_rate as derive_rate,
            )

            links: dict[str, TierLinkRate] = {
                HOST: TierLinkRate(
                    card.host_link_bytes_per_s,
                    card.host_link_bytes_per_s,
                    HOST_LATENCY_S,
                    f"{card.name} host link (nominal); latency {HOST_LATENCY_SOURCE}",
                ),
                DISK: TierLinkRate(14e9, None, NVME_LATENCY_S, "NVMe Gen5 x4 vendor spec 14 GB/s (nominal)"),
            }
            if measured is not None:
                for tier_name, bench_name in ((HOST, "host-pinned"), (DISK, "disk-direct")):
                    m = measured.get(bench_name)
                    if m is not None:
                        links[tier_name] = TierLinkRate(
                            m.read_bytes_per_s,
                            m.write_bytes_per_s,
                            m.latency_s if m.latency_s is not None else links[tier_name].latency_s,
                            f"measured {bench_name}: {m.method}",
                        )
            rate_tokens = None
            rate_source = ""
            if given_rate is not None:
                rate_tokens = given_rate
                rate_source = "--prefill-rate"
            elif spec is not None:
                flops = given_flops
                rate = derive_rate(spec, card, tp=tensor_parallel_size, achieved_flops=flops)
                rate_tokens, rate_source = rate.tokens_per_s, rate.formula
            if rate_tokens is not None:
                money = economics(
                    result, prefill_tokens_per_s=rate_tokens, prefill_source=rate_source, links=links
                )
        if json_out:
            from vramctl.render.jsonout import dumps

            out = {"trace": source, **result.to_json()}
            out["unique_blocks"] = data.num_unique_blocks
            out["economics"] = money.to_json() if money is not None else None
            out["warnings"] = warnings
            typer.echo(dumps(out))
        else:
            from vramctl.render.tiers import print_renderable, render_simulation

            print_renderable(render_simulation(result, money, source=source, warnings=warnings))
