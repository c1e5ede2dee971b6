"""`explain-oom` output: a Diagnosis as a rich panel (people) or Markdown (an issue comment)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vramctl.diagnose.classify import Diagnosis
from vramctl.diagnose.facts import format_fact

_ENGINES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "trtllm": "TensorRT-LLM",
    "lmcache": "LMCache",
    "ray": "Ray",
    "llamacpp": "llama.cpp",
}
_STYLE = {"high": "bold green", "medium": "yellow", "low": "red"}

# The facts worth a row in the panel, in this order (the JSON has them all).
_KEY_FACTS = (
    "requested_bytes",
    "total_bytes",
    "free_bytes",
    "free_at_start_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "private_pools_bytes",
    "process_in_use_bytes",
    "gpu_memory_utilization",
    "requested_budget_bytes",
    "mem_fraction_static",
    "mem_fraction_needed",
    "weights_bytes",
    "activation_peak_bytes",
    "non_torch_bytes",
    "kv_available_bytes",
    "kv_needed_bytes",
    "kv_tokens",
    "max_model_len",
    "estimated_max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "alloc_tokens",
    "available_tokens",
    "total_tokens",
    "prefill_tokens",
    "shm_request_bytes",
    "shm_available_bytes",
    "host_requested_bytes",
    "host_free_bytes",
)


def engine_text(diagnosis: Diagnosis) -> str:
    engine = _ENGINES.get(diagnosis.engine or "", diagnosis.engine or "engine unknown")
    return f"{engine} {diagnosis.engine_version}" if diagnosis.engine_version else engine


def key_facts(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for name in _KEY_FACTS:
        value = diagnosis.facts.get(name)
        if value is None:
            continue
        fmt = "count" if isinstance(value, int) and not name.endswith("_bytes") else None
        rows.append((name.removesuffix("_bytes").replace("_", " "), format_fact(name, value, fmt)))
    return rows


def _fix_text(flag: str | None, value: str | None) -> str:
    if flag is None:
        return ""
    if value is None:
        return flag
    if flag.isupper() or flag.startswith(
        ("PYTORCH_", "NCCL_", "VLLM_", "CUDA_", "LMCACHE_", "RAY_", "SGLANG_")
    ):
        return f"{flag}={value}"
    return f"{flag} {value}"


def render_diagnosis(diagnosis: Diagnosis) -> RenderableType:
    """The panel: cause, phase, confidence, the numbers, the evidence, the fixes, what not to do."""
    d = diagnosis
    parts: list[RenderableType] = []
    head = Text()
    head.append(d.cause, style="bold red" if d.is_memory_failure else "bold yellow")
    head.append(f"  phase: {d.phase}" + (" (inferred)" if d.phase_inferred else ""))
    head.append("  confidence: ")
    head.append(d.confidence, style=_STYLE.get(d.confidence, ""))
    head.append(f"  {engine_text(d)}", style="dim")
    parts.append(head)
    parts.append(Text(d.what or d.summary, style="italic"))
    for why in d.why:
        parts.append(Text(f"why: {why}"))
    rows = key_facts(d)
    if rows:
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="dim")
        table.add_column(justify="right")
        for name, value in rows:
            table.add_row(name, value)
        parts.append(Text("numbers from the log", style="bold"))
        parts.append(table)
    if d.evidence:
        parts.append(Text("evidence", style="bold"))
        for ev in d.evidence:
            line = Text(f"{ev.line:>7}  ", style="dim")
            line.append(ev.text[:240])
            parts.append(line)
    if d.fixes:
        parts.append(Text("fixes (ranked)", style="bold"))
        for i, fix in enumerate(d.fixes, 1):
            line = Text(f"{i}. ")
            setting = _fix_text(fix.flag, fix.value)
            if setting:
                line.append(setting, style="bold cyan")
                line.append(": ")
            line.append(fix.action)
            line.append(f" ({fix.reason})", style="dim")
            parts.append(line)
    for note in d.do_not:
        parts.append(Text(f"do not: {note}", style="magenta"))
    if d.other_failures:
        parts.append(Text("other failures", style="bold"))
        for other in d.other_failures:
            parts.append(Text(f"{other.line:>7}  {other.cause}: {other.text[:160]}", style="dim"))
    for warning in d.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    title = f"explain-oom: {d.source}" if d.source else "explain-oom"
    if len(title) > 60:  # a long path: a whole line of its own (folded), not a title cut to `…` at 80 columns
        folder, _, name = str(d.source).rpartition("/")
        parts.insert(0, Text(f"log: {name}" + (f" in {folder}/" if folder else ""), style="dim", overflow="fold"))
        title = "explain-oom"
    return Panel(Group(*parts), title=Text(title), title_align="left", expand=False)


def diagnosis_markdown(diagnosis: Diagnosis) -> str:
    """Markdown for an issue comment: the same content as the panel."""
    d = diagnosis
    out = [
        f"### `{d.cause}` ({d.phase}{', inferred' if d.phase_inferred else ''}; confidence {d.confidence})",
        "",
    ]
    out.append(f"{d.what or d.summary}. Engine: {engine_text(d)}.")
    out.append("")
    for why in d.why:
        out.append(f"- why: {why}")
    if d.why:
        out.append("")
    rows = key_facts(d)
    if rows:
        out += ["| number | value |", "| --- | ---: |"]
        out += [f"| {name} | {value} |" for name, value in rows]
        out.append("")
    if d.evidence:
        out.append("**Evidence**")
        out.append("")
        out.append("```")
        out += [f"{ev.line:>7}  {ev.text}" for ev in d.evidence]
        out.append("```")
        out.append("")
    if d.fixes:
        out.append("**Fixes** (ranked)")
        out.append("")
        for i, fix in enumerate(d.fixes, 1):
            setting = _fix_text(fix.flag, fix.value)
            lead = f"`{setting}`: " if setting else ""
            out.append(f"{i}. {lead}{fix.action} ({fix.reason})")
        out.append("")
    if d.do_not:
        out.append("**Do not**")
        out.append("")
        out += [f"- {note}" for note in d.do_not]
        out.append("")
    if d.other_failures:
        out.append("**Other failures in the log**")
        out.append("")
        out += [f"- line {o.line}: `{o.cause}`: {o.text[:160]}" for o in d.other_failures]
        out.append("")
    for warning in d.warnings:
        out.append(f"> warning: {warning}")
    out.append("")
    out.append("<sub>vramctl explain-oom</sub>")
    return "\n".join(out) + "\n"
