"""The bundled profiles: an alias index built once per process, each YAML parsed at most once."""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from vramctl.registry._fields import get_str, get_str_list
from vramctl.registry._files import LOADER, profiles_dir, read_yaml
from vramctl.registry.names import normalize


class ProfileCatalog:
    """Profiles of one kind (`models` or `gpus`): `<dir>/<slug>.yaml`, each with `id` and `aliases`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._index: dict[str, Path] | None = None
        self._names: dict[Path, tuple[str, ...]] = {}

    @property
    def directory(self) -> Path:
        return profiles_dir() / self.kind

    def paths(self) -> list[Path]:
        return sorted(self.directory.glob("*.yaml"))

    def document(self, path: Path) -> dict[str, Any]:
        return _read_cached(path)

    def names_of(self, path: Path) -> tuple[str, ...]:
        """Every name a profile answers to: its id, its file stem, its aliases, and each without its `org/`."""
        if path not in self._names:
            doc = _read_head(path)
            where = str(path)
            ident = get_str(doc, "id", where)
            aliases = get_str_list(doc, "aliases", where)
            # An HF id answers without its org too (`Meta-Llama-3.1-8B-Instruct`), as users paste both.
            names = [ident, path.stem, *aliases, *(name.rsplit("/", 1)[-1] for name in (ident, *aliases))]
            self._names[path] = tuple(dict.fromkeys(names))
        return self._names[path]

    def index(self) -> dict[str, Path]:
        if self._index is None:
            index: dict[str, Path] = {}
            for path in self.paths():
                for name in self.names_of(path):
                    index.setdefault(normalize(name), path)
            self._index = index
        return self._index

    def find(self, name: str) -> Path | None:
        """The profile answering to `name` (case-insensitive); a file-stem hit avoids parsing the rest."""
        key = normalize(name)
        if "/" not in key and key not in (".", ".."):
            direct = self.directory / f"{key}.yaml"
            try:
                if direct.is_file():
                    return direct
            except (OSError, ValueError):  # a name too long for a file name, or with a NUL: not a profile
                return None
        return self.index().get(key)

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """The n profiles closest to `name`, each shown by its own best-matching name."""
        key = normalize(name)
        best: list[tuple[float, str]] = []
        for path in self.paths():
            scored = [
                (difflib.SequenceMatcher(None, key, normalize(c)).ratio(), c) for c in self.names_of(path)
            ]
            top = max(scored, key=lambda item: (item[0], -len(item[1])))
            # a profile one of whose names starts with what was typed (`v100` → `v100-16gb`) comes first
            prefix = any(normalize(c).startswith(key + "-") for c in self.names_of(path))
            best.append((top[0] + (1.0 if prefix else 0.0), top[1]))
        best.sort(key=lambda item: -item[0])
        return [candidate for _, candidate in best[:n]]

    def all_names(self) -> list[str]:
        return [name for path in self.paths() for name in self.names_of(path)]


@cache
def _read_cached(path: Path) -> dict[str, Any]:
    return read_yaml(path)


_BODY_KEYS = ("\nsources:", "\nconfig:", "\nextra_params:")
_ID_LINE = re.compile(r"^id: ([A-Za-z0-9][\w./+-]*)[ \t]*$", re.M)
_ALIASES_LINE = re.compile(r"^aliases: \[([^\[\]\n]*)\][ \t]*$", re.M)
_PLAIN_ITEM = re.compile(r"^[\w./+-][\w ./+-]*$")


def _scan_names(text: str) -> dict[str, Any] | None:
    """`id:` and a one-line `aliases: [...]` read without YAML when both are plain; else None (use YAML)."""
    ident = _ID_LINE.search(text)
    aliases = _ALIASES_LINE.search(text)
    if ident is None or aliases is None:
        return None
    items: list[str] = []
    for raw in aliases.group(1).split(","):
        item = raw.strip()
        if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
            item = item[1:-1]
        if not _PLAIN_ITEM.match(item):
            return None
        items.append(item)
    return {"id": ident.group(1), "aliases": items}


def _read_head(path: Path) -> dict[str, Any]:
    """Only the top of a profile (id, aliases): the index needs names, not the config or sources blocks.

    Parsing the head alone makes the alias index ~4x cheaper; a profile whose head does not parse on its
    own (or lacks `id`) falls back to the whole document, so validation errors stay the same.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return _read_cached(path)
    quick = _scan_names(text)
    if quick is not None:
        return quick
    cuts = [i for i in (text.find(key) for key in _BODY_KEYS) if i >= 0]
    head = text[: min(cuts)] if cuts else text
    try:
        data = yaml.load(head, Loader=LOADER)
    except yaml.YAMLError:
        return _read_cached(path)
    if not isinstance(data, dict) or "id" not in data:
        return _read_cached(path)
    return data


MODELS = ProfileCatalog("models")
GPUS = ProfileCatalog("gpus")
