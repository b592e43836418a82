"""The universe's total order, item normalisation and the Build guarantees table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privstream.sketches import Build, Dummy, item_order_key, normalize_item, sorted_items


def test_total_order_ints_then_strs_then_dummies() -> None:
    keys = [Dummy(1), "b", 10, "", -3, Dummy(0), "a", 2**63 - 1, "\U0001f600", "Z"]
    assert sorted_items(keys) == [-3, 10, 2**63 - 1, "", "Z", "a", "b", "\U0001f600", Dummy(0), Dummy(1)]
    assert item_order_key(np.int32(4)) == item_order_key(4)


@settings(max_examples=200, deadline=None)
@given(
    a=st.one_of(st.integers(-100, 100), st.text(max_size=3)),
    b=st.one_of(st.integers(-100, 100), st.text(max_size=3)),
)
def test_order_is_total_and_consistent_with_equality(a, b) -> None:
    ka, kb = item_order_key(a), item_order_key(b)
    assert (ka == kb) == (a == b)
    assert (ka < kb) or (kb < ka) or (a == b)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(np.int64(3), 3), (np.uint8(7), 7), (np.str_("x"), "x"), (5, 5), ("é", "é")],
)
def test_normalize_item(value, expected) -> None:
    out = normalize_item(value)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    ("value", "error"),
    [(True, TypeError), (np.bool_(False), TypeError), (1.0, TypeError), (None, TypeError), (b"a", TypeError),
     (Dummy(0), TypeError), (2**63, ValueError), (-(2**63) - 1, ValueError)],
)  # fmt: skip
def test_normalize_item_rejects(value, error) -> None:
    with pytest.raises(error, match="item") as info:
        normalize_item(value)
    if isinstance(value, int):  # an item is data: its value is never echoed in the message
        assert str(value) not in str(info.value)


def test_dummy_is_not_an_int() -> None:
    assert Dummy(0) != 0 and hash(Dummy(0)) == hash(Dummy(0)) and repr(Dummy(2)) == "Dummy(2)"


def test_build_guarantees_table() -> None:
    for build in Build:
        g = build.guarantees
        assert g.one_signed and g.per_counter_change == 1
        assert Build.from_code(build.code) is build
        assert g.neighbour_relation and g.privacy_unit and g.reference
    assert [b for b in Build if b.guarantees.alg1_slots] == [Build.ALG1_SEQUENTIAL]
    sequential = {Build.ALG1_SEQUENTIAL, Build.STANDARD_SEQUENTIAL}
    assert {b for b in Build if b.guarantees.sequential_mg} == sequential
    assert not Build.MERGED.guarantees.sensitivity_reduction
    assert "user" in Build.PAMG.guarantees.privacy_unit and "event" == Build.MERGED.guarantees.privacy_unit
    with pytest.raises(ValueError):
        Build.from_code(0)
