"""`vramctl explain-oom [LOG | -]`: the root cause of a memory failure, from the log alone.

Thin glue: `diagnose(source)` (pure, streaming) → render. Exit 0 when a failure is diagnosed (a memory
failure, or `not-oom`: the log's failure is explained as something else), 3 when the log holds no
failure (`no-failure`), 2 on unreadable input. Never imports torch.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.render.jsonout import dumps


def register(app: typer.Typer) -> None:
    """Add `explain-oom` to the app."""

    @app.command("explain-oom")
    def explain_oom(
        log: Optional[str] = typer.Argument(
            None,
            metavar="[LOG | -]",
            help="The server log: a file (plain or gzip), or - for standard input (the default when piped).",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object (docs/explain-oom.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown for an issue comment."),
        timeline: Optional[str] = typer.Option(
            None,
            "--timeline",
            help="A `vramctl watch --record` FILE: leaks, neighbours, fragmentation from its samples (docs/watch.md).",
        ),
    ) -> None:
        """Explain a GPU / host memory failure from a vLLM, SGLang, TGI or TRT-LLM log: cause, phase, fixes.

        Exit 0: a failure was diagnosed (also `not-oom`); 3: the log holds no failure; 2: unreadable input.
        """
        from vramctl.diagnose.classify import diagnose

        if json_out and markdown:
            raise BadInputError("--json and --markdown: pick one output format")
        if log is None:
            if sys.stdin is None or sys.stdin.isatty():
                raise BadInputError("no log: give a LOG file, or pipe one in (`... | vramctl explain-oom -`)")
            log = "-"
        joined = None
        if timeline is not None:
            from vramctl.watch.timeline import explain_timeline

            joined = explain_timeline(timeline, log)
        result = diagnose(log)
        if json_out:
            data = result.to_json()
            if joined is not None:
                data["timeline"] = joined.to_json()
            typer.echo(dumps(data))
        elif markdown:
            from vramctl.render.diagnosis import diagnosis_markdown

            typer.echo(diagnosis_markdown(result), nl=False)
            if joined is not None:
                from vramctl.render.watch import timeline_text

                typer.echo("\n" + timeline_text(joined), nl=False)
        else:
            from vramctl.render.console import make_console
            from vramctl.render.diagnosis import render_diagnosis

            console = make_console()
            console.print(render_diagnosis(result))
            if joined is not None:
                from vramctl.render.watch import render_timeline

                console.print(render_timeline(joined))
        found = result.found_failure or (joined is not None and joined.cause is not None)
        raise typer.Exit(int(ExitCode.OK if found else ExitCode.NOTHING_FOUND))
