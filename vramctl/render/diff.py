"""`vramctl diff` output: a terminal report (rich) and GitHub Markdown. The verdicts come first."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramctl.core.diff import DiffResult, Side
from vramctl.core.units import format_bytes, format_count

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _signed(num_bytes: int) -> str:
    if num_bytes == 0:
        return "0"
    return ("+" if num_bytes > 0 else "−") + format_bytes(abs(num_bytes))


def side_line(s: Side) -> str:
    state = "starts" if s.starts else f"does not start ({s.verdict})"
    return (
        f"{s.label}: {ENGINE_NAMES.get(s.engine, s.engine)} {s.engine_version} {state}; KV {format_bytes(s.kv_cache_bytes)}"
        f" = {s.num_blocks} blocks of {s.block_size} = {format_count(s.kv_tokens)} tokens, "
        f"{s.max_concurrency:.2f}x at {s.max_model_len}; largest fitting --max-model-len {s.max_model_len_fit}"
    )


def headline(d: DiffResult) -> str:
    change = d.after.kv_cache_bytes - d.before.kv_cache_bytes
    pct = f" ({d.kv_change_fraction * 100:+.1f} %)" if d.before.kv_cache_bytes else ""
    text = f"vramctl diff ({d.kind}): {d.model} on {d.gpu}: KV cache {_signed(change)}{pct}"
    if d.stops_starting:
        text += f"; STOPS STARTING on {d.after.label}"
    elif not d.before.starts and d.after.starts:
        text += f"; starts on {d.after.label} (not on {d.before.label})"
    return text


def _rows(d: DiffResult) -> list[tuple[str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str]] = []
    for t in d.terms:
        why = ", ".join(t.rules)
        rows.append((t.name, format_bytes(t.before_bytes), format_bytes(t.after_bytes), _signed(t.delta_bytes), why))
    b, a = d.before, d.after
    rows.append(("blocks", str(b.num_blocks), str(a.num_blocks), f"{a.num_blocks - b.num_blocks:+d}", ""))
    rows.append(("KV tokens", str(b.kv_tokens), str(a.kv_tokens), f"{a.kv_tokens - b.kv_tokens:+d}", ""))
    rows.append(
        (
            "concurrency",
            f"{b.max_concurrency:.2f}x",
            f"{a.max_concurrency:.2f}x",
            f"{a.max_concurrency - b.max_concurrency:+.2f}",
            "",
        )
    )
    rows.append(
        (
            "largest --max-model-len",
            str(b.max_model_len_fit),
            str(a.max_model_len_fit),
            f"{a.max_model_len_fit - b.max_model_len_fit:+d}",
            "",
        )
    )
    return rows


def render_diff(d: DiffResult) -> RenderableType:
    parts: list[RenderableType] = [
        Text(headline(d), style="bold red" if d.stops_starting else "bold"),
        Text("  " + side_line(d.before)),
        Text("  " + side_line(d.after)),
    ]
    if not d.after.starts:
        parts.append(Text(f"  {d.after.label}: {d.after.verdict_message}", style="red"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for name, justify in (("term", "left"), (d.before.label, "right"), (d.after.label, "right"), ("Δ", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("rules", overflow="fold")
    for row in _rows(d):
        table.add_row(*row)
    parts.append(table)
    if d.settings:
        parts.append(Text("settings that moved:", style="bold"))
        for s in d.settings:
            origin = " (engine default)" if s.default_before or s.default_after else ""
            parts.append(Text(f"  {s.name}: {s.before} → {s.after}{origin}"))
    if d.rules:
        parts.append(Text("rules that changed between the versions:", style="bold"))
        for r in d.rules:
            parts.append(Text(f"  {r.key}: {r.name}: {r.before} → {r.after} (moves {', '.join(r.terms)}; {r.citation})"))
    elif d.kind == "versions":
        parts.append(Text("no versioned rule in vramctl's table differs between these versions", style="dim"))
    for sentence in d.gap_sentences:
        parts.append(Text(f"· {sentence}", style="dim"))
    return Group(*parts)


def print_diff(d: DiffResult, console: Console | None = None) -> None:
    (console or Console(soft_wrap=False)).print(render_diff(d))


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def diff_markdown(d: DiffResult) -> str:
    icon = "❌" if d.stops_starting or not d.after.starts else "✅"
    lines = [f"### {icon} {_md(headline(d))}", "", f"- {_md(side_line(d.before))}", f"- {_md(side_line(d.after))}", ""]
    lines += [f"| term | {_md(d.before.label)} | {_md(d.after.label)} | Δ | rules |", "|---|---:|---:|---:|---|"]
    lines += [f"| {' | '.join(_md(c) for c in row)} |" for row in _rows(d)]
    lines.append("")
    if d.settings:
        lines += ["**settings that moved**", ""]
        lines += [f"- `{s.name}`: {_md(str(s.before))} → {_md(str(s.after))}" for s in d.settings]
        lines.append("")
    if d.rules:
        lines += ["**rules that changed**", ""]
        lines += [f"- `{r.key}` {_md(r.name)}: {_md(r.before)} → {_md(r.after)} ({_md(r.citation)})" for r in d.rules]
        lines.append("")
    lines += [f"- {_md(s)}" for s in d.gap_sentences]
    return "\n".join(lines) + "\n"
