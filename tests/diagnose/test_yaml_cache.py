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


# --------------------------------------------------------------------------------------------------
# The pickled objects built from a data file (the shipped catalogue)


def _canon(obj: object) -> object:
    """A comparable form of built objects: dataclasses by fields, patterns by text, syntax trees by dump, sets sorted."""
    import ast
    import dataclasses
    import re

    from vramctl.diagnose.catalogue import LazyPattern

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, tuple((f.name, _canon(getattr(obj, f.name))) for f in dataclasses.fields(obj)))
    if isinstance(obj, LazyPattern):
        return ("LazyPattern", obj.pattern)
    if isinstance(obj, re.Pattern):
        return ("re", obj.pattern, obj.flags)
    if isinstance(obj, ast.AST):
        return ("ast", ast.dump(obj))
    if isinstance(obj, dict):
        return ("dict", tuple((_canon(k), _canon(v)) for k, v in obj.items()))
    if isinstance(obj, (set, frozenset)):
        return ("set", tuple(sorted((_canon(v) for v in obj), key=repr)))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_canon(v) for v in obj))
    return obj


def test_shipped_catalogue_from_the_pickle_equals_a_fresh_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vramctl.diagnose import catalogue as catalogue_module
    from vramctl.diagnose.yamlcache import load_built_cached

    monkeypatch.delenv(CACHE_ENV, raising=False)
    copy = tmp_path / CATALOGUE_PATH.name
    copy.write_bytes(CATALOGUE_PATH.read_bytes())
    source = tmp_path / "code.py"
    source.write_text("# stands for the modules that build the objects\n")
    fresh = catalogue_module._load(copy, lazy=True)
    built = load_built_cached(copy, lambda: catalogue_module._load(copy, lazy=True), [source])  # built, written
    assert list((tmp_path / "__pycache__").glob(f"{copy.name}.*.pickle"))
    calls: list[int] = []
    unpickled = load_built_cached(copy, lambda: calls.append(1) or fresh, [source])
    assert not calls  # read from the pickle
    assert unpickled is not built
    assert _canon(unpickled) == _canon(built) == _canon(fresh)
    assert len(unpickled.signatures) > 50


def test_built_cache_is_rebuilt_when_the_data_or_the_code_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vramctl.diagnose.yamlcache import load_built_cached

    monkeypatch.delenv(CACHE_ENV, raising=False)
    data = tmp_path / "data.yaml"
    data.write_text("n: 1\n")
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    builds: list[str] = []

    def build() -> dict[str, object]:
        builds.append(data.read_text())
        return {"built from": data.read_text(), "code": code.read_text()}

    assert load_built_cached(data, build, [code]) == {"built from": "n: 1\n", "code": "x = 1\n"}
    assert load_built_cached(data, build, [code])["built from"] == "n: 1\n"
    assert len(builds) == 1
    code.write_text("x = 22\n")  # the code changed (size and time): built again
    assert load_built_cached(data, build, [code])["code"] == "x = 22\n"
    assert len(builds) == 2
    data.write_text("n: 2\n")  # the data changed: built again, the older pickle removed
    assert load_built_cached(data, build, [code])["built from"] == "n: 2\n"
    assert len(builds) == 3
    assert len(list((tmp_path / "__pycache__").glob("data.yaml.*.pickle"))) == 1
    (pickled,) = (tmp_path / "__pycache__").glob("data.yaml.*.pickle")
    pickled.write_bytes(b"\x00garbage")  # unreadable: built again
    assert load_built_cached(data, build, [code])["built from"] == "n: 2\n"
    assert len(builds) == 4
    data.write_text("n: 3\n")
    assert load_built_cached(data, lambda: (lambda: 1), [code])() == 1  # not picklable: returned, not cached
    assert load_built_cached(data, build, [code])["built from"] == "n: 3\n"
    assert len(builds) == 5
    monkeypatch.setenv(CACHE_ENV, "0")
    assert load_built_cached(data, build, [code])["built from"] == "n: 3\n"
    assert len(builds) == 6
