from __future__ import annotations

import pytest

from vramctl.core.settings import ServeSettings, parse_version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.33.0", (0, 33, 0)),
        ("0.6.6.post1", (0, 6, 6)),
        ("v0.5.18", (0, 5, 18)),
        ("0.11", (0, 11, 0)),
        ("0.9.2.dev0", (0, 9, 2)),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...]) -> None:
    assert parse_version(text)[: len(expected)] == expected


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_version("latest")


def test_settings_are_frozen_and_copyable() -> None:
    settings = ServeSettings(tensor_parallel_size=2, pipeline_parallel_size=2)
    assert settings.world_size == 4
    assert settings.with_changes(max_model_len=8192).max_model_len == 8192
    with pytest.raises(AttributeError):
        settings.max_model_len = 1  # type: ignore[misc]
