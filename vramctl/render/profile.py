"""Rich output of `profile`, `suggest` and `validate` (the ledger itself via render/ledger.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramctl.core.suggest import SuggestResult
from vramctl.core.units import GiB, format_bytes, format_count
from vramctl.core.verdicts import Verdict
from vramctl.render.ledger import render_ledger

if TYPE_CHECKING:
    from vramctl.measure.profiler import ProfileResult
    from vramctl.measure.run import Comparison, ValidateResult


def _gib(num: int) -> str:
    return f"{num / GiB:,.2f} GiB"


def _settings_line(settings: dict[str, Any]) -> str:
    parts = [
        f"u={settings['gpu_memory_utilization']}",
        f"max_model_len={settings['max_model_len']}",
        f"max_num_batched_tokens={settings['max_num_batched_tokens']}",
        f"max_num_seqs={settings['max_num_seqs']}",
        f"block_size={settings['block_size']}",
        f"kv_cache_dtype={settings['kv_cache_dtype']}",
    ]
    if settings.get("enforce_eager"):
        parts.append("enforce_eager")
    if settings.get("tensor_parallel_size", 1) > 1:
        parts.append(f"tp={settings['tensor_parallel_size']}")
    if settings.get("num_layers"):
        parts.append(f"num_layers={settings['num_layers']}")
    return ", ".join(parts)


def render_profile(result: ProfileResult) -> RenderableType:
    """Header, the measured ledger, the KV numbers, SGLang's numbers from the same run, notes, timings."""
    r = result
    settings = r.resolved.to_json()
    head = Text()
    head.append(f"{r.model.name}", style="bold")
    head.append(f" on {r.device.name}  (vLLM {r.resolved.engine_version} semantics, measured)\n")
    head.append(_settings_line(settings), style="dim")
    title = f"measured budget, rank {r.binding_rank}" if len(r.ranks) > 1 else "measured budget"
    kv = Text()
    kv.append("\nKV cache: ", style="bold")
    kv.append(
        f"{_gib(r.kv_cache_bytes)} → {format_count(r.num_blocks)} blocks of {r.resolved.block_size} tokens "
        f"({format_bytes(r.bytes_per_block)} each), {format_count(r.kv_tokens)} tokens, "
        f"max concurrency {r.max_concurrency:.2f}x at {format_count(r.resolved.max_model_len)} tokens; "
    )
    kv.append(str(r.verdict), style="green" if r.verdict == Verdict.FITS else "red")
    b = r.binding
    kv.append(
        f"\nnon-KV = consumed {_gib(b.total_consumed_bytes)} + activation peak {_gib(b.transient_peak_bytes)}"
        f" = {_gib(b.non_kv_bytes)}; graphs: estimate {_gib(b.cuda_graph_estimate_bytes)}"
        f", actual pool {_gib(b.cuda_graph_actual_bytes)}"
        f" ({len(b.cuda_graph_samples_bytes)} captures)"
    )
    parts: list[RenderableType] = [head, render_ledger(r.ledger, title), kv]
    if r.sglang is not None:
        s = r.sglang
        line = Text()
        line.append("SGLang from the same run: ", style="bold")
        if s.max_total_num_tokens <= 0:
            # a negative pool is not a size: say that SGLang stops, and with which fraction
            line.append(
                f"no KV pool: mem_fraction_static {s.mem_fraction_static:.3f} ({s.fraction_source}) of "
                f"{_gib(s.pre_load_free_bytes)} free before load leaves nothing after the weights "
                f"({_gib(s.post_load_free_bytes)} free); SGLang would stop at start-up",
                style="red",
            )
        else:
            line.append(
                f"mem_fraction_static {s.mem_fraction_static:.3f} ({s.fraction_source}); free before load "
                f"{_gib(s.pre_load_free_bytes)}, after {_gib(s.post_load_free_bytes)} → KV "
                f"{_gib(s.kv_cache_bytes)} = {format_count(s.max_total_num_tokens)} tokens of "
                f"{format_count(s.cell_bytes_per_token)} B"
            )
        parts.append(line)
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    timing = ", ".join(f"{name} {sec:.2f} s" for name, sec in b.phase_seconds.items())
    parts.append(Text(f"phases: {timing}; wall {r.wall_seconds:.2f} s", style="dim"))
    return Group(*parts)


def render_comparisons(base: ProfileResult, comparisons: list[Comparison]) -> RenderableType:
    """One table per flipped flag: each term's bytes, the change, and whether it moved."""
    parts: list[RenderableType] = []
    for c in comparisons:
        table = Table(
            title=f"--compare {c.flag}={c.value}", title_justify="left", show_edge=False, pad_edge=False
        )
        table.add_column("term")
        table.add_column("base GiB", justify="right")
        table.add_column(f"{c.flag}={c.value} GiB", justify="right")
        table.add_column("Δ MiB", justify="right")
        table.add_column("moved")
        for ch in c.changes:
            moved = ch.name in c.moved
            table.add_row(
                ch.name,
                f"{ch.base_bytes / GiB:,.3f}",
                f"{ch.other_bytes / GiB:,.3f}",
                f"{ch.delta_bytes / (1 << 20):+,.1f}",
                Text("yes", style="bold yellow") if moved else "",
            )
        # the pool's capacity moves without any term moving when the bytes per block change (kv-cache-dtype)
        blocks_delta = c.result.num_blocks - base.num_blocks
        table.add_row(
            "blocks",
            format_count(base.num_blocks),
            format_count(c.result.num_blocks),
            f"{blocks_delta:+,}" if blocks_delta else "",
            Text("yes", style="bold yellow") if blocks_delta else "",
        )
        parts.append(table)
    return Group(*parts)


def render_suggest(result: SuggestResult, *, model: str, device: str) -> RenderableType:
    table = Table(
        title=f"explicit KV cache size for {model} on {device}",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("target")
    table.add_column("KV GiB", justify="right")
    table.add_column("blocks", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("concurrency", justify="right")
    targets = (("fit the requested memory", result.fit_requested), ("fill the card", result.fill_gpu))
    for label, s in targets:
        table.add_row(
            label,
            f"{s.kv_cache_memory_bytes / GiB:,.2f}",
            format_count(s.num_blocks),
            format_count(s.kv_tokens),
            f"{s.max_concurrency:.2f}x",
        )
    flags = Text()
    for label, s in targets:
        flags.append(f"{label}:\n", style="bold")
        if not s.fits:
            flags.append(
                f"  no KV block fits: non-KV {_gib(result.non_kv_bytes)} + the {result.redundancy_bytes >> 20} MiB "
                f"buffer leave {_gib(s.kv_cache_memory_bytes)} (no flag to give)\n",
                style="red",
            )
            continue
        flags.append(f"  vllm serve … {s.vllm_flag}\n")
        flags.append(f"  python -m sglang.launch_server … {s.sglang_flags}\n")
    graphs = (
        "no CUDA-graph pool"
        if result.graph_source == "none"
        else f"graph pool {_gib(result.graph_bytes)} from the {result.graph_source} capture, counted once"
    )
    note = Text(
        f"non-KV {_gib(result.non_kv_bytes)} ({graphs}) + vLLM's {result.redundancy_bytes >> 20} MiB buffer",
        style="dim",
    )
    parts: list[RenderableType] = [table, flags, note]
    if result.double_counted_bytes:
        parts.append(
            Text(
                f"vLLM's own log would suggest {format_count(result.vllm_logged_requested_bytes)} bytes: it counts "
                f"the graph estimate twice ({_gib(result.double_counted_bytes)} less KV).",
                style="yellow",
            )
        )
    return Group(*parts)


def render_validate(result: ValidateResult) -> RenderableType:
    r = result
    text = Text()
    text.append(f"{r.model_name} on {r.device.name}: ", style="bold")
    text.append(
        f"KV pool {_gib(r.kv_cache_memory_bytes)} ({format_count(r.num_blocks)} blocks) allocated and written; "
        f"free {_gib(r.init_free_bytes)} at start, {_gib(r.free_after_kv_bytes)} after the pool, "
        f"{_gib(r.free_left_bytes)} left with everything in place, {_gib(r.worst_free_bytes)} at the tightest "
        f"moment of the max-shape forward"
    )
    if r.graphs_captured:
        text.append(
            f"; {r.graphs_captured} decode graphs captured and replayed ({_gib(r.graph_pool_bytes)} pool)"
        )
    text.append("\n")
    text.append("PASS" if r.passed else "FAIL", style="bold green" if r.passed else "bold red")
    text.append(f" (required at least {format_bytes(r.min_free_bytes)} free)")
    parts: list[RenderableType] = [text]
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)
