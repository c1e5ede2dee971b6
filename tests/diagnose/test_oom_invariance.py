"""explain-oom answers the same when the same log is pasted differently (issue 9: "Wrapped, quoted or shortened text
breaks exact matching").

Each engine text (the project's own hand-written logs in tests/fixtures/oom, and one synthesised here from vLLM's
format strings) is re-pasted the ways real pastes do (vramctl/diagnose/pasted.py undoes them): hard-wrapped at
80 / 100 / 120 columns, cut inside words too; HTML entities (an HTML export of a thread); the whole log as one JSON
string with `\\n` escapes; a markdown quote inside a list; line numbers; a `name | ` tag on every line; colour codes
written out as JSON escapes. The cause, the phase and the first fix (flag and value) must not change.
scripts/eval_invariance.py measures the same over every development log.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from vramctl.diagnose import diagnose
from vramctl.diagnose.pasted import Unpaster, sniff

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "oom"

# synthesised from vLLM's own format strings (vllm/v1/core/kv_cache_utils.py, 0.10): one long line, wrapped by a paste
_VLLM_KV = (
    "INFO 06-01 10:00:00 [config.py:1604] Using max model len 131072\n"
    "INFO 06-01 10:00:05 [gpu_model_runner.py:1843] Model loading took 14.99 GiB and 4.11 seconds\n"
    "INFO 06-01 10:00:09 [gpu_worker.py:232] Available KV cache memory: 2.31 GiB\n"
    "ERROR 06-01 10:00:09 [core.py:586] ValueError: To serve at least one request with the models's max seq len "
    "(131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (2.31 GiB). Based on "
    "the available memory, the estimated maximum model length is 18896. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
)

TEXTS: dict[str, Callable[[], str]] = {
    "synth_vllm_kv_max_len": lambda: _VLLM_KV,
    **{
        name: (lambda name=name: (FIXTURES / f"{name}.log").read_text())
        for name in (
            "vllm_sampler_cut_traceback",
            "sglang_init_memory_pool_frames",
            "torch1_fragmentation_max_split",
            "sglang_sigquit_self_kill",
            "vllm_sampler_wrapped_after_capture",
            "sglang_load_model_cut_traceback",
            "vllm_killed_mid_log",
        )
    },
}


def _per_line(fn: Callable[[int, str], str]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        lines = text.rstrip("\n").split("\n")
        return "\n".join(fn(i, line) for i, line in enumerate(lines)) + "\n"

    return apply


def _wrap(width: int) -> Callable[[str], str]:
    def apply(text: str) -> str:
        out: list[str] = []
        for line in text.split("\n"):
            out.extend([line[i : i + width] for i in range(0, len(line), width)] or [""])
        return "\n".join(out)

    return apply


PERTURBATIONS: dict[str, Callable[[str], str]] = {
    "wrap-80": _wrap(80),
    "wrap-100": _wrap(100),
    "wrap-120": _wrap(120),
    "html-entities": lambda text: html.escape(text, quote=True).replace("&#x27;", "&#39;"),
    "json-string": lambda text: json.dumps({"error": text}) + "\n",
    "quote-list": _per_line(lambda i, line: ("> - " if i == 0 else ">   ") + line),
    "line-numbers": _per_line(lambda i, line: f"{i + 1}: {line}"),
    "line-numbers-L": _per_line(lambda i, line: f"L{i + 1} {line}"),
    "tag": _per_line(lambda i, line: "vllm-server | " + line),
    "ansi-json": _per_line(lambda i, line: f"\\u001b[31m{line}\\u001b[0m" if "rror" in line else line),
}


def _answer(path: Path) -> tuple[str, str, str | None, str | None]:
    result = diagnose(path)
    fix = result.fixes[0] if result.fixes else None
    return result.cause, result.phase, fix.flag if fix else None, None if fix is None else str(fix.value)


@cache
def _tmpdir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="vramctl-invariance-")


@cache
def _original(name: str) -> tuple[str, str, str | None, str | None]:
    path = Path(_tmpdir()) / f"{name}.log"
    path.write_text(TEXTS[name]())
    return _answer(path)


@pytest.mark.parametrize("perturbation", list(PERTURBATIONS))
@pytest.mark.parametrize("name", list(TEXTS))
def test_oom_pasted_differently_answered_the_same(name: str, perturbation: str, tmp_path: Path) -> None:
    text = TEXTS[name]()
    pasted = PERTURBATIONS[perturbation](text)
    if pasted == text:
        pytest.skip("the paste leaves this text as it is")
    path = tmp_path / f"{name}.log"
    path.write_text(pasted)
    assert _answer(path) == _original(name)


def test_oom_synthesised_kv_text_is_a_kv_failure_with_a_number() -> None:
    """The synthesised text is what the invariance cases compare against: a KV failure with a pasteable value."""
    path_answer = _original("synth_vllm_kv_max_len")
    assert path_answer[0] == "kv-cache-too-small-for-max-model-len"
    assert path_answer[2] == "--max-model-len" and path_answer[3] is not None and path_answer[3].isdigit()


# --------------------------------------------------------------------------------------------------
# What is not a paste stays as it is


def _unpasted(text: str) -> str:
    return Unpaster().block(1, text.encode(), None)[0].decode()


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.name)
def test_oom_plain_fixture_logs_are_not_changed(path: Path) -> None:
    data = path.read_bytes()
    assert Unpaster().block(1, data, None)[0] == data


def test_oom_table_rows_of_one_width_are_not_joined() -> None:
    rows = [
        f"GPU{i}    " + "    ".join("X" if j == i else "NV18" for j in range(8)) + "    0-47    0    N/A"
        for i in range(8)
    ]
    text = "\n".join(["nvidia-smi topo -m", *rows, "", "Legend: X = Self"]) + "\n"
    assert _unpasted(text) == text


def test_oom_word_wrapped_prose_and_repeated_records_are_not_joined() -> None:
    prose = (
        "After the upgrade the server no longer starts on the same card. The error below is\n"
        "printed while the model loads, and the same flags worked on the previous release of\n"
        "the engine, so this looks like a regression in how the memory is budgeted at start.\n"
    )
    assert _unpasted(prose) == prose
    same = "INFO 06-01 10:00:00 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs\n"
    assert _unpasted(same * 3 + "tail\n") == same * 3 + "tail\n"


def test_oom_times_at_line_starts_are_not_line_numbers() -> None:
    text = "".join(f"10:00:{i:02d} INFO step {i}\n" for i in range(10))
    assert _unpasted(text) == text
    assert _unpasted("1: a\n2:\n3: c\n") == "a\n\nc\n"


def test_oom_hard_wrap_rejoined_keeps_first_line_numbers() -> None:
    pasted = _wrap(80)(_VLLM_KV)
    out, numbers = Unpaster().block(1, pasted.encode(), None)
    assert out.decode() == _VLLM_KV
    # each line is numbered as its first piece in the pasted text (line 2 was cut once, the failure line four times)
    assert numbers == [1, 2, 4, 5]
    failure = [e for e in diagnose(_write(pasted)).evidence if "ValueError" in e.text]
    assert failure and failure[0].line == 5


def test_oom_sniff_reports_what_the_paste_did() -> None:
    assert sniff(html.escape(_VLLM_KV).encode())[0] == {"html-entities"}
    assert sniff((json.dumps({"error": _VLLM_KV}) + "\n").encode())[0] == {"json-string"}
    kinds, tag = sniff(PERTURBATIONS["tag"](_VLLM_KV).encode())
    assert kinds == {"line-tag"} and tag == b"vllm-server"
    assert sniff(_VLLM_KV.encode()) == (frozenset(), None)


def test_oom_pasted_note_only_when_something_was_undone() -> None:
    assert not any("pasted" in w for w in diagnose(_write(_VLLM_KV)).warnings)
    assert any(
        "read as pasted" in w for w in diagnose(_write(PERTURBATIONS["quote-list"](_VLLM_KV))).warnings
    )


def _write(text: str) -> Path:
    path = Path(_tmpdir()) / f"t{abs(hash(text))}.log"
    path.write_text(text)
    return path
