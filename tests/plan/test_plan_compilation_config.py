"""vLLM's `--compilation-config` / `-cc` and `-O` in the flag registry: the capture sizes, `cudagraph_mode` and the
optimization level as a serve command and a check spec write them, and what the mode does to the graph pool
(NONE: none; PIECEWISE: the piecewise pool; `-O0` / `-O1` from 0.12; the key from 0.11; V0 reads neither)."""

from __future__ import annotations

import pytest

from vramctl.core.check.spec import parse_spec
from vramctl.core.engines import flags
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import CUDA_GRAPH
from vramctl.core.plan import plan
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

LLAMA = load_model("llama-3-8b")
H100 = load_gpu("h100-sxm")


def _settings(command: str) -> ServeSettings:
    return parse_serve_command(command).apply(ServeSettings())


@pytest.mark.parametrize(
    ("words", "level", "mode"),
    [
        ("-O3", 3, None),
        ("-O0", 0, None),
        ("-O 1", 1, None),
        ("-O=2", 2, None),
        ("""-O '{"cudagraph_mode": "NONE"}'""", None, "NONE"),  # -O as the compilation config (before 0.12)
        ("""--compilation-config '{"cudagraph_mode": "piecewise", "level": 3}'""", None, "PIECEWISE"),
        ("-cc.cudagraph_mode=FULL_DECODE_ONLY", None, "FULL_DECODE_ONLY"),
        ("--compilation-config.cudagraph_mode FULL", None, "FULL"),
        ("--optimization-level 1", 1, None),
    ],
)
def test_serve_command_spellings(words: str, level: int | None, mode: str | None) -> None:
    s = _settings(f"vllm serve m {words}")
    assert (s.optimization_level, s.cudagraph_mode) == (level, mode)


def test_the_json_sets_sizes_and_mode_and_notes_the_rest() -> None:
    parsed = parse_serve_command(
        """vllm serve m --compilation-config '{"cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4,"""
        """ "cudagraph_mode": "PIECEWISE", "level": 3}'"""
    )
    s = parsed.apply(ServeSettings())
    assert (s.cudagraph_capture_sizes, s.max_cudagraph_capture_size, s.cudagraph_mode) == ((1, 2, 4), 4, "PIECEWISE")
    assert any("ignored --compilation-config level" in n for n in parsed.notes)


def test_a_mode_vllm_does_not_have_is_one_clear_error() -> None:
    with pytest.raises(BadInputError, match="cudagraph_mode is one of NONE, PIECEWISE"):
        parse_serve_command("""vllm serve m -cc '{"cudagraph_mode": "SOMETIMES"}'""")


def test_the_registry_reads_a_mapping_and_a_level() -> None:
    entry = flags.by_name("--compilation-config")
    assert entry.aliases == {"-cc": ("vllm",)}
    cc = entry.parse({"cudagraph-mode": "none", "cudagraph_capture_sizes": "1,2"})
    assert cc.changes() == [("cudagraph_capture_sizes", (1, 2)), ("cudagraph_mode", "NONE")]
    assert entry.parse("3").level == 3 and entry.parse("3").changes() == []


def test_a_check_spec_reads_the_mapping() -> None:
    text = "gpu: h100-sxm\nengine: vllm\nmodel: llama-3-8b\nflags:\n  compilation-config:\n    cudagraph_mode: NONE\n"
    assert parse_spec(text).settings.cudagraph_mode == "NONE"
    command = """gpu: h100-sxm\nengine: vllm\ncommand: vllm serve llama-3-8b -O1\n"""
    assert parse_spec(command).settings.optimization_level == 1


def _graph(version: str, **changes: object) -> tuple[int, int]:
    r = plan(LLAMA, H100, ServeSettings(engine_version=version, **changes))  # type: ignore[arg-type]
    return r.ledger.bytes_of(CUDA_GRAPH), r.kv_cache_bytes


def test_mode_none_and_O0_capture_no_graphs_from_0_12() -> None:
    default = _graph("0.33.0")
    assert default[0] > 0
    for changes in ({"cudagraph_mode": "NONE"}, {"optimization_level": 0}):
        graph, kv = _graph("0.33.0", **changes)
        assert graph == 0 and kv == default[1] + default[0]  # the graph estimate is charged from 0.20: back to KV


def test_piecewise_is_the_piecewise_pool() -> None:
    default = _graph("0.33.0")
    for changes in ({"cudagraph_mode": "PIECEWISE"}, {"optimization_level": 1}):
        graph, kv = _graph("0.33.0", **changes)
        assert graph > default[0] and kv < default[1]
    assert _graph("0.33.0", optimization_level=2) == default == _graph("0.33.0", optimization_level=3)
    r = plan(LLAMA, H100, ServeSettings(cudagraph_mode="PIECEWISE"))
    assert "piecewise" in (r.ledger.get(CUDA_GRAPH).formula)  # type: ignore[union-attr]
    assert r.settings.to_json()["cudagraph_mode"] == "PIECEWISE"
    assert "cudagraph_mode" not in plan(LLAMA, H100, ServeSettings()).settings.to_json()


def test_versions_that_do_not_read_them() -> None:
    # 0.11: -O is the compilation level (no memory term); the cudagraph_mode key is read
    assert _graph("0.11.0", optimization_level=0) == _graph("0.11.0")
    assert _graph("0.11.0", cudagraph_mode="NONE")[0] == 0
    # 0.10: neither; V0 (0.7.3): neither
    for version in ("0.10.1", "0.7.3"):
        assert _graph(version, cudagraph_mode="NONE", optimization_level=0) == _graph(version)


@pytest.mark.parametrize(
    ("args", "graphs"),
    [
        ([], True),
        (["-O0"], False),
        (["-O", "1"], True),
        (["--compilation-config", '{"cudagraph_mode": "NONE"}'], False),
        (["-cc", '{"cudagraph_mode": "PIECEWISE"}'], True),
    ],
)
def test_plan_takes_them_as_options(args: list[str], graphs: bool) -> None:
    """`vramctl plan MODEL -O0` / `--compilation-config '{…}'`: the same reading as in a pasted serve command."""
    import json

    from typer.testing import CliRunner

    from vramctl.cli.main import app

    out = CliRunner().invoke(app, ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--json", *args])
    assert out.exit_code == 0, out.output
    pasted = CliRunner().invoke(
        app, ["plan", "--json", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", *args]
    )
    assert pasted.exit_code == 0, pasted.output
    mine, theirs = json.loads(out.output), json.loads(pasted.output)
    assert ("cuda_graph" in mine["terms"]) is graphs
    assert mine["terms"] == theirs["terms"] and mine["kv_tokens"] == theirs["kv_tokens"]


def test_plan_refuses_a_bad_compilation_config_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from vramctl.cli.main import main
    from vramctl.core.exit_codes import ExitCode

    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "-cc", "{bad"]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a JSON object" in err and "Traceback" not in err
