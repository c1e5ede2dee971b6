"""`vramctl plan` output: rich (ledger table, stacked bar, KV summary, verdict, utilisation trade, SGLang side,
host tier, notes) and Markdown."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramctl.core.plan import FITS, PlanResult
from vramctl.core.units import GiB, format_count
from vramctl.render.console import make_console
from vramctl.render.ledger import ledger_markdown, render_ledger


def _gib(num: int | float) -> str:
    return f"{num / GiB:,.2f} GiB"


def _header(r: PlanResult) -> str:
    s = r.settings
    engine = "SGLang" if r.engine == "sglang" else "vLLM"
    name = r.model.name
    if r.model.derived is not None:  # said in the header too: the weights are derived, not read (see the warning)
        name += f" [DERIVED from {r.model.derived.base} + {r.model.derived.marker}; config not read]"
    return (
        f"{engine} {r.engine_version} · {name} · {r.gpu.display_name} ({_gib(r.capacity_bytes)}) · "
        f"tp={s.tensor_parallel_size} pp={s.pipeline_parallel_size}"
    )


def _sglang_settings_line(sg: Any) -> str:
    parts = [
        f"mem_fraction_static={sg.mem_fraction_static:.3f} ({sg.mem_fraction_source})",
        f"chunked_prefill_size={sg.chunked_prefill_size}",
        f"max_running_requests={sg.max_running_requests}",
        f"page_size={sg.page_size}",
        f"context_len={sg.context_len}",
        f"cuda_graph_max_bs={sg.cuda_graph_max_bs}",
    ]
    return "  ".join(parts)


def _settings_line(r: PlanResult) -> str:
    if r.engine == "sglang" and r.sglang is not None:
        return _sglang_settings_line(r.sglang)
    s = r.settings
    mark = set(s.defaults_used)

    def m(name: str, value: object) -> str:
        return f"{name}={value}{'*' if name in mark else ''}"

    parts = [
        m("gpu_memory_utilization", s.gpu_memory_utilization),
        m("max_model_len", s.max_model_len),
        m("max_num_batched_tokens", s.max_num_batched_tokens),
        m("max_num_seqs", s.max_num_seqs),
        m("block_size", s.block_size),
        f"kv_cache_dtype={s.kv_cache_dtype}",
        f"dtype={s.dtype}",
        "enforce_eager" if s.enforce_eager else f"{len(s.cudagraph_capture_sizes)} capture sizes",
    ]
    if s.kv_cache_memory_bytes is not None:
        parts.append(f"kv_cache_memory_bytes={s.kv_cache_memory_bytes}")
    return "  ".join(parts) + "   (* = engine default)"


def _span(low: str, high: str) -> str:
    return f" ({low} – {high})"


def kv_summary_rows(r: PlanResult) -> list[tuple[str, str]]:
    """The KV numbers; where the plan has a band, each carries its pessimistic – optimistic range. Values a user
    pastes into a flag (bytes, lengths) have no thousands separators."""
    requested = "static budget (total − held back)" if r.engine == "sglang" else "requested (ceil(total × u))"
    block = "page" if r.engine == "sglang" else "block"
    lo, hi = r.pessimistic, r.optimistic
    band = r.kv_cache_uncertainty_bytes
    kv = f"{r.kv_cache_bytes / GiB:,.2f}" + (f" ± {band / GiB:.2f}" if band else "") + " GiB"
    rows = [
        (requested, _gib(r.requested_bytes)),
        ("KV cache", f"{kv} ({max(0, r.kv_cache_bytes)} bytes)"),
        ("KV bytes per token (per rank)", format_count(r.kv_bytes_per_token)),
        (f"bytes per {block}", f"{format_count(r.bytes_per_block)} ({block} of {r.block_size} tokens)"),
        (
            f"{block}s",
            format_count(r.num_blocks)
            + (_span(format_count(lo.num_blocks), format_count(hi.num_blocks)) if lo and hi and band else ""),
        ),
        (f"{block}s per request", format_count(r.blocks_per_request)),
        (
            "KV token slots",
            format_count(r.kv_tokens)
            + (_span(format_count(lo.kv_tokens), format_count(hi.kv_tokens)) if lo and hi and band else ""),
        ),
        (
            f"max concurrency at {r.max_model_len} tokens",
            f"{r.max_concurrency:.2f}x"
            + (
                _span(f"{lo.max_concurrency:.2f}x", f"{hi.max_concurrency:.2f}x")
                if lo and hi and band
                else ""
            ),
        ),
        (
            "largest max_model_len that fits",
            f"{r.max_model_len_fit}"
            + (_span(str(lo.max_model_len_fit), str(hi.max_model_len_fit)) if lo and hi and band else ""),
        ),
    ]
    if lo and hi and band:
        rows.append(("(ranges: pessimistic – optimistic edge of the estimates)", ""))
    if r.engine != "sglang":
        rows.insert(
            1,
            (
                "held back (1 − u) / of it outside the budget",
                f"{_gib(r.capacity_bytes - r.requested_bytes)} / {_gib(r.outside_budget_bytes)}",
            ),
        )
    return rows


def verdict_line(r: PlanResult) -> str:
    """The verdict in one sentence, with the pessimistic edge of the estimates where it changes the answer."""
    if r.verdict != FITS:
        return f"verdict: {r.verdict}"
    base = f"{format_count(r.kv_tokens)} KV tokens, {r.max_concurrency:.2f}x"
    edge = r.pessimistic
    if edge is None or not r.kv_cache_uncertainty_bytes:
        return f"verdict: fits — {base}"
    if r.at_risk:
        if edge.kv_cache_bytes > 0 and edge.num_blocks > 0:
            short = (
                f"{max(0, edge.kv_cache_bytes) / GiB:.2f} GiB of KV, {format_count(edge.kv_tokens)} tokens, "
                f"{edge.max_concurrency:.2f}x"
            )
            if edge.max_concurrency < 1:
                short += f": less than one {r.max_model_len}-token request"
        else:
            short = "no KV cache at all"
        return (
            f"verdict: fits if the estimates hold — {base}; at the pessimistic edge: {edge.verdict} "
            f"({short}; --max-model-len {edge.max_model_len_fit} would fit there)"
            if r.engine != "sglang" and edge.max_model_len_fit > 0
            else f"verdict: fits if the estimates hold — {base}; at the pessimistic edge: {edge.verdict} ({short})"
        )
    return (
        f"verdict: fits — {base}; still {format_count(edge.kv_tokens)} tokens, {edge.max_concurrency:.2f}x at the "
        "pessimistic edge of the estimates"
    )


def _verdict_text(r: PlanResult) -> Text:
    line = verdict_line(r)
    if r.verdict == FITS:
        return Text(line, style="bold yellow" if r.at_risk else "bold green")
    text = Text(line, style="bold red")
    if r.verdict_message:
        text.append(f"\n{r.verdict_message}", style="red")
    return text


def fix_lines(r: PlanResult) -> list[str]:
    """The smallest fixes, one pasteable flag per line, with what each buys (each was planned)."""
    if not r.fixes:
        if r.verdict != FITS or r.at_risk:
            return [
                "no single change of the flags makes this fit at the pessimistic edge (tried the context "
                "length, the utilisation, TP up to 8, an fp8 KV cache, fp8 weights, fewer sequences)"
            ]
        return []
    lines = ["smallest fixes (each one change, planned; fits at the pessimistic edge):"]
    width = max(len(f.argument) for f in r.fixes)
    for f in r.fixes:
        lines.append(
            f"  {f.argument:<{width}}  {f.description}; {format_count(f.pessimistic_kv_tokens)} – "
            f"{format_count(f.kv_tokens)} KV tokens"
        )
    return lines


def utilization_table(r: PlanResult) -> Table | None:
    if not r.utilization_table:
        return None
    sglang = r.engine == "sglang"
    table = Table(
        title="The fraction trade (SGLang's sizing at each --mem-fraction-static)"
        if sglang
        else "The utilisation trade (same estimates, different --gpu-memory-utilization)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for name, justify in (
        ("fraction" if sglang else "u", "right"),
        ("held back", "right"),
        ("KV", "right"),
        ("pages" if sglang else "blocks", "right"),
        (f"conc. @ {r.max_model_len}", "right"),
        ("Δ KV", "right"),
        ("risk", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in r.utilization_table:
        style = {
            "thin": "red",
            "tight": "yellow",
            "no-kv": "red",
            "no-start": "bold red",
            "at-risk": "red",
        }.get(row.risk, "")
        u = (f"{row.utilization:.3f}" if sglang else f"{row.utilization:.2f}") + (
            " (yours)" if row.current else ""
        )
        table.add_row(
            Text(u, style="bold" if row.current else ""),
            _gib(row.held_back_bytes),
            _gib(max(0, row.kv_bytes)),
            format_count(row.num_blocks),
            f"{row.max_concurrency:.2f}x",
            f"{row.delta_kv_bytes / GiB:+.2f}",
            Text(row.risk, style=style),
        )
    return table


def _risk_sentence(r: PlanResult) -> str | None:
    thin = [row for row in r.utilization_table if row.risk == "thin"]
    if not thin and r.engine == "sglang":
        thin = [row for row in r.utilization_table if row.risk == "tight"]
        if thin:
            return f"From mem_fraction_static = {thin[0].utilization:.2f}: {thin[0].note.rstrip('.')}."
    if not thin:
        return None
    knob = "mem_fraction_static" if r.engine == "sglang" else "u"
    return f"From {knob} = {thin[0].utilization:.2f} the margin is thin: {thin[0].note.rstrip('.')}."


def _sglang_table(r: PlanResult) -> Table | None:
    sg: Any = r.sglang
    if sg is None or r.engine == "sglang":
        return None
    table = Table(
        title=f"SGLang {sg.version} on the same card", title_justify="left", show_edge=False, pad_edge=False
    )
    table.add_column("")
    table.add_column("vLLM", justify="right")
    table.add_column("SGLang", justify="right")
    table.add_row("KV cache", _gib(r.kv_cache_bytes), _gib(sg.kv_cache_bytes))
    table.add_row("KV tokens", format_count(r.kv_tokens), format_count(sg.max_total_num_tokens))
    table.add_row(
        "fraction / utilisation", f"{r.settings.gpu_memory_utilization}", f"{sg.mem_fraction_static:.3f}"
    )
    table.add_row(
        "max running requests / seqs",
        format_count(r.settings.max_num_seqs),
        format_count(sg.max_running_requests),
    )
    table.add_row("verdict", r.verdict, str(sg.verdict))
    return table


def _gap_lines(r: PlanResult) -> list[str]:
    lines = []
    for item in r.gap:
        lines.append(
            f"{getattr(item, 'name', '?')}: {getattr(item, 'bytes', 0) / GiB:+.2f} GiB — {getattr(item, 'sentence', '')}"
        )
    return lines


def _host_line(r: PlanResult) -> str | None:
    h: Any = r.host_tier
    if h is None:
        return None
    return (
        f"host tier ({h.mechanism}, {h.flag}): {format_count(h.host_tokens)} host tokens, "
        f"{_gib(h.pinned_bytes_total)} pinned host RAM — {h.status}: {h.message}"
    )


def render_plan(r: PlanResult) -> Group:
    parts: list[RenderableType] = [_verdict_text(r)]
    fixes = fix_lines(r)
    if fixes:
        parts.append(Text(fixes[0], style="bold"))
    if r.fixes:
        grid = Table(show_header=False, show_edge=False, pad_edge=False, box=None, padding=(0, 2, 0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for f in r.fixes:
            grid.add_row(
                Text(f.argument, style="bold"),
                f"{f.description}; {format_count(f.pessimistic_kv_tokens)} – {format_count(f.kv_tokens)} KV tokens",
            )
        parts.append(grid)
    parts.extend(
        [
            Text(""),
            Text(_header(r), style="bold"),
            Text(_settings_line(r), style="dim"),
            Text(""),
        ]
    )
    parts.append(render_ledger(r.ledger, "Where the memory goes (one rank of the binding stage)"))
    parts.append(Text(""))
    summary = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    summary.add_column(style="bold", overflow="fold")
    summary.add_column(justify="right")
    for key, value in kv_summary_rows(r):
        summary.add_row(key, value)
    parts.append(summary)
    util = utilization_table(r)
    if util is not None:
        parts.extend([Text(""), util])
        sentence = _risk_sentence(r)
        if sentence:
            parts.append(Text(sentence, style="yellow"))
    sg = _sglang_table(r)
    if sg is not None:
        parts.extend([Text(""), sg])
        gap = _gap_lines(r)
        if gap:
            parts.append(Text("Why the KV pools differ (vLLM − SGLang):", style="bold"))
            parts.extend(Text(f"  {line}") for line in gap)
    host = _host_line(r)
    if host:
        parts.extend([Text(""), Text(host)])
    if r.warnings:
        parts.append(Text(""))
        parts.extend(Text(f"warning: {w}", style="yellow") for w in r.warnings)
    if r.explanations:
        parts.append(Text(""))
        parts.extend(Text(f"· {n}", style="dim") for n in r.explanations)
    return Group(*parts)


def print_plan(r: PlanResult, console: Console | None = None) -> None:
    (console or make_console()).print(render_plan(r))


def plan_markdown(r: PlanResult) -> str:
    """The plan as GitHub Markdown (for a pull-request comment)."""
    out = [f"### {_header(r)}", ""]
    if r.verdict == FITS:
        head, _, rest = verdict_line(r).partition(" — ")
        out.append(f"**{head}** — {rest}")
    else:
        out.append(f"**verdict: {r.verdict}**\n\n> {r.verdict_message}")
    fixes = fix_lines(r)
    if fixes:
        out.extend(["", fixes[0]])
        out.extend(f"- `{f.argument}` — {f.description}" for f in r.fixes)
    out.extend(["", f"`{_settings_line(r)}`", "", ledger_markdown(r.ledger)])
    out.append("| | |\n| --- | ---: |")
    out.extend(f"| {k} | {v} |" for k, v in kv_summary_rows(r))
    if r.utilization_table:
        out.extend(
            [
                "",
                "| u | held back GiB | KV GiB | blocks | concurrency | Δ KV GiB | risk |"
                if r.engine != "sglang"
                else "| mem_fraction_static | held back GiB | KV GiB | pages | concurrency | Δ KV GiB | risk |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            ]
        )
        for row in r.utilization_table:
            digits = 3 if r.engine == "sglang" else 2
            u = f"**{row.utilization:.{digits}f}**" if row.current else f"{row.utilization:.{digits}f}"
            out.append(
                f"| {u} | {row.held_back_bytes / GiB:.2f} | {max(0, row.kv_bytes) / GiB:.2f} | {row.num_blocks:,} | "
                f"{row.max_concurrency:.2f}x | {row.delta_kv_bytes / GiB:+.2f} | {row.risk} |"
            )
        sentence = _risk_sentence(r)
        if sentence:
            out.extend(["", sentence])
    sg: Any = r.sglang
    if sg is not None and r.engine != "sglang":
        out.extend(
            [
                "",
                f"**SGLang {sg.version}**: {sg.kv_cache_bytes / GiB:.2f} GiB KV, {sg.max_total_num_tokens:,} tokens, "
                f"mem_fraction_static {sg.mem_fraction_static:.3f}, max_running_requests {sg.max_running_requests}",
            ]
        )
        out.extend(f"- {line}" for line in _gap_lines(r))
    host = _host_line(r)
    if host:
        out.extend(["", host])
    if r.warnings:
        out.append("")
        out.extend(f"- ⚠ {w}" for w in r.warnings)
    if r.explanations:
        out.append("")
        out.extend(f"- {n}" for n in r.explanations)
    return "\n".join(out) + "\n"
