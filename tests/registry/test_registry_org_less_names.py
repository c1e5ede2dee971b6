"""An HF id or alias answers without its `org/` part too: users paste `Meta-Llama-3.1-8B-Instruct` as often as
`meta-llama/Meta-Llama-3.1-8B-Instruct` (the old name of Llama-3.1-8B-Instruct, kept as an alias)."""

from __future__ import annotations

import pytest

from vramctl.registry import load_model


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ],
)
def test_org_less_names(name: str, expected: str) -> None:
    assert load_model(name).name == expected
