"""The units module: the one place sizes are parsed and formatted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.core.units import (
    GB,
    GiB,
    KiB,
    MiB,
    cdiv,
    format_bytes,
    format_count,
    format_gib,
    parse_bytes,
    parse_number,
    vllm_format_gib,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("79.18GiB", round(79.18 * GiB)),
        ("54.4 GiB", round(54.4 * GiB)),
        ("80GB", 80 * GB),
        ("512MiB", 512 * MiB),
        ("512 mib", 512 * MiB),
        ("1,024", 1024),
        ("1_000", 1000),
        ("1e9", 10**9),
        ("8G", 8 * GiB),  # vLLM: upper-case letter = binary
        ("8g", 8 * GB),  # lower-case letter = decimal
        ("4K", 4 * KiB),
        ("0", 0),
        ("58411555225", 58411555225),
        ("1.5 TB", 1_500_000_000_000),
    ],
)
def test_parse_bytes_accepts_the_spellings_users_paste(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_parse_bytes_default_unit_applies_to_bare_numbers() -> None:
    assert parse_bytes("2", default_unit="GiB") == 2 * GiB
    assert parse_bytes(2.5, default_unit="GiB") == round(2.5 * GiB)
    assert parse_bytes("2MiB", default_unit="GiB") == 2 * MiB


@pytest.mark.parametrize("text", ["", "abc", "-1GiB", "12 parsecs", "1,00", "nan", "inf GiB", "GiB", "1e400"])
def test_parse_bytes_rejects_garbage_with_the_field_named(text: str) -> None:
    with pytest.raises(BadInputError, match="--gpu-memory"):
        parse_bytes(text, what="--gpu-memory")


def test_parse_bytes_rejects_bool_and_absurd() -> None:
    with pytest.raises(BadInputError):
        parse_bytes(True)
    with pytest.raises(BadInputError, match="absurdly large"):
        parse_bytes("1e30 TiB")


@given(st.integers(min_value=0, max_value=2**50))
def test_parse_bytes_round_trips_integers(value: int) -> None:
    assert parse_bytes(str(value)) == value
    assert parse_bytes(f"{value:,}") == value


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from(["KiB", "MiB", "GiB", "KB", "MB", "GB"]))
def test_parse_bytes_scales_by_unit(value: int, unit: str) -> None:
    scale = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "KB": 1000, "MB": 10**6, "GB": GB}[unit]
    assert parse_bytes(f"{value}{unit}") == value * scale
    assert parse_bytes(f"{value} {unit.lower()}") == value * scale


@given(st.floats(min_value=0, max_value=4096, allow_nan=False), st.sampled_from(["12.5", "12.50"]))
def test_trailing_zero_does_not_change_value(_: float, text: str) -> None:
    assert parse_bytes(text + "GiB") == round(12.5 * GiB)


def test_parse_number() -> None:
    assert parse_number("205,728") == 205728
    assert parse_number("0.92") == 0.92
    with pytest.raises(BadInputError, match="max-model-len"):
        parse_number("12a", what="max-model-len")


def test_formatting() -> None:
    assert format_gib(16_060_522_496) == "14.96 GiB"
    assert vllm_format_gib(round(12.5 * GiB)) == "12.5"
    assert vllm_format_gib(0) == "0.0"
    assert format_bytes(812 * MiB) == "812.00 MiB"
    assert format_bytes(-2 * GiB) == "-2.00 GiB"
    assert format_bytes(5) == "5 B"
    assert format_bytes(80 * GB, decimal=True) == "80.00 GB"
    assert format_count(445632) == "445,632"


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=1, max_value=10**6))
def test_cdiv_is_ceiling_division(a: int, b: int) -> None:
    assert cdiv(a, b) * b >= a
    assert (cdiv(a, b) - 1) * b < a or a == 0
