"""`vramctl diff` and `check --against-version`: the upgrade gate, through the CLI like a user, and its
invariants over every pair of vLLM versions vramctl knows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.cli.diff import parse_side, run_diff
from vramctl.cli.main import main
from vramctl.core.errors import BadInputError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "deploy-llama3-8b-h100.yaml"
VERSIONS = ("0.6.0", "0.6.6", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.0", "0.19.0", "0.20.0", "0.26.0", "0.28.0", "0.33.0")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_upgrade_0_11_to_0_33_names_every_moved_term_and_its_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "diff", "--from", "0.11", "--to", "0.33", "--json", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"
    )
    assert code == 0
    d = json.loads(out)
    assert d["kind"] == "versions"
    assert (d["before"]["engine_version"], d["after"]["engine_version"]) == ("0.11", "0.33")
    moved = {t["name"]: t for t in d["terms"] if t["delta_bytes"]}
    assert {"cuda_graph", "kv_cache", "slack", "non_torch"} <= set(moved)
    assert all(t["rules"] for t in moved.values())
    rules = {r["key"]: r for r in d["rules"]}
    assert rules["default-utilization"]["before"] == "0.90" and rules["default-utilization"]["after"] == "0.92"
    assert rules["graph-estimate"]["after"] == "yes"
    assert all(r["citation"] for r in d["rules"])
    # Both ledgers sum to the same card: the deltas cancel, and the KV change is the KV term's delta.
    assert sum(t["delta_bytes"] for t in d["terms"]) == 0
    assert d["kv_change_bytes"] == moved["kv_cache"]["delta_bytes"] == d["after"]["kv_cache_bytes"] - d["before"]["kv_cache_bytes"]


def test_panel_prints_the_verdicts_first_and_the_rules(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one side per line (piped output is 80 columns by default)
    code, out, _ = run(capsys, "diff", "llama-3.1-8b", "--from", "0.11.0", "--to", "0.33.0")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("vramctl diff (versions)")
    assert lines[1].strip().startswith("0.11.0: vLLM 0.11.0 starts")
    assert lines[2].strip().startswith("0.33.0: vLLM 0.33.0 starts")
    assert "default-utilization: default --gpu-memory-utilization: 0.90 → 0.92" in out
    assert "vllm/config/cache.py" in out


def test_explicit_utilisation_hides_the_default_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "diff", "llama-3.1-8b", "--gpu-memory-utilization", "0.9", "--from", "0.11.0", "--to", "0.33.0", "--json"
    )
    assert code == 0
    assert "default-utilization" not in {r["key"] for r in json.loads(out)["rules"]}


def test_vllm_against_sglang_explains_the_gap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "diff", "qwen3-8b", "--gpu", "l40s", "--from", "vllm", "--to", "sglang", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["kind"] == "engines"
    assert (d["before"]["engine"], d["after"]["engine"]) == ("vllm", "sglang")
    assert d["gap"] and d["rules"] == []


def test_two_flag_sets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "diff", "llama-3-8b", "--to-flags", "--kv-cache-dtype fp8", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["kind"] == "flags"
    assert d["after"]["kv_tokens"] > 1.9 * d["before"]["kv_tokens"]
    assert {s["name"] for s in d["settings"]} == {"kv_cache_dtype"}


def test_a_side_that_does_not_start_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "diff", "llama-3-8b", "--gpu", "l4", "--to-flags", "--gpu-memory-utilization 0.3", "--json"
    )
    assert code == 1
    d = json.loads(out)
    assert d["stops_starting"] is True and d["after"]["verdict"] != "fits"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["diff", "llama-3-8b"], "nothing to compare"),
        (["diff", "llama-3-8b", "--from", "banana"], "--from 'banana'"),
        (["diff", "llama-3-8b", "--to", "tgi@1.0"], "--to 'tgi@1.0'"),
        (["diff", "llama-3-8b", "--to", "1.x.y"], "--to '1.x.y': not a version"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and not out


def test_parse_side() -> None:
    assert parse_side("0.11", "--from") == (None, "0.11")
    assert parse_side("sglang", "--from") == ("sglang", None)
    assert parse_side("vllm@0.11.0", "--from") == ("vllm", "0.11.0")
    with pytest.raises(BadInputError):
        parse_side("", "--from")


def test_check_against_version_passes_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(EXAMPLE), "--against-version", "0.11.0", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["passed"] is True and d["upgrade"]["passed"] is True
    assert d["upgrade"]["diff"]["after"]["engine_version"] == "0.11.0"


def test_check_against_version_fails_on_kv_loss(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nmodel: llama-3-8b\ngpu: h100-sxm\nengine: vllm\nengine_version: 0.11.0\n")
    code, out, _ = run(capsys, "check", str(spec), "--against-version", "0.33.0", "--max-kv-loss", "0%")
    # 0.33 charges the graph pool to the budget: the KV cache shrinks a little, more than 0 %.
    code_json, out_json, _ = run(capsys, "check", str(spec), "--against-version", "0.33.0", "--max-kv-loss", "0", "--json")
    d = json.loads(out_json)
    loss = d["upgrade"]["kv_loss_fraction"]
    if loss > 0:
        assert code == code_json == 1 and "upgrade gate: FAIL" in out and d["passed"] is False
    else:
        assert code == code_json == 0
    code, _, _ = run(capsys, "check", str(spec), "--against-version", "0.33.0", "--max-kv-loss", "100%")
    assert code == 0


def test_check_against_version_bad_share(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", str(EXAMPLE), "--against-version", "0.33.0", "--max-kv-loss", "150%")
    assert code == 2 and "--max-kv-loss" in err


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(VERSIONS),
    st.sampled_from(VERSIONS),
    st.sampled_from([("llama-3-8b", "h100-sxm"), ("qwen3-8b", "a100-80gb"), ("qwen3-8b", "l4"), ("deepseek-v2-lite-chat", "h100-sxm")]),
)
def test_every_moved_term_has_a_rule(a: str, b: str, deployment: tuple[str, str]) -> None:
    """Between two versions with the same flags, every term that moved is explained by a versioned rule, and a
    rule is listed only when its value differs."""
    model, gpu = deployment
    d = run_diff([model], {"gpu": gpu}, from_side=a, to_side=b, from_flags=None, to_flags=None)
    assert sum(t.delta_bytes for t in d.terms) == 0
    for t in d.moved_terms:
        assert t.rules, (a, b, t.name)
    for r in d.rules:
        assert r.before != r.after
    if a == b:
        assert not d.moved_terms and not d.rules


def test_sglang_post_capture_rule_only_when_post_capture_sizing_is_on(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diff", "--from", "sglang@0.5.9", "--to", "sglang@0.5.23", "--json"]
    assert main([*args, "qwen3-8b"]) == 0
    assert "post-capture-floor" not in {r["key"] for r in json.loads(capsys.readouterr().out)["rules"]}
    assert main([*args, "--", "env", "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1", "python", "-m", "sglang.launch_server",
                 "--model-path", "Qwen/Qwen3-8B"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "post-capture-floor" in {r["key"] for r in d["rules"]}
