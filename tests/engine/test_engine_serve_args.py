"""Check 2: the serve command, read by vramctl and by vLLM's own argument parser.

serve_commands.txt holds the corpus; engine_args_driver.py (run by the engine's interpreter, one process for
the whole corpus) parses every line with the parser `vllm serve` builds and reports the EngineArgs fields that
decide memory. vramctl's reading (vramctl.core.serve_command) must give the same values, and, for a field the
command leaves unset, vramctl's resolved default must equal the engine's wherever the engine decides it without
the platform or the model (serve_corpus.FIELDS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import serve_corpus

COMMANDS = serve_corpus.load_corpus()


@pytest.fixture(scope="module")
def engine_parsed(engine_env: Any) -> dict[str, dict[str, Any]]:
    return serve_corpus.engine_parse(COMMANDS)


def test_the_corpus_has_at_least_30_command_lines() -> None:
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("command", [pytest.param(c, id=c.id) for c in COMMANDS])
def test_vramctl_reads_the_command_as_the_engine_does(
    command: serve_corpus.Command,
    engine_parsed: dict[str, dict[str, Any]],
    engine_env: Any,
    engine_record: Callable[..., None],
) -> None:
    theirs = engine_parsed.get(command.id)
    assert theirs is not None, f"the engine's parser gave no answer for {command.text}"
    assert "error" not in theirs, f"vLLM refuses {command.text}: {theirs['error']}"
    ours = serve_corpus.vramctl_parse(command, engine_env.version)
    rows = serve_corpus.compare(ours, theirs)
    wrong = [
        f"{field}: vramctl {mine!r} vs vLLM {engine!r}" for field, mine, engine, agree in rows if not agree
    ]
    engine_record(
        "2-serve-command",
        command.id,
        f"{len(rows)} settings",
        "; ".join(wrong) or "same",
        command.text[:120],
        not wrong,
    )
    assert not wrong, f"{command.text}\n" + "\n".join(wrong)
