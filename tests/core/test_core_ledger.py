"""A budget is a ledger whose terms sum to the capacity: asserted at construction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vramctl.core.errors import LedgerError
from vramctl.core.ledger import KV_CACHE, SLACK, WEIGHTS, Ledger, Term, TermSource


def test_ledger_rejects_terms_that_do_not_sum() -> None:
    with pytest.raises(LedgerError, match="sum to 3 bytes, not the capacity 4"):
        Ledger(4, (Term(WEIGHTS, 1, TermSource.GIVEN), Term(KV_CACHE, 2, TermSource.DERIVED)))


def test_ledger_rejects_duplicated_terms() -> None:
    with pytest.raises(LedgerError, match="duplicated"):
        Ledger(2, (Term(WEIGHTS, 1, TermSource.GIVEN), Term(WEIGHTS, 1, TermSource.GIVEN)))


@given(
    st.integers(min_value=0, max_value=2**45), st.lists(st.integers(min_value=0, max_value=2**40), max_size=6)
)
def test_with_residual_always_sums_to_capacity(capacity: int, parts: list[int]) -> None:
    terms = [Term(f"t{i}", b, TermSource.ESTIMATED) for i, b in enumerate(parts)]
    ledger = Ledger.with_residual(capacity, terms)
    assert sum(t.bytes for t in ledger.terms) == capacity
    assert ledger.bytes_of(SLACK) == capacity - sum(parts)
    assert set(ledger.to_json()) == {*(t.name for t in terms), SLACK}


def test_json_shape() -> None:
    ledger = Ledger.with_residual(10, [Term(WEIGHTS, 4, TermSource.GIVEN, "from the log")])
    assert ledger.to_json()[WEIGHTS] == {
        "bytes": 4,
        "source": "given",
        "formula": "from the log",
        "uncertainty_bytes": 0,
        "note": "",
    }
    assert ledger.get("missing") is None
    assert ledger.bytes_of("missing") == 0
