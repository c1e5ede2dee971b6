"""The shared ledger renderer (vramctl.render.ledger) used by plan, profile and read-log."""

from __future__ import annotations

from rich.console import Console

from vramctl.core.ledger import Ledger, Term, TermSource
from vramctl.core.units import GiB
from vramctl.render.ledger import ledger_markdown, render_ledger, stacked_bar


def _ledger() -> Ledger:
    return Ledger.with_residual(
        80 * GiB,
        [
            Term("weights", 15 * GiB, TermSource.MEASURED, "torch allocated after load"),
            Term("activation_peak", 5 * GiB, TermSource.ESTIMATED, "sampler", uncertainty_bytes=GiB),
            Term("kv_cache", 54 * GiB, TermSource.DERIVED, "residual"),
        ],
    )


def test_render_ledger_prints_every_term_and_the_total() -> None:
    console = Console(width=120, record=True)
    console.print(render_ledger(_ledger(), "measured"))
    text = console.export_text()
    for needle in (
        "measured",
        "weights",
        "activation_peak",
        "± 1.00",
        "kv_cache",
        "slack",
        "80.00",
        "estimated",
    ):
        assert needle in text


def test_stacked_bar_is_exactly_the_width() -> None:
    bar = stacked_bar(_ledger(), width=40).plain.split("\n")[0]
    assert len(bar) == 40
    assert bar.count("K") == round(54 / 80 * 40)


def test_ledger_markdown() -> None:
    md = ledger_markdown(_ledger())
    lines = md.strip().splitlines()
    assert lines[0].startswith("| term | GiB |")
    assert "| weights | 15.00 |" in md and "| slack | 6.00 |" in md and "**total** | 80.00" in md
