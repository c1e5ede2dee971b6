"""`vramctl read-log LOG`: where the memory went, from the engine's own start-up lines.

Thin glue: read the log with the streaming reader, call `parse_startup_log` (pure), optionally plan the
same settings and `compare_with_plan`, then render. Never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional

import typer

from vramctl.cli.engine_flags import read_memory
from vramctl.core.errors import BadInputError, VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.diagnose.reader import LogLine, TruncatedInputError, iter_matching_lines
from vramctl.diagnose.startup import (
    Comparison,
    StartupReport,
    compare_with_plan,
    parse_startup_log,
    settings_from_report,
    startup_prefilter,
)
from vramctl.render.jsonout import dumps

if TYPE_CHECKING:
    from vramctl.core.serve_command import ServeCommand


def _lines(source: str, warnings: list[str]) -> Iterator[LogLine]:
    """Every readable line; a truncated gzip ends the stream with a warning instead of an error."""
    try:
        # Only the lines read-log can use (and the one after each), at close to the regex engine's speed.
        yield from iter_matching_lines(source, startup_prefilter(), context_after=1)
    except TruncatedInputError as exc:
        warnings.append(f"{exc} (read-log used the {exc.lines_read:,} lines before it)")


def _engine_version(report: StartupReport, engine_version: str | None) -> str | None:
    """`--engine-version` for a log that does not state its version; a stated one must agree."""
    if engine_version is None:
        return None
    from vramctl.core.settings import parse_version

    try:
        wanted = parse_version(engine_version)
    except (ValueError, TypeError):
        raise BadInputError(f"--engine-version {engine_version}: not a version (e.g. 0.10.1)") from None
    if report.version_source == "log" and report.engine_version is not None:
        try:
            stated: tuple[int, ...] | None = parse_version(report.engine_version)
        except (ValueError, TypeError):
            stated = None
        if stated is not None and stated[:3] != wanted[:3]:
            raise BadInputError(
                f"--engine-version {engine_version}: the log states {report.engine} {report.engine_version}; "
                "drop the option or pass that version"
            )
    return ".".join(str(p) for p in wanted)


def _serve_command(command: str, report: StartupReport) -> ServeCommand:
    """`--command`: the serve command the log came from, for the settings the log does not state."""
    from vramctl.core.serve_command import parse_serve_command

    parsed = parse_serve_command(command)
    if report.engine in ("vllm", "sglang") and parsed.engine != report.engine:
        raise BadInputError(f"--command: a {parsed.engine} command for a {report.engine} log")
    return parsed


def _compare(
    report: StartupReport,
    model_name: str | None,
    gpu_name: str | None,
    engine_version: str | None = None,
    command: ServeCommand | None = None,
) -> Comparison:
    from vramctl.core.engines.vllm_speculative import needs_draft_model
    from vramctl.core.plan import plan
    from vramctl.registry import gpu_from_capacity, load_draft_model, load_gpu, load_model

    name = model_name
    if name is None:
        logged = report.settings.get("model")
        if logged is None and command is not None and command.model:
            logged_name: str | None = command.model
        else:
            logged_name = None if logged is None else str(logged.value)
        if logged_name is None:
            raise BadInputError("--compare-plan: the log does not name the model; pass --model NAME")
        name = logged_name
    try:
        model = load_model(name)
    except VramctlError as exc:
        # A local checkpoint path the log names (`/models/Qwen3-14B`): its last component is often the
        # repository name the registry knows.
        base = name.rstrip("/").rsplit("/", 1)[-1]
        found = None
        if model_name is None and "/" in name and base:
            try:
                found = load_model(base)
            except VramctlError:
                found = None
        if found is None:
            hint = "" if model_name else " (the model the log names); pass --model NAME"
            raise BadInputError(f"--compare-plan: {exc}{hint}") from None
        model = found
    note = None
    if gpu_name is not None:
        gpu = load_gpu(gpu_name)
    elif report.capacity_bytes is not None:
        gpu = gpu_from_capacity(report.capacity_bytes)
    elif (free := _free_before_loading(report)) is not None:
        gpu, note = _card_holding(*free)
    else:
        raise BadInputError(
            "--compare-plan: the log does not print the device total; pass --gpu NAME or --gpu-memory SIZE"
        )
    version = _engine_version(report, engine_version)
    fallback = command.changes if command is not None else ()
    settings = settings_from_report(report, engine_version=version, fallback=fallback)
    if needs_draft_model(settings.speculative_method, settings.speculative_model):
        assert settings.speculative_model is not None
        try:  # the draft the log names, counted as plan counts it
            settings = settings.with_changes(speculative_draft=load_draft_model(settings.speculative_model))
        except VramctlError as exc:
            said = f"{exc}: planned without the draft's weights and KV"
            note = f"{note}; {said}" if note else said
    result = plan(model, gpu, settings)
    comparison = compare_with_plan(report, result, settings)
    if fallback:
        taken = sorted({field for field, _ in fallback})
        said = "settings the log does not state taken from --command (the log wins where it states one): "
        note = (f"{note}; " if note else "") + said + ", ".join(taken)
    if version is not None:
        planned = settings.engine_version or version
        said = f"planned with vLLM {planned} (--engine-version {engine_version})"
        if planned != version:
            said = f"planned with vLLM {planned}'s V0 rules: the log is a V0 engine (--engine-version {engine_version})"
        note = f"{note}; {said}" if note else said
    if note is not None:
        from dataclasses import replace

        comparison = replace(comparison, notes=(note, *comparison.notes))
    return comparison


FREE_ONLY_SLACK_BYTES = 6 << 30
"""A card whose total exceeds the logged free memory by at most this (CUDA context, other processes)."""


def _free_before_loading(report: StartupReport) -> tuple[int, str] | None:
    """SGLang's free memory before the weights load, and how it was read: `Load weight begin. avail mem=X GB`,
    else `Load weight end. ... avail mem=A GB, mem usage=U GB` as A + U (sglang model_runner.py load_model:
    `weight_load_mem_usage = before_avail_memory - after_avail_memory`, so the sum is the free memory before)."""
    if (begin := report.facts.get("load_begin_avail")) is not None:
        return int(begin.value), "before loading, SGLang's avail mem"
    end, usage = report.facts.get("load_end_avail"), report.facts.get("load_mem_usage")
    if end is None or usage is None:
        return None
    return int(end.value) + int(usage.value), "before loading: SGLang's avail mem after loading + its mem usage"


def _card_holding(free_bytes: int, how: str) -> tuple[Any, str]:
    """The device for a log that prints only free memory (`_free_before_loading`): the bundled card with the
    smallest total at or above it (within 6 GiB), else a card of that free size."""
    from vramctl.registry import gpu_from_capacity, list_gpus

    fits = [g for g in list_gpus() if free_bytes <= g.cuda_total_bytes <= free_bytes + FREE_ONLY_SLACK_BYTES]
    said = f"the log shows only free memory ({free_bytes / 2**30:.2f} GiB {how})"
    if fits:
        card = min(fits, key=lambda g: (g.cuda_total_bytes, g.name))
        return card, (
            f"{said}; planned on {card.name} ({card.cuda_total_bytes / 2**30:.2f} GiB), the smallest bundled card "
            "that holds it; pass --gpu or --gpu-memory to choose"
        )
    return gpu_from_capacity(free_bytes), (
        f"{said}; planned with it as the device total; pass --gpu or --gpu-memory to choose"
    )


def _json(
    report: StartupReport, comparison: Comparison | None, warnings: list[str], source: str
) -> dict[str, Any]:
    out = report.to_json()
    out["log"] = source
    out["warnings"] = warnings
    if comparison is not None:
        out["comparison"] = comparison.to_json()
    return out


def register(app: typer.Typer) -> None:
    """Add `read-log` to the app."""

    @app.command("read-log")
    def read_log(
        log: str = typer.Argument(
            ..., help="The start-up log: a file (plain or .gz) or - for standard input."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object (docs/read-log.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown (for an issue comment)."),
        gpu: Optional[str] = typer.Option(
            None, "--gpu", help="The GPU (e.g. h100-sxm): its capacity when the log does not print it."
        ),
        gpu_memory: Optional[str] = typer.Option(
            None,
            "--gpu-memory",
            help="The device total (e.g. 79.18GiB; a bare number is GiB) when the log omits it.",
        ),
        compare_plan: bool = typer.Option(
            False, "--compare-plan", help="Plan the same settings and put the plan beside the logged numbers."
        ),
        model: Optional[str] = typer.Option(
            None, "--model", help="The model for --compare-plan (default: the one the log names)."
        ),
        engine_version: Optional[str] = typer.Option(
            None,
            "--engine-version",
            help="The engine version for --compare-plan when the log does not state it (e.g. 0.10.1).",
        ),
        run: Optional[int] = typer.Option(
            None,
            "--run",
            help="Which engine start of a log with several (0-based; default: the most complete).",
        ),
        command: Optional[str] = typer.Option(
            None,
            "--command",
            help="The serve command the log came from (quoted), for --compare-plan: the settings the log does "
            "not state (e.g. an excerpt without the args line); the log wins where both state one.",
        ),
    ) -> None:
        """Decompose the GPU memory budget from a vLLM / SGLang start-up log into the ledger `plan` prints."""
        if json_out and markdown:
            raise BadInputError("--json and --markdown: pick one output format")
        if gpu is not None and gpu_memory is not None:
            raise BadInputError(f"--gpu {gpu} and --gpu-memory {gpu_memory}: give one capacity, not both")
        if model is not None and not compare_plan:
            raise BadInputError(f"--model {model}: only used with --compare-plan")
        if engine_version is not None and not compare_plan:
            raise BadInputError(f"--engine-version {engine_version}: only used with --compare-plan")
        if command is not None and not compare_plan:
            raise BadInputError("--command: only used with --compare-plan")
        capacity: int | None = None
        capacity_source = "--gpu-memory"
        if gpu_memory is not None:
            capacity = read_memory(gpu_memory, "--gpu-memory") or 0
            if capacity <= 0:
                raise BadInputError(f"--gpu-memory {gpu_memory}: must be more than 0")
        elif gpu is not None:
            from vramctl.registry import load_gpu

            capacity = load_gpu(gpu).cuda_total_bytes
            capacity_source = f"--gpu {gpu}"
        warnings: list[str] = []
        report = parse_startup_log(
            _lines(log, warnings), gpu_memory_bytes=capacity, gpu_memory_source=capacity_source, run=run
        )
        source = "<stdin>" if log == "-" else log
        if not report.found:
            if json_out:
                typer.echo(dumps(_json(report, None, warnings, source)))
            else:
                for warning in warnings:
                    typer.echo(f"vramctl: warning: {warning}", err=True)
                typer.echo(
                    f"vramctl: {source}: no start-up memory lines (vLLM profiling / KV cache lines, SGLang "
                    "'Load weight' / 'KV Cache' / 'Memory pool' lines)",
                    err=True,
                )
            raise typer.Exit(int(ExitCode.NOTHING_FOUND))
        comparison = None
        cannot_compare: BadInputError | None = None
        if compare_plan:
            # What was read is printed even when no plan can be made (an unknown model or GPU total): the
            # partial ledger first, then the reason, and exit 2.
            try:
                parsed = _serve_command(command, report) if command is not None else None
                comparison = _compare(report, model, gpu, engine_version, parsed)
            except BadInputError as exc:
                cannot_compare = exc
        if json_out:
            out = _json(report, comparison, warnings, source)
            if cannot_compare is not None:
                out["comparison_error"] = str(cannot_compare)
            typer.echo(dumps(out))
        else:
            for warning in warnings if cannot_compare is None else ():  # the error stays the one stderr line
                typer.echo(f"vramctl: warning: {warning}", err=True)
            if markdown:
                from vramctl.render.startup import startup_markdown

                typer.echo(startup_markdown(report, comparison), nl=False)
            else:
                from vramctl.render.console import make_console
                from vramctl.render.startup import render_startup

                make_console().print(render_startup(report, comparison))
        if cannot_compare is not None:
            where = "" if json_out else " (the ledger printed is what the log says)"
            typer.echo(f"vramctl: error: {cannot_compare}{where}", err=True)
            raise typer.Exit(int(cannot_compare.exit_code))
