"""Budgets, DPSW Eq. (1) / Thm 3.2 conversions and composition."""

from __future__ import annotations

import math

import pytest

from privstream.accounting import (
    Budget,
    ZCDPBudget,
    compose_parallel,
    compose_sequential,
    dp_to_zcdp,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)


@pytest.mark.parametrize(("eps", "rho"), [(1.0, 1.0132e-2), (0.1, 1.032e-4), (2.0, 3.973e-2)])
def test_eq1_reference_values(eps: float, rho: float) -> None:
    """DPSW-Sketch §6 setting: n = 1e7, δ = n^-1.5 = 10^-10.5."""
    assert dp_to_zcdp(eps, 10**-10.5).rho == pytest.approx(rho, rel=1e-3)


@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-12])
def test_eq1_inverts_thm_3_2(eps: float, delta: float) -> None:
    rho = dp_to_zcdp(eps, delta).rho
    assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) == pytest.approx(eps, rel=1e-12)
    assert zcdp_to_dp(rho, delta).epsilon == pytest.approx(eps, rel=1e-12)
    # Eq. (1) as printed in DPSW agrees with the cancellation-free form used in the code
    big_l = math.log(1 / delta)
    printed = eps + 2 * big_l - 2 * math.sqrt(eps * big_l + big_l**2)
    assert rho == pytest.approx(printed, rel=1e-6, abs=1e-15)


def test_eq1_monotone_in_epsilon() -> None:
    rhos = [dp_to_zcdp(e, 1e-6).rho for e in (0.1, 0.2, 0.5, 1.0, 2.0, 4.0)]
    assert rhos == sorted(rhos) and len(set(rhos)) == len(rhos)


def test_pure_dp_to_zcdp() -> None:
    assert pure_dp_to_zcdp(0.5) == ZCDPBudget(0.125)


def test_composition() -> None:
    seq = compose_sequential([Budget(0.1, 1e-7)] * 10)
    assert seq.epsilon == pytest.approx(1.0) and seq.delta == pytest.approx(1e-6)
    assert compose_parallel([Budget(0.3, 1e-7), Budget(0.5, 1e-9)]) == Budget(0.5, 1e-7)
    assert compose_sequential([ZCDPBudget(0.1), ZCDPBudget(0.2)]).rho == pytest.approx(0.3)
    with pytest.raises(TypeError, match="convert"):
        compose_sequential([Budget(1.0), ZCDPBudget(0.1)])
    with pytest.raises(ValueError, match="empty"):
        compose_parallel([])


def test_exact_composition_has_no_drift() -> None:
    # 0.1 ten times in floats is 0.9999999999999999; the exact decimals 1/10 are summed instead
    assert sum([0.1] * 10) != 1.0
    assert compose_sequential([Budget(0.1)] * 10).epsilon == 1.0


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: Budget(-1.0), "epsilon"),
        (lambda: Budget(1.0, 1.0), "delta"),
        (lambda: Budget(float("inf")), "epsilon"),
        (lambda: ZCDPBudget(-0.1), "rho"),
        (lambda: zcdp_to_dp(0.1, 0.0), "delta"),
        (lambda: dp_to_zcdp(1.0, 2.0), "delta"),
    ],
)
def test_bad_budgets_name_the_parameter(call, name: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=name):
        call()


def test_budget_type_errors() -> None:
    with pytest.raises(TypeError, match="epsilon"):
        Budget("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="epsilon"):
        Budget(True)  # type: ignore[arg-type]


def test_a_budget_reads_as_epsilon_and_delta() -> None:
    """How logs show it (e.g. the ledger's start-up line), not the dataclass repr."""
    assert str(Budget(1.0, 1e-6)) == "(ε=1, δ=1e-06)" and str(Budget(0.0, 0.0)) == "(ε=0, δ=0)"
