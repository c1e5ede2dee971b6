"""The marshal cache of the shipped YAML files gives exactly what PyYAML gives, and never a stale answer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from vramctl.diagnose.catalogue import CATALOGUE_PATH
from vramctl.diagnose.inventory import INVENTORY_PATH
from vramctl.diagnose.yamlcache import CACHE_ENV, load_yaml_cached


def _plain(path: Path) -> object:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.mark.parametrize("shipped", [CATALOGUE_PATH, INVENTORY_PATH], ids=lambda p: p.name)
def test_cached_shipped_file_equals_yaml(shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    copy = tmp_path / shipped.name
    copy.write_bytes(shipped.read_bytes())
    first = load_yaml_cached(copy)  # parsed, cache written
    caches = list((tmp_path / "__pycache__").glob(f"{shipped.name}.*.marshal"))
    assert len(caches) == 1
    second = load_yaml_cached(copy)  # read from the cache
    assert first == second == _plain(shipped)


def test_changed_file_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    path = tmp_path / "data.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert load_yaml_cached(path) == {"a": 1, "b": ["x", "y"]}
    path.write_text("a: 2\n")
    assert load_yaml_cached(path) == {"a": 2}
    assert len(list((tmp_path / "__pycache__").glob("data.yaml.*.marshal"))) == 1  # the older one removed


def test_broken_cache_and_read_only_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    path = tmp_path / "data.yaml"
    path.write_text("when: 2024-01-01\nn: 3\n")  # a date: marshal cannot hold it, so nothing is cached
    assert load_yaml_cached(path)["n"] == 3
    assert not list((tmp_path / "__pycache__").glob("*.marshal"))
    path.write_text("n: 4\n")
    load_yaml_cached(path)
    (cache,) = (tmp_path / "__pycache__").glob("data.yaml.*.marshal")
    cache.write_bytes(b"\x00garbage")
    assert load_yaml_cached(path) == {"n": 4}
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "d.yaml").write_text("k: v\n")
    os.chmod(ro, 0o555)
    try:
        assert load_yaml_cached(ro / "d.yaml") == {"k": "v"}
    finally:
        os.chmod(ro, 0o755)


def test_cache_off_by_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "0")
    path = tmp_path / "data.yaml"
    path.write_text("a: 1\n")
    assert load_yaml_cached(path) == {"a": 1}
    assert not (tmp_path / "__pycache__").exists()
