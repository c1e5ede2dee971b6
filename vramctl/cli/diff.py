"""`vramctl diff`: one deployment planned two ways, term by term — the upgrade gate.

    vramctl diff --from 0.11 --to 0.33 -- vllm serve meta-llama/Llama-3.1-8B-Instruct
    vramctl diff qwen3-8b --gpu l40s --from vllm --to sglang --max-model-len 32768
    vramctl diff llama-3-8b --to-flags "--kv-cache-dtype fp8 --max-num-seqs 512"

Parse → two calls of the plan library → `vramctl.core.diff.diff_plans` → render. Exit 0 when the "to" side
starts, 1 when it does not, 2 for bad input. No torch import.
"""

from __future__ import annotations

from typing import Any

import typer

from vramctl.cli.engine_flags import MEMORY_HELP
from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode

_ENGINES = ("vllm", "sglang")


def parse_side(text: str | None, flag: str) -> tuple[str | None, str | None]:
    """`0.11` → (None, "0.11"); `sglang` → ("sglang", None); `vllm@0.11.0` → ("vllm", "0.11.0")."""
    if text is None:
        return None, None
    word = text.strip()
    engine, _, version = word.partition("@")
    from vramctl.core.engines.vllm import VERSION_TEXT

    if version and not VERSION_TEXT.fullmatch(version):
        raise BadInputError(f"{flag} {text!r}: {version!r} is not a version (e.g. 0.11.0)")
    if engine in _ENGINES:
        return engine, (version or None)
    if version:
        raise BadInputError(f"{flag} {text!r}: the engine before @ must be vllm or sglang (e.g. vllm@0.11.0)")
    if word and word[0].isdigit():
        if not VERSION_TEXT.fullmatch(word):
            raise BadInputError(f"{flag} {text!r}: not a version (e.g. 0.11.0)")
        return None, word
    raise BadInputError(f"{flag} {text!r}: give a version (0.11.0), an engine (vllm, sglang) or both (sglang@0.5.18)")


def _is_command(words: list[str]) -> bool:
    from vramctl.cli.plan import _is_launcher

    return bool(words) and _is_launcher(words[0])


def _side_words(words: list[str], flags: str | None, *, as_command: bool) -> list[str]:
    """The words `plan` receives for one side: the shared command plus that side's own flags. When either side
    has flags, both sides are written as `vllm serve MODEL …` so that they differ only by those flags."""
    from vramctl.cli.plan import DEFAULT_MODEL
    from vramctl.core.serve_command import split_words

    extra = split_words(flags) if flags else []
    if not as_command or _is_command(words):
        return [*words, *extra]
    if words and not words[0].startswith("-"):
        return ["vllm", "serve", *words, *extra]
    return ["vllm", "serve", DEFAULT_MODEL, *words, *extra]


def run_diff(
    words: list[str],
    options: dict[str, Any],
    *,
    from_side: str | None,
    to_side: str | None,
    from_flags: str | None,
    to_flags: str | None,
) -> Any:
    """Plan both sides and compare them (a DiffResult)."""
    from vramctl.cli.plan import run_plan
    from vramctl.core.diff import diff_plans

    from_engine, from_version = parse_side(from_side, "--from")
    to_engine, to_version = parse_side(to_side, "--to")
    if from_side is None and to_side is None and from_flags is None and to_flags is None:
        raise BadInputError(
            "diff: nothing to compare; give --from / --to (versions or engines) or --from-flags / --to-flags"
        )

    as_command = bool(from_flags or to_flags) or (len(words) > 1 and not _is_command(words))

    def one(engine: str | None, version: str | None, flags: str | None, engine_default: str | None) -> Any:
        side = dict(options)
        side["engine"] = engine or engine_default
        side["engine_version"] = version
        result, _, _ = run_plan(_side_words(words, flags, as_command=as_command), side)
        return result

    first = one(from_engine, from_version, from_flags, None)
    default_engine = str(first.engine)
    if to_engine is None:
        to_engine = default_engine
    if from_engine is None:
        from_engine = default_engine
    second = one(to_engine, to_version, to_flags, default_engine)
    if from_engine != to_engine:
        kind = "engines"
    elif str(first.engine_version) != str(second.engine_version):
        kind = "versions"
    else:
        kind = "flags"
    gap: tuple[str, ...] = ()
    if kind == "engines":
        both, _, _ = run_plan(_side_words(words, to_flags, as_command=as_command), {**options, "engine": "both"})
        gap = tuple(str(item.sentence) for item in both.gap)
    before_label = from_side or f"{first.engine}@{first.engine_version}"
    after_label = to_side or f"{second.engine}@{second.engine_version}"
    if kind == "flags":
        before_label = f"from-flags: {from_flags}" if from_flags else "as given"
        after_label = f"to-flags: {to_flags}" if to_flags else "as given"
    return diff_plans(
        first, second, kind=kind, before_label=before_label, after_label=after_label, gap_sentences=gap
    )


def register(app: typer.Typer) -> None:
    @app.command(
        "diff",
        context_settings={"allow_interspersed_args": True, "ignore_unknown_options": True},
        help=(
            "One deployment planned two ways — two engine versions (--from 0.11 --to 0.33), vLLM against SGLang "
            "(--from vllm --to sglang) or two flag sets (--to-flags '--kv-cache-dtype fp8') — term by term, with "
            "the versioned rule behind each term that moved. MODEL plus engine flags, or a serve command after "
            "`--`. Exit 0 when the 'to' side starts, 1 when it does not, 2 bad input."
        ),
    )
    def diff_command(
        words: list[str] = typer.Argument(
            None, metavar="[MODEL [ENGINE FLAGS…] | -- SERVE COMMAND…]", show_default=False
        ),
        model: str = typer.Option(None, "--model", help="HF id, alias or local config.json / model folder."),
        gpu: str = typer.Option(None, "--gpu", help="GPU name (default h100-sxm); see `vramctl gpus`."),
        gpu_memory: str = typer.Option(
            None, "--gpu-memory", help=f"A card's CUDA total, e.g. 79.18GiB ({MEMORY_HELP})."
        ),
        free_memory: str = typer.Option(
            None, "--free-memory", help=f"Free memory before start, e.g. 60GiB ({MEMORY_HELP})."
        ),
        host_memory: str = typer.Option(
            None, "--host-memory", help=f"Host RAM (default: this machine's; {MEMORY_HELP})."
        ),
        from_side: str = typer.Option(
            None, "--from", help="A version (0.11.0), an engine (vllm, sglang) or ENGINE@VERSION."
        ),
        to_side: str = typer.Option(None, "--to", help="As --from (default: the latest version known)."),
        from_flags: str = typer.Option(None, "--from-flags", help="Engine flags only the 'from' side gets."),
        to_flags: str = typer.Option(None, "--to-flags", help="Engine flags only the 'to' side gets."),
        json_out: bool = typer.Option(False, "--json", help="One JSON object (docs/json.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="GitHub Markdown."),
    ) -> None:
        from vramctl.cli.own_flags import DIFF_FLAGS, OWN_FLAGS, merge_own_flags, split_own_flags

        # --engine / --engine-version / --entrypoint are the sides' business (--from / --to) or the command's
        sides = {
            "--engine": "give the engines with --from / --to (e.g. --from vllm --to sglang)",
            "--engine-version": "give the versions with --from / --to (e.g. --from 0.11.0 --to 0.33.0)",
            "--entrypoint": "`vramctl diff` plans `vllm serve` (the server's defaults)",
            "--offline": "`vramctl diff` has no --offline; set HF_HUB_OFFLINE=1 before the command",
        }
        own_here = {f: v for f, v in {**OWN_FLAGS, **DIFF_FLAGS}.items() if f not in sides}
        command_words, own = split_own_flags(list(words or []), own_here, refused=sides)
        options = merge_own_flags(
            {
                "model": model,
                "gpu": gpu,
                "gpu_memory": gpu_memory,
                "free_memory": free_memory,
                "host_memory": host_memory,
                "json_out": json_out,
                "markdown": markdown,
                "from_side": from_side,
                "to_side": to_side,
                "from_flags": from_flags,
                "to_flags": to_flags,
            },
            own,
            own_here,
        )
        from_side, to_side = options.pop("from_side"), options.pop("to_side")
        from_flags, to_flags = options.pop("from_flags"), options.pop("to_flags")
        json_out, markdown = bool(options.pop("json_out")), bool(options.pop("markdown"))
        if json_out and markdown:
            raise BadInputError("--json and --markdown: pick one output format")
        result = run_diff(
            command_words,
            options,
            from_side=from_side,
            to_side=to_side,
            from_flags=from_flags,
            to_flags=to_flags,
        )
        if json_out:
            from vramctl.render.jsonout import dumps

            typer.echo(dumps(result.to_json()))
        elif markdown:
            from vramctl.render.diff import diff_markdown

            typer.echo(diff_markdown(result), nl=False)
        else:
            from vramctl.render.console import make_console
            from vramctl.render.diff import print_diff

            print_diff(result, make_console())
        raise typer.Exit(int(ExitCode.OK if result.after.starts else ExitCode.CHECK_FAILED))
