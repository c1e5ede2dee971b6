"""The fresh held-out start-ups (tests/fixtures/startup_eval/index.yaml) stay fresh and well-formed: at least 20,
each with its source and logged numbers, none from a thread the collected set already uses."""

from __future__ import annotations

from pathlib import Path

import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_fresh_set_is_well_formed_and_disjoint() -> None:
    fresh = yaml.safe_load((FIXTURES / "startup_eval" / "index.yaml").read_text())["datapoints"]
    assert len(fresh) >= 20
    ids = [p["id"] for p in fresh]
    assert len(set(ids)) == len(ids)
    for point in fresh:
        assert point["source_url"].startswith("https://github.com/"), point["id"]
        assert point["logged"], point["id"]
        assert ("plan" in point) != ("why" in point), f"{point['id']}: a plan mapping or the reason there is none"
    collected = (FIXTURES / "startup_collected" / "index.yaml").read_text()
    urls = {p["source_url"] for p in fresh}
    assert len(urls) == len(fresh)
    assert not [u for u in urls if u in collected]
