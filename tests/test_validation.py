"""The one integer check, :func:`privstream.validation.check_int`."""

from __future__ import annotations

import numpy as np
import pytest

from privstream.validation import check_int


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, "1", None, np.int64(1)])
def test_non_ints_raise_type_error_naming_the_parameter(value: object) -> None:
    with pytest.raises(TypeError, match=r"^k: must be an int >= 1, got "):
        check_int("k", value)


def test_numpy_integers_only_where_allowed_and_bools_never() -> None:
    assert check_int("k", np.int64(3), allow_numpy=True) == 3
    assert type(check_int("k", np.uint8(3), allow_numpy=True)) is int
    with pytest.raises(TypeError, match="bool"):
        check_int("k", np.bool_(True), allow_numpy=True)


@pytest.mark.parametrize(
    ("kwargs", "good", "bad", "stated"),
    [
        ({}, [1, 2**70], [0, -1], ">= 1"),
        ({"minimum": 0}, [0], [-1], ">= 0"),
        ({"below": 256}, [1, 255], [0, 256], "in 1..255"),
        ({"minimum": None, "below": 8}, [-(2**70), 7], [8], "< 8"),
    ],
)
def test_range_is_checked_and_stated(kwargs: dict, good: list[int], bad: list[int], stated: str) -> None:
    for value in good:
        assert check_int("n", value, **kwargs) == value
    for value in bad:
        with pytest.raises(ValueError, match=f"^n: must be an int {stated}, got {value}$"):
            check_int("n", value, **kwargs)


def test_open_range_accepts_any_int() -> None:
    assert check_int("epoch", -5, minimum=None) == -5


def test_type_error_is_the_call_sites_exception_range_errors_stay_value_errors() -> None:
    with pytest.raises(ValueError, match="^port: must be an int in 1..65535, got str$") as info:
        check_int("port", "9092", below=65536, type_error=ValueError)
    assert not isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="got 0"):
        check_int("port", 0, below=65536, type_error=ValueError)
