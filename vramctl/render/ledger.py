"""A Ledger as a rich table, a stacked bar, or Markdown: shared by plan, profile and read-log.

render_ledger(ledger, title) -> rich renderable (table + bar)
ledger_table(ledger, title)  -> rich Table
stacked_bar(ledger, width)   -> rich Text (one character per capacity/width bytes)
ledger_markdown(ledger)      -> str (a Markdown table)
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    MAMBA_STATE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
)
from vramctl.core.units import GiB, MiB

TERM_STYLE: dict[str, tuple[str, str]] = {
    OTHER_PROCESSES: ("bright_black", "X"),
    WEIGHTS: ("blue", "W"),
    ACTIVATION_PEAK: ("magenta", "A"),
    NON_TORCH: ("yellow", "O"),
    CUDA_GRAPH: ("cyan", "G"),
    KV_CACHE: ("green", "K"),
    MAMBA_STATE: ("bright_green", "M"),
    SLACK: ("white", "."),
}
_FALLBACK_STYLE = ("red", "?")


def _gib(num: int) -> str:
    return f"{num / GiB:,.2f}"


def format_band(uncertainty_bytes: int) -> str:
    """An uncertainty band with its unit: GiB with two decimals when that shows it, else MiB (a log's
    ±0.005 GiB rounding is `5.1 MiB`, not `0.00`), else bytes."""
    if not uncertainty_bytes:
        return ""
    if abs(uncertainty_bytes) >= 0.095 * GiB:
        return f"{uncertainty_bytes / GiB:.2f} GiB"
    mib = uncertainty_bytes / MiB
    return f"{mib:.1f} MiB" if abs(mib) >= 0.05 else f"{uncertainty_bytes:,} B"


def _band(term: Term) -> str:
    band = format_band(term.uncertainty_bytes)
    return f"± {band}" if band else ""


def ledger_table(ledger: Ledger, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("±", justify="right")
    table.add_column("share", justify="right")
    table.add_column("source")
    cap = ledger.capacity_bytes or 1
    for term in ledger.terms:
        style, _ = TERM_STYLE.get(term.name, _FALLBACK_STYLE)
        if term.name == KV_CACHE and term.bytes < 0:
            # No pool at all: the other terms exceed the budget; say by how much rather than print −0.68 GiB.
            table.add_row(
                Text(term.name, style=style),
                _gib(0),
                "",
                f"{0:.1%}",
                Text(f"short by {-term.bytes / GiB:.2f} GiB", style="red"),
            )
            continue
        table.add_row(
            Text(term.name, style=style),
            _gib(term.bytes),
            _band(term),
            f"{term.bytes / cap:.1%}",
            term.source.value,
        )
    table.add_row(Text("total", style="bold"), _gib(ledger.capacity_bytes), "", "100.0%", "capacity")
    return table


def term_formulas(ledger: Ledger) -> Text:
    """How each term was obtained, one line per term (formula, then the note)."""
    text = Text()
    for term in ledger.terms:
        if not term.formula and not term.note:
            continue
        style, _ = TERM_STYLE.get(term.name, _FALLBACK_STYLE)
        text.append(f"  {term.name}", style=style)
        text.append(f": {term.formula}" + (f" — {term.note}" if term.note else "") + "\n")
    text.rstrip()
    return text


def stacked_bar(ledger: Ledger, width: int = 50) -> Text:
    """One bar of `width` cells; each term gets cells in proportion to its bytes (negative terms get none)."""
    cap = ledger.capacity_bytes
    text = Text()
    if cap <= 0 or width <= 0:
        return text
    positive = [(t, max(0, t.bytes)) for t in ledger.terms]
    total = sum(b for _, b in positive) or 1
    cells = [int(b * width / total) for _, b in positive]
    # Hand the rounding remainder to the largest terms so the bar is exactly `width` wide.
    remainder = width - sum(cells)
    order = sorted(range(len(positive)), key=lambda i: -(positive[i][1] * width / total - cells[i]))
    for i in order[:remainder]:
        cells[i] += 1
    for (term, _), n in zip(positive, cells, strict=True):
        style, char = TERM_STYLE.get(term.name, _FALLBACK_STYLE)
        text.append(char * n, style=f"bold {style}")
    text.append("\n")
    for term, _ in positive:
        style, char = TERM_STYLE.get(term.name, _FALLBACK_STYLE)
        text.append(f"{char}", style=f"bold {style}")
        text.append(f" {term.name}  ")
    return text


def render_ledger(ledger: Ledger, title: str) -> Group:
    """The ledger table with its stacked bar underneath (a rich renderable)."""
    return Group(ledger_table(ledger, title), stacked_bar(ledger), term_formulas(ledger))


def ledger_markdown(ledger: Ledger) -> str:
    """A GitHub Markdown table of the ledger (GiB with two decimals, band, share, source, formula)."""
    lines = ["| term | GiB | ± | share | source | how |", "| --- | ---: | ---: | ---: | --- | --- |"]
    cap = ledger.capacity_bytes or 1
    for term in ledger.terms:
        how = term.formula + (f" ({term.note})" if term.note else "")
        band = format_band(term.uncertainty_bytes)
        if term.name == KV_CACHE and term.bytes < 0:
            lines.append(f"| {term.name} | 0.00 | | 0.0% | short by {-term.bytes / GiB:.2f} GiB | {how} |")
            continue
        lines.append(
            f"| {term.name} | {_gib(term.bytes)} | {band} | {term.bytes / cap:.1%} | {term.source.value} | "
            f"{how.replace('|', '/')} |"
        )
    lines.append(f"| **total** | {_gib(ledger.capacity_bytes)} | | 100.0% | | the card's capacity |")
    return "\n".join(lines) + "\n"
