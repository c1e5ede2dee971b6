"""The fresh held-out start-ups (tests/fixtures/startup_eval/index.yaml) stay fresh and well-formed: at least 20,
each with its source and logged numbers, none from a thread the collected set already uses."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_fresh_set_is_well_formed_and_disjoint() -> None:
    fresh = yaml.safe_load((FIXTURES / "startup_eval" / "index.yaml").read_text())["datapoints"]
    assert len(fresh) >= 20
    ids = [p["id"] for p in fresh]
    assert len(set(ids)) == len(ids)
    for point in fresh:
        assert point["source_url"].startswith("https://github.com/"), point["id"]
        assert point["logged"], point["id"]
        plan = point.get("plan") or {}
        bundled = bool(plan.get("model"))
        assert bundled != ("why" in point), f"{point['id']}: a bundled model to plan or the reason there is none"
        if plan.get("model_dir"):
            assert point.get("plannable") is False, f"{point['id']}: a config-folder point is not plannable alone"
    collected_text = (FIXTURES / "startup_collected" / "index.yaml").read_text()
    url = r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+"
    collected = {u.rstrip("/") for u in re.findall(url, collected_text)}
    urls = {p["source_url"] for p in fresh}
    assert len(urls) == len(fresh)
    # whole URLs, not substrings: club-3090/issues/104 is not club-3090/issues/1047
    assert not [u for u in urls if u.rstrip("/") in collected]


def test_every_point_has_a_split_by_thread_parity() -> None:
    """The 21 first points are held out; points added later take the parity of their thread number (even: held
    out, odd: dev), so nobody chooses which side a log lands on."""
    fresh = yaml.safe_load((FIXTURES / "startup_eval" / "index.yaml").read_text())["datapoints"]
    for point in fresh:
        assert point.get("split") in {"heldout", "dev"}, point["id"]
        if point["id"].startswith("f"):
            assert point["split"] == "heldout", point["id"]
        else:
            number = int(point["source_url"].rstrip("/").rsplit("/", 1)[-1])
            assert point["split"] == ("heldout" if number % 2 == 0 else "dev"), point["id"]


def test_config_folder_points_name_a_folder_and_a_card() -> None:
    """`plan.model_dir` (a checkpoint planned from its config.json under `eval_startup.py --configs DIR`) is a plain
    folder name, never a path or a bundled model, and comes with the card to plan on."""
    fresh = yaml.safe_load((FIXTURES / "startup_eval" / "index.yaml").read_text())["datapoints"]
    with_dir = [p for p in fresh if (p.get("plan") or {}).get("model_dir")]
    assert len(with_dir) >= 11
    for point in with_dir:
        plan = point["plan"]
        folder = plan["model_dir"]
        assert isinstance(folder, str) and folder == folder.strip(), point["id"]
        assert "/" not in folder and not folder.startswith("."), point["id"]
        assert "model" not in plan, point["id"]
        assert plan.get("gpu") or plan.get("gpu_memory") is not None, point["id"]
        if "checkpoint" in plan:
            org, _, name = str(plan["checkpoint"]).partition("/")
            assert org and name and "/" not in name, point["id"]


def _eval_script() -> Any:
    spec = importlib.util.spec_from_file_location("eval_startup", ROOT / "scripts" / "eval_startup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plan_source_prefers_the_registry_then_the_config_folder(tmp_path: Path) -> None:
    """scripts/eval_startup.py plans a bundled model by name, a `model_dir` point from `--configs DIR/<model_dir>`
    when its config.json is there, and otherwise reports the point unplanned with the index's reason."""
    script = _eval_script()
    bundled = {"id": "x1", "plan": {"model": "Qwen/Qwen3-0.6B", "gpu": "h100-sxm"}}
    folder = {"id": "x2", "plan": {"model_dir": "ckpt-a", "gpu": "rtx-3090"}, "plannable": False, "why": "not bundled"}
    assert script.plan_source(bundled, None) == (script.REGISTRY, "Qwen/Qwen3-0.6B")
    assert script.plan_source(folder, None) == (None, "not bundled")
    source, why = script.plan_source(folder, tmp_path)
    assert source is None and why.startswith("not bundled") and "ckpt-a" in why
    (tmp_path / "ckpt-a").mkdir()
    (tmp_path / "ckpt-a" / "config.json").write_text("{}")
    assert script.plan_source(folder, tmp_path) == (script.CONFIG_FOLDER, str(tmp_path / "ckpt-a"))
    assert script.plan_source({"id": "x3", "why": "no model"}, tmp_path) == (None, "no model")


def test_a_checkpoint_named_after_a_bundled_base_is_planned_from_the_derived_base(tmp_path: Path) -> None:
    """A `model_dir` point without its config folder but with a `checkpoint:` the registry's name fall-back derives
    (vramctl/registry/derived.py) is planned from that base; a config folder still wins; a name that does not derive
    stays unplanned with the index's reason."""
    script = _eval_script()
    point = {
        "id": "x4",
        "plan": {"model_dir": "ckpt-b", "checkpoint": "acme/Qwen3-8B-AWQ", "gpu": "l4"},
        "plannable": False,
        "why": "not bundled",
    }
    assert script.plan_source(point, None) == (script.DERIVED, "acme/Qwen3-8B-AWQ")
    (tmp_path / "ckpt-b").mkdir()
    (tmp_path / "ckpt-b" / "config.json").write_text("{}")
    assert script.plan_source(point, tmp_path) == (script.CONFIG_FOLDER, str(tmp_path / "ckpt-b"))
    other = {**point, "plan": {**point["plan"], "checkpoint": "acme/Qwen3-8B-Turbo-AWQ"}}
    assert script.plan_source(other, None) == (None, "not bundled")


def test_without_logs_a_point_is_planned_from_the_index_and_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval_startup.py` without --logs: no read-log part; `vramctl plan` from the index's fields, scored against the
    index's logged numbers (a synthetic dev point and a synthetic held-out one, reported in aggregate only)."""
    script = _eval_script()
    point = {
        "id": "d1",
        "split": "dev",
        "engine": "vllm",
        "version": "0.10.1",
        "tp": 1,
        "max_model_len": 4096,
        "logged": {"available_kv_gib": 60.0, "weights_loading_took": "1.1 GiB"},
        "plan": {"model": "Qwen/Qwen3-0.6B", "gpu": "h100-sxm"},
    }
    res = script.plan_only(point, point["plan"], "Qwen/Qwen3-0.6B")
    assert set(res) >= {"kv_cache", "weights"}
    assert res["kv_cache"][0] == 60.0 and 40 < res["kv_cache"][1] < 80
    assert res["weights"][0] == 1.1 and 1.0 < res["weights"][1] < 1.3
    held = {**point, "id": "h9", "split": "heldout"}
    (tmp_path / "index.yaml").write_text(yaml.safe_dump({"datapoints": [point, held]}))
    assert script.main(["--index", str(tmp_path / "index.yaml"), "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "read-log recovery skipped" in text and "d1: [registry]" in text and "h9" not in text
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["points"]) == {"d1"}
    assert result["splits"]["heldout"]["kv_abs_error_gib"]["n"] == 1


def test_a_stated_entry_point_reaches_the_plan() -> None:
    """A point run through the offline `LLM` class (`entrypoint: llm`, from the thread) is planned with that entry
    point's scheduler defaults (`_set_default_args_v1`, `[0.8.5] vllm/engine/arg_utils.py:1596-1621`): on a card of
    ≥ 70 GiB the LLM class batches 16384 tokens where the server batches 8192, so its activation peak is larger."""
    script = _eval_script()
    point = {"id": "d2", "engine": "vllm", "version": "0.8.2", "max_model_len": 32768, "entrypoint": "llm"}
    assert script.stated_flags(point)[-2:] == ["--entrypoint", "llm"]
    assert "--entrypoint" not in script.stated_flags({**point, "entrypoint": None})
    point["logged"] = {"available_kv_gib": 60.0}
    plan = {"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm"}
    llm = script.plan_only(point, plan, "Qwen/Qwen3-8B")["kv_cache"][1]
    server = script.plan_only({**point, "entrypoint": None}, plan, "Qwen/Qwen3-8B")["kv_cache"][1]
    assert llm < server


def test_plan_only_mode_does_not_plan_a_point_without_a_card(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the log, a point whose `plan:` names no card (`gpu` / `gpu_memory`) is not planned: planning it on
    vramctl's default card (an H100) compared a 47 GiB card's KV pool with an 80 GiB card's (p17: 37.8 GiB planned
    against 14.0 logged). `read-log --compare-plan` takes the card from the log; the index's fields alone cannot."""
    script = _eval_script()
    calls: list[Any] = []
    monkeypatch.setattr(script.subprocess, "run", lambda *a, **k: calls.append(a))
    point = {"id": "x9", "engine": "sglang", "logged": {"k_size_gb": "7.0", "v_size_gb": "7.0"}}
    res = script.plan_only(point, {"model": "Qwen/Qwen3-14B"}, "Qwen/Qwen3-14B")
    assert "error" in res and "card" in res["error"]
    assert "kv_cache" not in res
    assert not calls
