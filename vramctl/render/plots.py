"""Charts as PNG / SVG files (matplotlib, the optional `plot` extra: `pip install vramctl[plot]`).

matplotlib is imported only when a chart is drawn; without it the command fails with one line and exit 2.
Files are written atomically (a temporary file renamed over the target), so an interrupted run never leaves
half a picture.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vramctl.core.atomic import output_target, write_bytes_atomic
from vramctl.core.errors import BadInputError

FORMATS = ("png", "svg")


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadInputError(
            "--plot needs matplotlib, which is not installed (pip install 'vramctl[plot]')"
        ) from None
    return plt


def check_plot_target(path: str) -> str:
    """Validate `--plot FILE` before any work: a .png or .svg in an existing folder, matplotlib present."""
    target = Path(path)
    fmt = target.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise BadInputError(f"--plot {path}: the file must end in .png or .svg")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise BadInputError(f"--plot {path}: no such directory {str(parent)!r}")
    if target.is_dir():
        raise BadInputError(f"--plot {path}: is a directory")
    target = output_target(path, flag="--plot")  # never a FIFO / device; a symbolic link: its file
    _refuse_foreign_file(target, path)
    _matplotlib()
    return fmt


def _refuse_foreign_file(target: Path, path: str) -> None:
    """An existing file at --plot is replaced only when it is an image (a PNG or an SVG): never a user's other file."""
    try:
        if not target.is_file() or target.stat().st_size == 0:
            return
        with target.open("rb") as handle:
            head = handle.read(512)
    except OSError:
        return
    if not (head.startswith(b"\x89PNG") or b"<svg" in head or head.lstrip().startswith(b"<?xml")):
        raise BadInputError(
            f"--plot {path}: the file exists and is not a PNG or SVG image; not overwriting it "
            "(remove it or pick another name)"
        )


def _save(fig: Any, path: str) -> None:
    fmt = check_plot_target(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=120, bbox_inches="tight")
    try:
        write_bytes_atomic(path, buffer.getvalue(), flag="--plot")
    except OSError as exc:
        raise BadInputError(f"--plot {path}: cannot write ({exc.strerror})") from None


def plot_crossover(plan: Any, path: str) -> None:
    """Fetch time of each tier vs recompute time, over prefix lengths 16 … 128 k tokens (log-log)."""
    plt = _matplotlib()
    lengths = [2**i for i in range(4, 18)]
    rate = plan.rate.tokens_per_s
    bpt = plan.bytes_per_token
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(
        lengths,
        [n / rate for n in lengths],
        color="black",
        linewidth=2.5,
        label=f"recompute at R = {rate:,.0f} tok/s",
    )
    for verdict in plan.tiers:
        link = verdict.link
        times = [link.latency_s + n * bpt / link.read_bytes_per_s for n in lengths]
        style = "-" if verdict.fetch_wins else "--"
        ax.plot(
            lengths,
            times,
            style,
            label=f"{link.name} {link.read_bytes_per_s / 1e9:,.2f} GB/s: "
            + (
                f"fetch {verdict.advantage:.1f}x faster"
                if verdict.fetch_wins
                else f"recompute {1 / verdict.advantage:.1f}x faster"
            ),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prefix length (tokens)")
    ax.set_ylabel("time to have the KV on the GPU (s)")
    ax.set_title(f"{plan.model} on {plan.gpu}\nfetch vs recompute, {bpt:,} B of KV per token per rank")
    _finish(plt, fig, ax, path, legend_outside=True)


def _finish(plt: Any, fig: Any, ax: Any, path: str, *, legend_outside: bool = False) -> None:
    """Grid, legend, write the file, free the figure (even when writing fails).

    `legend_outside`: the legend goes to the right of the axes (the crossover chart's lines fill every corner).
    """
    ax.grid(True, which="both", alpha=0.3)
    if legend_outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=8)
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def plot_hit_curve(results: Sequence[Any], path: str, *, title: str) -> None:
    """Hit rate (token-weighted and per-request mean) against GPU capacity."""
    plt = _matplotlib()
    finite = [r for r in results if r.tiers[0].capacity_tokens is not None]
    unlimited = [r for r in results if r.tiers[0].capacity_tokens is None]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [r.tiers[0].capacity_tokens for r in finite]
    scope = ""
    if results and len(results[0].tiers) > 1:
        # Name the fixed lower tiers, so "hit rate" is read as GPU + host (+ disk), not the GPU alone.
        scope = (
            " (all tiers: GPU + "
            + " + ".join(
                f"{t.name} {t.capacity_tokens:,} tok"
                if t.capacity_tokens is not None
                else f"{t.name} unlimited"
                for t in results[0].tiers[1:]
            )
            + ")"
        )
    ax.plot(xs, [r.token_hit_rate for r in finite], "o-", label=f"hit rate{scope}, token-weighted")
    ax.plot(xs, [r.request_hit_rate for r in finite], "s--", label=f"hit rate{scope}, per-request mean")
    if any(r.tier("host") is not None for r in finite):
        ax.plot(xs, [r.tiers[0].token_hit_rate for r in finite], "^:", label="GPU tier alone, token-weighted")
    for r in unlimited:
        ax.axhline(r.token_hit_rate, color="grey", linestyle=":", label=f"unlimited: {r.token_hit_rate:.1%}")
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 10:
        ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:.0%}"))
    ax.set_xlabel("GPU tier capacity (tokens)")
    ax.set_ylabel("prefix hit rate")
    ax.set_title(title)
    _finish(plt, fig, ax, path)
