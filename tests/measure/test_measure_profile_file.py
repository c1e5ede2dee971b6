"""The saved profile file: round trip (JSON, YAML), every malformed case is one line + exit 2, other models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from measure_helpers import FAST, TINY_CONFIG, tiny_dense

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.profile_file import (
    SCHEMA,
    build_document,
    check_model,
    dump_document,
    load_profile,
    model_fingerprint,
    save_profile,
)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def saved_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    target = folder / "profile.json"
    assert main(["profile", str(folder), *FAST, "--save", str(target), "--json"]) == 0
    return target


def _doc(saved: Path) -> dict[str, Any]:
    return dict(json.loads(saved.read_text()))


def test_round_trip_json_and_yaml(saved_profile: Path, tmp_path: Path) -> None:
    pf = load_profile(saved_profile)
    assert "tiny-llama" in pf.model_name
    assert pf.device_kind == "cpu"
    assert pf.suggest_input.total_bytes == 2 * 1024**3
    # fp32 cache (the profile runs with --dtype float32), blocks of 64 tokens (vLLM 0.34's default)
    assert pf.suggest_input.bytes_per_block == 4 * 64 * 2 * 64 * 2 * 4
    as_yaml = tmp_path / "p.yml"
    save_profile(_doc(saved_profile), as_yaml)
    again = load_profile(as_yaml)
    assert again.suggest_input == pf.suggest_input
    assert yaml.safe_load(as_yaml.read_text())["schema"] == SCHEMA


def test_build_document_records_model_and_source() -> None:
    spec = tiny_dense()
    doc = build_document({"environment": {"x": 1}}, spec=spec, created_utc="2026-01-01T00:00:00+00:00")
    assert doc["schema"] == SCHEMA
    assert doc["model"] == {"name": spec.name, "source": spec.name, "fingerprint": model_fingerprint(spec)}
    assert doc["environment"] == {"x": 1}


def test_save_rejects_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"\.json, \.yaml or \.yml"):
        dump_document({}, tmp_path / "p.txt")


def _mutations() -> list[tuple[str, Any, str]]:
    def drop(*keys: str) -> Any:
        def f(doc: dict[str, Any]) -> None:
            node = doc
            for k in keys[:-1]:
                node = node[k]
            del node[keys[-1]]

        return f

    def setv(value: Any, *keys: str) -> Any:
        def f(doc: dict[str, Any]) -> None:
            node = doc
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = value

        return f

    return [
        ("schema", setv("other/2", "schema"), "schema 'other/2'"),
        ("no-model", drop("model"), "model.name is missing"),
        ("no-settings", drop("result", "settings"), "result.settings is missing"),
        ("ranks-empty", setv([], "result", "measurements", "ranks"), "non-empty list"),
        ("binding", setv(7, "result", "measurements", "binding_rank"), "binding_rank is 7"),
        ("util", setv(1.7, "result", "settings", "gpu_memory_utilization"), "must be in (0, 1]"),
        ("bpb-str", setv("32KiB", "result", "bytes_per_block"), "integer number of bytes"),
        ("bpb-zero", setv(0, "result", "bytes_per_block"), "at least 1"),
        ("bool-int", setv(True, "result", "block_size"), "integer"),
        ("estimate", setv("yes", "result", "settings", "estimate_cudagraphs"), "true or false"),
        # the settings validate --from-profile re-runs with: type and range, before any device is opened
        ("seqs-str", setv("abc", "result", "settings", "max_num_seqs"), "max_num_seqs must be an integer,"),
        ("seqs-neg", setv(-3, "result", "settings", "max_num_seqs"), "max_num_seqs must be at least 1"),
        ("block-float", setv(16.5, "result", "settings", "block_size"), "block_size must be an integer"),
        (
            "eager-str",
            setv("yes", "result", "settings", "enforce_eager"),
            "enforce_eager must be true or false",
        ),
        ("len-huge", setv(10**30, "result", "settings", "max_model_len"), "far beyond any engine setting"),
        ("sizes", setv("x", "result", "settings", "cudagraph_capture_sizes"), "list of positive integers"),
        (
            "kv-dtype",
            setv(5, "result", "settings", "kv_cache_dtype"),
            "kv_cache_dtype must be a non-empty string",
        ),
        ("mfs", setv(1.5, "result", "settings", "mem_fraction_static"), "must be in (0, 1)"),
        (
            "free>total",
            setv(10**15, "result", "measurements", "ranks", 0, "snapshots", "init", "free_bytes"),
            "exceeds",
        ),
    ]


@pytest.mark.parametrize(("label", "mutate", "needle"), _mutations(), ids=[m[0] for m in _mutations()])
def test_malformed_documents(
    saved_profile: Path, tmp_path: Path, label: str, mutate: Any, needle: str
) -> None:
    doc = _doc(saved_profile)

    # navigate lists too
    def _apply() -> None:
        mutate(doc)

    try:
        _apply()
    except TypeError:
        pytest.fail("bad mutation")
    bad = tmp_path / f"{label}.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(BadInputError) as info:
        load_profile(bad)
    assert needle in str(info.value)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "empty"),
        ("{not json", "not valid JSON"),
        ("a: [1, 2\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("\x00\xff\xfe", "not"),
    ],
)
def test_unreadable_files_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, needle: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content.encode("latin-1"))
    code = main(["suggest", "--from-profile", str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ("deep2.json", '{"a":' * 5_000 + "1" + "}" * 5_000, "JSON nested too deeply"),
        ("deep.yaml", "- " * 3_000 + "1\n", "YAML nested too deeply"),
    ],
)
@pytest.mark.parametrize("command", ["suggest", "validate"])
def test_deeply_nested_profile_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: str, needle: str, command: str
) -> None:
    deep = tmp_path / name
    deep.write_text(content)
    args = [command, "--from-profile", str(deep)] + (["--device", "cpu"] if command == "validate" else [])
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and str(deep) in err
    assert "Traceback" not in err and err.count("\n") == 1
    with pytest.raises(BadInputError, match="nested too deeply"):
        load_profile(deep)


def test_missing_file_and_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["suggest", "--from-profile", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["validate", "--from-profile", str(tmp_path), "--device", "cpu"]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_profile_from_another_model_is_refused(
    capsys: pytest.CaptureFixture[str], saved_profile: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**TINY_CONFIG, "num_hidden_layers": 6}))
    code = main(["validate", str(other), "--from-profile", str(saved_profile), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert "measured for" in err and "num_hidden_layers 4 vs 6" in err
    with pytest.raises(BadInputError, match="not test/tiny-llama"):
        check_model(load_profile(saved_profile), tiny_dense(num_hidden_layers=6))


def test_profile_whose_model_is_gone(
    capsys: pytest.CaptureFixture[str], saved_profile: Path, tmp_path: Path
) -> None:
    doc = _doc(saved_profile)
    doc["model"]["source"] = str(tmp_path / "deleted-model")
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(doc))
    code = main(["validate", "--from-profile", str(moved), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot be loaded here" in err and "pass MODEL" in err


def test_suggest_needs_model_or_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suggest"]) == 2
    assert "--from-profile" in capsys.readouterr().err


def test_profile_json_output_is_named_as_such(
    saved_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vramctl profile … --json > p.json` is the natural mistake: say what the file is and how to save one."""
    stdout_copy = tmp_path / "p.json"
    stdout_copy.write_text(json.dumps(_doc(saved_profile)["result"]))
    assert main(["suggest", "--kv-cache-memory", "--from-profile", str(stdout_copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "this is `vramctl profile --json` output, not a profile file" in err[0]
    assert f"--save {stdout_copy}" in err[0]
