"""Terminal rendering of `tiers plan` and `tiers simulate`: rich tables plus small text charts."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramctl.core.units import GB, format_bytes, format_count
from vramctl.render.console import make_console
from vramctl.tiers.crossover import SGLANG_PREFETCH_THRESHOLD_TOKENS, TiersPlan
from vramctl.tiers.simulate import Economics, SimResult

BAR_WIDTH = 40


def _rate(tokens_per_s: float) -> str:
    if tokens_per_s >= 1e6:
        return f"{tokens_per_s / 1e6:.2f} M tok/s"
    return f"{tokens_per_s:,.0f} tok/s"


def _short(tokens: int) -> str:
    return f"{tokens / 1024:g}k" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"


def _short_rate(tokens_per_s: float) -> str:
    if tokens_per_s >= 1e6:
        return f"{tokens_per_s / 1e6:.1f}M/s"
    if tokens_per_s >= 1e4:
        return f"{tokens_per_s / 1e3:.0f}k/s"
    return f"{tokens_per_s:,.0f}/s"


def _seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _gbps(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / GB:,.2f} GB/s"


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def log_bars(
    rows: Sequence[tuple[str, float]], *, marker: float | None = None, marker_label: str = ""
) -> str:
    """A log-scale horizontal bar chart in plain text; `marker` draws a `|` at that value on every bar."""
    values = [v for _, v in rows if v > 0]
    if marker is not None and marker > 0:
        values.append(marker)
    if not values:
        return ""
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)))
    span = max(1, hi - lo)
    width = max(len(label) for label, _ in rows)

    def pos(value: float) -> int:
        return min(BAR_WIDTH, max(0, round((math.log10(value) - lo) / span * BAR_WIDTH)))

    lines = []
    mark = pos(marker) if marker is not None and marker > 0 else None
    for label, value in rows:
        n = pos(value) if value > 0 else 0
        cells = ["█"] * n + [" "] * (BAR_WIDTH - n)
        if mark is not None and mark < BAR_WIDTH:
            cells[mark] = "|" if mark >= n else "┃"
        lines.append(f"{label:<{width}} {''.join(cells)} {_rate(value)}")
    axis = f"{'':<{width}} 1e{lo}{'':>{BAR_WIDTH - 6}}1e{hi}"
    lines.append(axis)
    if mark is not None:
        lines.append(f"{'':<{width}} | = {marker_label}")
    return "\n".join(lines)


def linear_bars(rows: Sequence[tuple[str, float]], *, scale: float = 1.0, fmt: str = "{:.1%}") -> str:
    """Bars for values in [0, scale] (hit rates)."""
    if not rows:
        return ""
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:
        n = round(min(1.0, max(0.0, value / scale)) * BAR_WIDTH) if scale > 0 else 0
        lines.append(f"{label:>{width}} {'█' * n}{' ' * (BAR_WIDTH - n)} {fmt.format(value)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# tiers plan


_KIND_MARK = {"measured": " (m)", "given": " (g)"}
"""Short marks after a tier's name, so the table fits 80 columns (the legend line spells them out)."""


def _kind_legend(plan: TiersPlan) -> str:
    kinds = {t.link.kind for t in plan.tiers}
    marks = []
    if "measured" in kinds:
        marks.append("(m) measured by `tiers bench` (--bandwidths)")
    if "given" in kinds:
        marks.append("(g) given with --tier")
    return (" " + "; ".join(marks) + ".") if marks else ""


def render_tiers_plan(plan: TiersPlan) -> Group:
    parts: list[RenderableType] = []
    rate = plan.rate
    head = Text(
        f"{plan.model} on {plan.gpu}, tp={plan.tp}: {format_count(plan.bytes_per_token)} B of KV per token per rank"
        + (f" (kv-cache-dtype {plan.kv_cache_dtype})" if plan.kv_cache_dtype != "auto" else ""),
        style="bold",
    )
    parts.append(head)
    parts.append(Text(f"prefill rate R = {_rate(rate.tokens_per_s)} ({rate.formula})"))
    table = Table(
        title=None,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        header_style="bold",
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    for column, justify in (
        ("tier", "left"),
        ("GB/s", "right"),
        ("R*read", "right"),
        ("R*swap", "right"),
        (f"fetch {_short(plan.tokens)}", "right"),
        ("min tok", "right"),
        ("faster", "left"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for t in plan.tiers:
        threshold = "never" if t.min_tokens_worth_fetching is None else f"{t.min_tokens_worth_fetching:,.1f}"
        style = "green" if t.fetch_wins else "red"
        summary = f"fetch {t.advantage:.1f}x" if t.fetch_wins else f"recompute {1 / t.advantage:.1f}x"
        table.add_row(
            t.link.name + _KIND_MARK.get(t.link.kind, ""),
            f"{t.link.read_bytes_per_s / GB:,.2f}",
            _short_rate(t.r_star_read),
            _short_rate(t.r_star_swap),
            _seconds(t.fetch_time_s),
            threshold,
            Text(summary, style=style),
        )
    parts.append(table)
    parts.append(
        Text(
            "R*read = B / b_tok (a cached prefix is only read back), R*swap = B / (2·b_tok) (out and back); "
            "min tok: below it the fixed latency makes the fetch slower than recompute." + _kind_legend(plan),
            style="dim",
        )
    )
    for t in plan.tiers:
        parts.append(Text(f"{t.link.name}: {t.verdict}", style="green" if t.fetch_wins else "red"))
    recompute = plan.tiers[0].recompute_time_s if plan.tiers else plan.tokens / rate.tokens_per_s
    parts.append(
        Text(
            f"recomputing {format_count(plan.tokens)} tokens takes {_seconds(recompute)} at R; fetching them moves "
            f"{format_bytes(plan.tokens * plan.bytes_per_token)} per rank."
        )
    )
    parts.append(
        Text(
            f"SGLang refuses L3 prefetches under {SGLANG_PREFETCH_THRESHOLD_TOKENS} tokens: at R that is "
            f"{_seconds(plan.implied_prefetch_fixed_cost_s)} of recompute, the fixed cost per fetch it implies "
            f"(far above the per-tier latencies above, which are estimates unless measured).",
            style="dim",
        )
    )
    parts.append(Text(""))
    parts.append(
        Text(
            log_bars(
                [(t.link.name, t.r_star_read) for t in plan.tiers],
                marker=rate.tokens_per_s,
                marker_label=f"R = {_rate(rate.tokens_per_s)}: a bar past it fetches faster than it recomputes",
            )
        )
    )
    res = plan.residency
    if res is not None:
        parts.append(Text(""))
        parts.append(Text("residency (simplified unique-insertion LRU)", style="bold"))
        parts.append(
            Text(
                f"GPU {format_count(res.gpu_tokens)} tok"
                + ("" if res.gpu_tokens_source == "--gpu-tokens" else f" ({res.gpu_tokens_source})")
                + f" / {res.arrival_tokens_per_s:,.0f} tok/s = "
                f"{res.gpu_window_s:.1f} s; host {format_count(res.host_tokens)} tok ({res.host_tokens_source}): "
                f"inclusive (write-through) {res.host_window_inclusive_s:.1f} s, exclusive "
                f"{res.host_window_exclusive_s:.1f} s"
            )
        )
        for hierarchy in ("inclusive", "exclusive"):
            band = res.band(hierarchy)
            if band is None:
                parts.append(
                    Text(f"{hierarchy}: the host tier adds no window (not larger than the GPU tier)")
                )
            else:
                parts.append(
                    Text(
                        f"{hierarchy}: the host tier pays for inter-turn gaps of {band[0]:.1f}-{band[1]:.1f} s "
                        f"({band[0] / 60:.1f}-{band[1] / 60:.1f} min)"
                    )
                )
    mem = plan.host_memory
    if mem is not None:
        parts.append(Text(""))
        parts.append(Text("host RAM", style="bold"))
        if mem.pinned_bytes_total is not None and mem.pinned_bytes_per_rank is not None:
            verdict = "fits" if mem.fits else "does NOT fit"
            parts.append(
                Text(
                    f"pinned {format_bytes(mem.pinned_bytes_per_rank)} per rank × {mem.ranks} = "
                    f"{format_bytes(mem.pinned_bytes_total)} against {format_bytes(mem.machine_bytes)} "
                    f"({mem.machine_source}) − 10 GiB SGLang reserve = {format_bytes(mem.usable_bytes)}: {verdict}",
                    style="green" if mem.fits else "red",
                )
            )
        parts.append(
            Text(
                f"largest host tier that fits: {format_count(mem.max_host_tokens_per_rank)} tokens per rank "
                f"(--hicache-size {mem.max_host_tokens_per_rank * mem.bytes_per_token / GB:.0f}, in GB per rank)"
            )
        )
    return Group(*parts)


def print_tiers_plan(plan: TiersPlan, console: Console | None = None) -> None:
    (console or make_console()).print(render_tiers_plan(plan))


# --------------------------------------------------------------------------------------------------
# tiers simulate


def _tok(tokens: int) -> str:
    if tokens >= 10**6:
        return f"{tokens / 1e6:,.2f}M"
    return format_count(tokens)


def _cap(tokens: int | None, *, short: bool = False) -> str:
    if tokens is None:
        return "unlimited"
    return _tok(tokens) if short else format_count(tokens)


def render_simulation(
    result: SimResult, economics: Economics | None, *, source: str, warnings: Sequence[str] = ()
) -> Group:
    parts: list[RenderableType] = []
    cfg = result.config
    parts.append(
        Text(
            f"{source}: {format_count(result.requests)} requests, {format_count(result.input_tokens)} input tokens, "
            f"{result.block_size}-token blocks",
            style="bold",
        )
    )
    if len(cfg.tiers) > 1:
        parts.append(
            Text(
                f"eviction {cfg.eviction}, write policy {cfg.write_policy}, {cfg.hierarchy}, prefetch threshold "
                f"{cfg.prefetch_threshold} tok, load-back threshold {cfg.load_back_threshold} tok"
            )
        )
    else:
        parts.append(Text(f"eviction {cfg.eviction}, one tier"))
    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False, padding=(0, 1, 0, 0)
    )
    for column in (
        "tier",
        "capacity",
        "hit tok",
        "hit%tok",
        "hit%req",
        "written",
        "read",
        "peak",
    ):
        table.add_column(column, justify="left" if column == "tier" else "right", no_wrap=True)
    bpt = cfg.bytes_per_token

    def amount(tokens: int) -> str:
        if bpt is None:
            return f"{_tok(tokens)} tok"
        return format_bytes(tokens * bpt)

    for t in result.tiers:
        table.add_row(
            t.name,
            _cap(t.capacity_tokens, short=True),
            _tok(t.hit_tokens),
            _pct(t.token_hit_rate),
            _pct(t.request_hit_rate),
            amount(t.written_tokens),
            amount(t.read_tokens) if t.name != "gpu" else "-",
            amount(t.peak_used_tokens(result.block_size)),
        )
    table.add_row(
        Text("all", style="bold"),
        "",
        _tok(result.hit_tokens),
        Text(_pct(result.token_hit_rate), style="bold"),
        Text(_pct(result.request_hit_rate), style="bold"),
        "",
        "",
        "",
    )
    parts.append(table)
    parts.append(
        Text(
            "hit % tok: token-weighted, Σ hit tokens / Σ input tokens (docs/tiers.md); hit % req: the mean of "
            "each request's hit / input (the figure some papers quote). Capacities in tokens.",
            style="dim",
        )
    )
    for t in result.tiers:
        if t.name != "gpu" and t.read_tokens:
            parts.append(
                Text(
                    f"{t.name}: {t.written_tokens / t.read_tokens:.2f} tokens written per token served "
                    f"(write amplification)"
                )
            )
    if economics is not None:
        parts.append(Text(""))
        parts.append(Text(f"at R = {_rate(economics.prefill_tokens_per_s)}:", style="bold"))
        for tier in economics.tiers:
            parts.append(
                Text(
                    f"{tier.name} ({_gbps(tier.read_bytes_per_s)} read): recompute avoided {tier.recompute_avoided_s:,.1f} s, "
                    f"transfer {tier.transfer_s:,.1f} s on the critical path (net {tier.net_saved_s:,.1f} s), "
                    f"background writes {tier.write_s:,.1f} s"
                )
            )
    if bpt is None:
        parts.append(
            Text("bytes: give --model (or --kv-bytes-per-token) to turn tokens into bytes", style="dim")
        )
    if len(result.tiers) > 0:
        parts.append(Text(""))
        parts.append(
            Text(
                linear_bars(
                    [(t.name, t.token_hit_rate) for t in result.tiers] + [("all", result.token_hit_rate)]
                )
            )
        )
    for warning in warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Group(*parts)


def render_sweep(
    results: Sequence[SimResult],
    *,
    source: str,
    warnings: Sequence[str] = (),
    errors: Sequence[float] | None = None,
) -> Group:
    """`errors`: a sampled curve's expected error per point (token hit rate), shown as a ± column."""
    parts: list[RenderableType] = []
    first = results[0]
    method = first.method
    parts.append(
        Text(
            f"{source}: {format_count(first.requests)} requests, {format_count(first.input_tokens)} input tokens, "
            f"{first.block_size}-token blocks; GPU capacity sweep ({method})",
            style="bold",
        )
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    tiered = len(first.tiers) > 1
    columns = ["GPU capacity (tok)", "hit % tok", "hit % req"]
    if tiered:  # the total is GPU + the fixed lower tiers: show the GPU's own share beside it
        columns.append("GPU tier alone % tok")
    if errors is not None:
        columns.append("± % tok")
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        cells = [_cap(r.tiers[0].capacity_tokens), _pct(r.token_hit_rate), _pct(r.request_hit_rate)]
        if tiered:
            cells.append(_pct(r.tiers[0].token_hit_rate))
        if errors is not None:
            cells.append(_pct(errors[len(table.rows)]))
        table.add_row(*cells)
    if tiered:
        lower = ", ".join(
            f"{t.name} {_cap(t.capacity_tokens)}" + (" tok" if t.capacity_tokens else "")
            for t in first.tiers[1:]
        )
        parts.append(Text(f"lower tiers held fixed: {lower}; hit % is GPU + lower tiers", style="dim"))
    parts.append(table)
    parts.append(Text(""))
    parts.append(Text(linear_bars([(_cap(r.tiers[0].capacity_tokens), r.token_hit_rate) for r in results])))
    for warning in warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Group(*parts)


def print_renderable(renderable: RenderableType, console: Console | None = None) -> None:
    (console or make_console()).print(renderable)
