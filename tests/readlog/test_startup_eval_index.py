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
