"""Serve-command spellings vLLM's own parser accepts (FlexibleArgumentParser, v0.32.0), found by the engine tier
(tests/engine, check 2) where vramctl read them differently: underscores in flag names, `--config` YAML files,
the capture sizes inside `--compilation-config` / `-cc.…`, and `nargs="+"` capture sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.core.errors import BadInputError
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings


def _settings(command: str) -> ServeSettings:
    return parse_serve_command(command).apply(ServeSettings())


def test_underscored_flags_are_read_as_vllm_reads_them() -> None:
    s = _settings("vllm serve m --max_model_len 4096 --gpu_memory_utilization=0.8 --max_num_seqs 7")
    assert (s.max_model_len, s.gpu_memory_utilization, s.max_num_seqs) == (4096, 0.8, 7)


def test_capture_sizes_take_every_number_after_the_flag() -> None:
    s = _settings("vllm serve m --cudagraph-capture-sizes 1 2 4 8 16 --enforce-eager")
    assert s.cudagraph_capture_sizes == (1, 2, 4, 8, 16)
    assert s.enforce_eager is True


@pytest.mark.parametrize(
    ("flags", "sizes", "largest"),
    [
        ("""--compilation-config '{"cudagraph_capture_sizes": [1, 2, 4], "mode": 3}'""", (1, 2, 4), None),
        ("-cc.cudagraph_capture_sizes+=1,2,4,8", (1, 2, 4, 8), None),
        ("-cc.max_cudagraph_capture_size=128", None, 128),
        ("--compilation-config.max_cudagraph_capture_size 64", None, 64),
    ],
)
def test_the_capture_sizes_inside_the_compilation_config(
    flags: str, sizes: tuple[int, ...] | None, largest: int | None
) -> None:
    s = _settings(f"vllm serve m {flags}")
    assert s.cudagraph_capture_sizes == sizes
    assert s.max_cudagraph_capture_size == largest


def test_a_compilation_config_that_is_not_json_is_one_clear_error() -> None:
    with pytest.raises(BadInputError, match="not a JSON object"):
        parse_serve_command("vllm serve m --compilation-config '{mode: 3'")


def test_a_config_file_is_read_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        "model: other/model\nmax-model-len: 16384\ngpu_memory_utilization: 0.88\nenable-lora: true\n"
        "enforce-eager: false\ncompilation-config:\n  cudagraph_capture_sizes: [1, 2]\n"
    )
    parsed = parse_serve_command(f"vllm serve org/model --config {config} --max-model-len 4096")
    s = parsed.apply(ServeSettings())
    assert parsed.model == "org/model"  # the positional model wins over the file's
    assert s.max_model_len == 4096  # the command line wins over the file
    assert s.gpu_memory_utilization == 0.88
    assert s.enable_lora is True
    assert s.cudagraph_capture_sizes == (1, 2)
    assert any("read --config" in note for note in parsed.notes)


def test_a_config_file_can_name_the_model(tmp_path: Path) -> None:
    config = tmp_path / "serve.yml"
    config.write_text("model: org/model\nkv-cache-dtype: fp8\n")
    parsed = parse_serve_command(f"vllm serve --config={config}")
    assert parsed.model == "org/model"
    assert parsed.apply(ServeSettings()).kv_cache_dtype == "fp8"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("serve.json", "{}", "only a .yaml / .yml"),
        ("serve.yaml", "- a\n- b\n", "expected a mapping"),
        ("serve.yaml", "a: [1\n", "not valid YAML"),
    ],
)
def test_a_bad_config_file_is_one_clear_error(tmp_path: Path, name: str, text: str, message: str) -> None:
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(BadInputError, match=message):
        parse_serve_command(f"vllm serve m --config {config}")


def test_a_missing_config_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read it"):
        parse_serve_command(f"vllm serve m --config {tmp_path / 'absent.yaml'}")
