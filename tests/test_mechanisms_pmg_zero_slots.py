"""PMG's zero-slot path (``pmg_release`` with more than ``NAIVE_ZERO_SLOTS`` zero-count slots) has
the same output law as noising every slot one by one (Lebeda–Tětek Alg. 2). The switch is lowered
to 200 slots for the test (400 zero slots per run) so the one-by-one runs stay quick; the path's
law does not depend on where the switch is.

The threshold is set low (T = 2 at ε = 1) so that zero slots are released often enough to compare
the two paths. Every statistic is one number per run (a run's values share η, so values pooled over
runs are not independent): the number of released zero slots, their sum, the largest one, and the
positive slots' values — two-sample Kolmogorov–Smirnov tests; which slots are released — a
chi-square test over 10 bins (conservative: a run's slots are drawn without replacement). Each test
at α = 1e-3 (false-failure rate ≤ 5e-3 for the file), fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privstream.mechanisms import pmg as pmg_module
from privstream.mechanisms.pmg import pmg_release
from privstream.noise.rng import SeededRandomSource
from privstream.sketches import Dummy

ZEROS = 400  # > the zero-slot path's switch, lowered to FAST_FROM for the fast runs (time)
FAST_FROM = 200
SLOTS = (
    [(x, 0) for x in range(ZEROS - 100)] + [(Dummy(i), 0) for i in range(100)] + [(10**6, 5), (10**6 + 1, 9)]
)
RUNS = 1000


def _runs(naive: bool, seed: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[object, int], ...]]:
    monkeypatch.setattr(pmg_module, "NAIVE_ZERO_SLOTS", 10**9 if naive else FAST_FROM)
    rng = SeededRandomSource(seed)
    return [pmg_release(SLOTS, 1.0, 2, rng) for _ in range(RUNS)]


@pytest.fixture(scope="module")
def both(request: pytest.FixtureRequest) -> tuple[list, list]:
    mp = pytest.MonkeyPatch()
    try:
        fast = _runs(False, "pmg-fast", mp)
        naive = _runs(True, "pmg-naive", mp)
    finally:
        mp.undo()
    return fast, naive


def _zero_released(runs: list) -> list[list[tuple[object, int]]]:
    return [[(x, v) for x, v in r if isinstance(x, int) and x < 10**6] for r in runs]


def _per_run(runs: list) -> dict[str, list[float]]:
    zero = _zero_released(runs)
    return {
        "count": [len(r) for r in zero],
        "sum": [sum(v for _, v in r) for r in zero],
        "max": [max((v for _, v in r), default=0) for r in zero],
        "positive": [sum(v for x, v in r if isinstance(x, int) and x >= 10**6) for r in runs],
    }


@pytest.mark.parametrize("statistic", ["count", "sum", "max", "positive"])
def test_same_law_per_run(both: tuple[list, list], statistic: str) -> None:
    fast, naive = (_per_run(r)[statistic] for r in both)
    assert stats.ks_2samp(fast, naive).pvalue > 1e-3
    assert len(set(fast)) > 3  # the statistic varies: the comparison is not vacuous


def test_released_zero_slots_are_uniform_over_the_real_zero_keys(both: tuple[list, list]) -> None:
    """Which zero slots are released: uniform over the slots (dummies are dropped after
    thresholding, so only real keys 0..ZEROS-101 appear), in 10 equal bins."""
    fast, _ = both
    keys = [x for r in _zero_released(fast) for x, _ in r]
    assert all(0 <= x < ZEROS - 100 for x in keys)
    counts = np.bincount(np.array(keys) * 10 // (ZEROS - 100), minlength=10)
    assert stats.chisquare(counts).pvalue > 1e-3
