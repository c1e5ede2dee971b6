"""`vramctl check` output: a plain terminal report (rich) and a Markdown pull-request comment."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramctl.core.check import CheckResult, EngineOutcome
from vramctl.core.units import format_bytes, format_count

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _summary(r: CheckResult) -> str:
    failed = sum(1 for i in r.items if not i.ok)
    total = len(r.items)
    state = "PASS" if r.passed else "FAIL"
    counts = f"{total - failed}/{total} requirements hold" if total else "no requirements"
    return f"vramctl check {r.spec.source}: {state} ({counts})"


def outcome_line(o: EngineOutcome) -> str:
    return (
        f"{ENGINE_NAMES[o.engine]} {o.version}: {o.verdict}; {o.utilization_flag} {o.utilization:.3f}; "
        f"KV {format_bytes(o.kv_cache_bytes)} = {format_count(o.kv_tokens)} tokens "
        f"({o.max_concurrency:.2f}× at {format_count(o.context_len)}); weights {format_bytes(o.weights_bytes)}; "
        f"headroom {format_bytes(o.headroom_bytes)}"
    )


def render_check(r: CheckResult) -> RenderableType:
    parts: list[RenderableType] = [
        Text(_summary(r), style="bold green" if r.passed else "bold red"),
        Text(f"{r.spec.name}: {r.model_name} on {r.gpu_name}"),
    ]
    for o in r.outcomes:
        parts.append(Text("  " + outcome_line(o)))
        if o.host_tier is not None:
            parts.append(Text(f"  host tier: {o.host_tier.message}"))
    if r.items:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("")
        table.add_column("requirement")
        table.add_column("engine")
        table.add_column("actual", justify="right")
        table.add_column("required", overflow="fold")
        for item in r.items:
            table.add_row(
                Text("ok", style="green") if item.ok else Text("FAIL", style="bold red"),
                item.requirement,
                ENGINE_NAMES[item.engine],
                item.actual,
                item.required,
            )
        parts.append(table)
        # What to change, under the table: a whole line each, so flags are never cut at 80 columns.
        for item in r.items:
            if not item.ok and item.message:
                line = Text("  → ", style="bold red")
                line.append(f"{item.requirement} ({ENGINE_NAMES[item.engine]}): ", style="bold")
                line.append(item.message)
                parts.append(line)
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def check_markdown(r: CheckResult) -> str:
    """A pull-request comment: verdict first, then one row per requirement, then the plan per engine."""
    icon = "✅" if r.passed else "❌"
    failed = sum(1 for i in r.items if not i.ok)
    lines = [
        f"### {icon} vramctl check: `{r.spec.source}` {'passes' if r.passed else f'fails ({failed} of {len(r.items)})'}",
        "",
        f"**{_md_cell(r.spec.name)}**: `{r.model_name}` on {r.gpu_name}",
        "",
    ]
    if r.items:
        lines += [
            "| | requirement | engine | actual | required | what to change |",
            "|---|---|---|---:|---|---|",
        ]
        for item in r.items:
            lines.append(
                f"| {'✅' if item.ok else '❌'} | {item.requirement} | {ENGINE_NAMES[item.engine]} | "
                f"{_md_cell(item.actual)} | {_md_cell(item.required)} | {_md_cell(item.message)} |"
            )
        lines.append("")
    lines += ["<details><summary>plan</summary>", ""]
    for o in r.outcomes:
        lines.append(f"- {_md_cell(outcome_line(o))}")
        if o.host_tier is not None:
            lines.append(f"  - host tier: {_md_cell(o.host_tier.message)}")
    for note in r.notes:
        lines.append(f"- note: {_md_cell(note)}")
    lines += ["", "</details>", ""]
    return "\n".join(lines)
