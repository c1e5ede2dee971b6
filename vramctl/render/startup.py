"""`read-log` output: a StartupReport (and a Comparison with a plan) as rich renderables or Markdown."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vramctl.core.ledger import Term
from vramctl.core.units import GiB, format_count
from vramctl.diagnose.startup import Comparison, ComparisonRow, StartupReport
from vramctl.render.ledger import format_band, ledger_markdown, render_ledger


def _gib(num: int | float) -> str:
    return f"{num / GiB:,.2f} GiB"


def _engine_line(report: StartupReport) -> str:
    engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(report.engine or "", report.engine or "unknown engine")
    version = report.engine_version or "version unknown"
    how = {"log": "stated in the log", "formats": "inferred from the line formats"}.get(
        report.version_source or "", ""
    )
    parts = [f"{engine} {version}" + (f" ({how})" if how else "")]
    if report.variant:
        parts.append(f"{report.variant} worker")
    if report.semantics:
        parts.append(f"semantics: {report.semantics}")
    if len(report.runs) > 1:
        parts.append(f"run {report.run_index} of {len(report.runs)}")
    return " · ".join(parts)


def _capacity_line(report: StartupReport) -> str:
    if report.capacity_bytes is None:
        return "capacity: unknown (the log does not print it; pass --gpu NAME or --gpu-memory SIZE)"
    src = {"log": "from the log", "derived": "derived from requested ÷ utilisation"}.get(
        report.capacity_source or "", f"from {report.capacity_source}"
    )
    line = f"capacity: {_gib(report.capacity_bytes)} ({src})"
    if report.gpu_memory_utilization is not None:
        line += f" · utilisation {report.gpu_memory_utilization:g}"
    if report.requested_bytes is not None:
        line += f" · requested {_gib(report.requested_bytes)}"
    return line


def _terms_table(terms: tuple[Term, ...]) -> Table:
    table = Table(title="Terms read (no capacity: no ledger)", title_justify="left", show_edge=False)
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("±", justify="right")
    table.add_column("source")
    table.add_column("how", overflow="fold", max_width=80)
    for term in terms:
        band = format_band(term.uncertainty_bytes)
        how = term.formula + (f" ({term.note})" if term.note else "")
        table.add_row(term.name, f"{term.bytes / GiB:,.2f}", band, term.source.value, how)
    return table


def _kv_rows(report: StartupReport) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []

    def line_of(key: str) -> str:
        obs = report.facts.get(key)
        return f"line {obs.line}" if obs is not None else "derived"

    if report.kv_cache_bytes is not None:
        kv_key = next(
            (
                k
                for k in ("kv_cache_extended", "kv_cache", "kv_cache_in_use", "kv_available_at_error")
                if k in report.facts
            ),
            "kv_cache",
        )
        rows.append(("KV cache", _gib(report.kv_cache_bytes), line_of(kv_key)))
    if report.num_blocks is not None:
        rows.append(("GPU blocks", format_count(report.num_blocks), line_of("num_gpu_blocks")))
    if report.kv_tokens is not None:
        key = "kv_tokens" if "kv_tokens" in report.facts else "max_total_num_tokens"
        rows.append(("KV tokens", format_count(report.kv_tokens), line_of(key)))
    if report.max_concurrency is not None:
        ctx = report.facts.get("concurrency_max_model_len") or report.facts.get("context_len")
        at = f" @ {format_count(ctx.bytes)} tokens" if ctx is not None else ""
        rows.append(("max concurrency", f"{report.max_concurrency:.2f}x{at}", line_of("max_concurrency")))
    facts = report.facts
    if "kv_needed_per_request" in facts:
        rows.append(
            (
                "KV one max-length request needs",
                _gib(facts["kv_needed_per_request"].bytes),
                line_of("kv_needed_per_request"),
            )
        )
    if "estimated_max_model_len" in facts:
        rows.append(
            (
                "max_model_len that fits",
                str(facts["estimated_max_model_len"].bytes),  # a --max-model-len value: pasteable
                line_of("estimated_max_model_len"),
            )
        )
    if "kv_padding_waste_pct" in facts:
        rows.append(
            (
                "hybrid padding may waste",
                f"≤ {facts['kv_padding_waste_pct'].text}% of the KV cache",
                line_of("kv_padding_waste_pct"),
            )
        )
    if "gpu_memory_utilization_without_graph_profiling" in facts:
        rows.append(
            (
                "utilisation without graph profiling",
                facts["gpu_memory_utilization_without_graph_profiling"].text,
                line_of("gpu_memory_utilization_without_graph_profiling"),
            )
        )
    if "gpu_memory_utilization_to_keep_kv" in facts:
        rows.append(
            (
                "utilisation for the pre-0.21 KV cache",
                facts["gpu_memory_utilization_to_keep_kv"].text,
                line_of("gpu_memory_utilization_to_keep_kv"),
            )
        )
    if report.kv_cache_memory_bytes_suggestion is not None:
        rows.append(
            (
                "--kv-cache-memory-bytes (fits requested)",
                f"{report.kv_cache_memory_bytes_suggestion} ({_gib(report.kv_cache_memory_bytes_suggestion)})",
                line_of("kv_cache_memory_to_requested"),
            )
        )
    if report.kv_cache_memory_bytes_to_fill_gpu is not None:
        rows.append(
            (
                "--kv-cache-memory-bytes (fills the GPU)",
                f"{report.kv_cache_memory_bytes_to_fill_gpu} ({_gib(report.kv_cache_memory_bytes_to_fill_gpu)})",
                line_of("kv_cache_memory_to_gpu"),
            )
        )
    return rows


def _fmt_row_value(row: ComparisonRow, value: float | None) -> str:
    if value is None:
        return "—"
    if row.unit == "bytes":
        return f"{value / GiB:,.2f}"
    if row.unit == "count":
        return format_count(round(value))
    return f"{value:.2f}"


def comparison_table(comparison: Comparison) -> Table:
    table = Table(
        title="vramctl's plan beside the log (planned − logged)", title_justify="left", show_edge=False
    )
    table.add_column("term")
    table.add_column("logged", justify="right")
    table.add_column("planned", justify="right")
    table.add_column("difference", justify="right")
    table.add_column("%", justify="right")
    for row in comparison.rows:
        unit = " GiB" if row.unit == "bytes" else ""
        diff = row.difference
        pct = row.percent
        table.add_row(
            row.name + unit,
            _fmt_row_value(row, row.logged),
            _fmt_row_value(row, row.planned),
            "—" if diff is None else ("+" if diff >= 0 else "") + _fmt_row_value(row, diff),
            "—" if pct is None else f"{pct:+.1f}%",
        )
    return table


def render_startup(report: StartupReport, comparison: Comparison | None = None) -> RenderableType:
    parts: list[RenderableType] = [
        Panel(Text(_engine_line(report) + "\n" + _capacity_line(report)), title="read-log", expand=False)
    ]
    if report.settings:
        settings = Table(title="Settings the log states", title_justify="left", show_edge=False)
        settings.add_column("setting")
        settings.add_column("value", overflow="fold", max_width=60)
        settings.add_column("line", justify="right")
        settings.add_column("from")
        for key, setting in sorted(report.settings.items()):
            settings.add_row(key, str(setting.value), str(setting.line), setting.source)
        parts.append(settings)
    if report.ledger is not None:
        parts.append(render_ledger(report.ledger, "The budget, from the log's own numbers"))
    elif report.terms:
        parts.append(_terms_table(report.terms))
    rows = _kv_rows(report)
    if rows:
        kv = Table(title="KV cache", title_justify="left", show_edge=False)
        kv.add_column("")
        kv.add_column("value", justify="right")
        kv.add_column("from")
        for row in rows:
            kv.add_row(*row)
        parts.append(kv)
    if comparison is not None:
        parts.append(comparison_table(comparison))
        for note in comparison.notes:
            parts.append(Text(f"note: {note}", style="dim"))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    for item in report.missing:
        parts.append(Text(f"missing: {item}", style="yellow"))
    return Group(*parts)


def startup_markdown(report: StartupReport, comparison: Comparison | None = None) -> str:
    out = [f"### vramctl read-log: {_engine_line(report)}", "", _capacity_line(report), ""]
    if report.settings:
        out.append(
            "Settings: "
            + ", ".join(f"`{k}={s.value}` (line {s.line})" for k, s in sorted(report.settings.items()))
        )
        out.append("")
    if report.ledger is not None:
        out.append(ledger_markdown(report.ledger))
    elif report.terms:
        out.append("| term | GiB | ± | source | how |")
        out.append("| --- | ---: | ---: | --- | --- |")
        for term in report.terms:
            band = format_band(term.uncertainty_bytes)
            how = (term.formula + (f" ({term.note})" if term.note else "")).replace("|", "/")
            out.append(f"| {term.name} | {term.bytes / GiB:,.2f} | {band} | {term.source.value} | {how} |")
        out.append("")
    rows = _kv_rows(report)
    if rows:
        out.append("| KV cache | value | from |")
        out.append("| --- | ---: | --- |")
        out.extend(f"| {a} | {b} | {c} |" for a, b, c in rows)
        out.append("")
    if comparison is not None:
        out.append("| term | logged | planned | difference | % |")
        out.append("| --- | ---: | ---: | ---: | ---: |")
        for row in comparison.rows:
            unit = " GiB" if row.unit == "bytes" else ""
            diff, pct = row.difference, row.percent
            out.append(
                f"| {row.name}{unit} | {_fmt_row_value(row, row.logged)} | {_fmt_row_value(row, row.planned)} | "
                f"{'—' if diff is None else _fmt_row_value(row, diff)} | {'—' if pct is None else f'{pct:+.1f}%'} |"
            )
        out.append("")
    for note in (*report.notes, *(comparison.notes if comparison else ())):
        out.append(f"- note: {note}")
    for item in report.missing:
        out.append(f"- missing: {item}")
    return "\n".join(out).rstrip() + "\n"
