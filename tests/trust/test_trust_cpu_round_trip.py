"""Issue 12, item 5: the cpu round trip with default flags — profile, suggest, validate --from-profile — on a
host whose memory other processes share. The host is made small (1 GiB available of 4 GiB) so the test
allocates little; everything else is the real measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from vramctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "profiles" / "measured" / "tiny-llama")
GiB = 1 << 30


@pytest.fixture
def small_shared_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from vramctl.measure import device

    monkeypatch.setattr(device, "host_memory", lambda: (1 * GiB, 4 * GiB))


def test_profile_suggest_validate_with_default_flags(
    small_shared_host: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "p.json"
    assert (
        main(["profile", TINY, "--device", "cpu", "--dtype", "float32", "--save", str(saved), "--json"]) == 0
    )
    profile = json.loads(capsys.readouterr().out)
    assert profile["verdict"] == "fits"
    assert profile["capacity_bytes"] == int(0.9 * GiB)  # one rule: 90 % of what the host has available
    assert any("the host is shared" in note for note in profile["notes"])

    assert main(["suggest", "--from-profile", str(saved), "--json"]) == 0
    suggestion = json.loads(capsys.readouterr().out)
    kv = suggestion["fit_requested"]["kv_cache_memory_bytes"]
    assert 0 < kv < 0.9 * GiB

    # no --device, no --device-memory: the profile's cpu device at the profile's size
    code = main(["validate", "--from-profile", str(saved), "--json"])
    outcome = json.loads(capsys.readouterr().out)
    assert code == 0, outcome
    assert outcome["passed"] is True
    assert outcome["device"]["kind"] == "cpu"
    assert outcome["total_bytes"] == profile["capacity_bytes"]
    assert outcome["kv_cache_memory_bytes"] == kv


def test_validate_from_profile_device_flags_still_override(
    small_shared_host: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "p.json"
    main(["profile", TINY, "--device", "cpu", "--dtype", "float32", "--save", str(saved), "--json"])
    capsys.readouterr()
    code = main(["validate", "--from-profile", str(saved), "--device-memory", "200MiB", "--json"])
    err = capsys.readouterr().err
    # the pool sized for the 0.9 GiB device does not fit a 200 MiB one: the out-of-memory exit, with the numbers
    assert code == 5, err
    assert "bytes free on the device" in err and "of 0.20 GiB" in err
