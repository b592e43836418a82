"""``exact_threshold``: discrete Laplace(1/ε) on every stored exact count, released if >= T.

* T is the smallest integer >= 2 with Pr[Z >= T − 1] <= δ (Z discrete Laplace with scale 1/ε),
  checked against ``discrete_laplace_tail`` over a grid of ε and δ, and is what releases report;
* the noise bound b is the smallest with d·Pr[|Z| > b] <= β: per item (d = 1) without a domain, all
  d items at once with a declared domain (whose outside keys are dropped);
* Monte Carlo coverage of the stated interval [f − (T − 1 + b), f + b].

Monte Carlo tests use fixed seeds and allow at most the 1 − 1e-3 quantile of Binomial(R, β)
violations: a bound that holds with probability exactly 1 − β fails with probability <= 1e-3.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from privstream.accounting import Budget
from privstream.mechanisms import MechanismNotApplicable, get, release
from privstream.mechanisms.exact_threshold import exact_threshold
from privstream.noise import SeededRandomSource
from privstream.noise.distributions import discrete_laplace_abs_tail, discrete_laplace_tail
from privstream.sketches import ExactHistogram

EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0)
DELTAS = (0.3, 0.1, 1e-2, 1e-4, 1e-6, 1e-9, 1e-12)


def histogram(items: list[object]) -> ExactHistogram:
    h = ExactHistogram()
    h.update_batch(items)
    return h


def zipf_items(seed: int, n: int = 3000, universe: int = 60) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).zipf(1.3, n) % universe]


@pytest.mark.parametrize(("eps", "delta"), list(itertools.product(EPSILONS, DELTAS)))
def test_threshold_is_the_smallest_with_tail_at_most_delta(eps: float, delta: float) -> None:
    """Pr[Z >= T−1] <= δ < Pr[Z >= T−2] (or T = 2, the smallest allowed: a count-1 key needs noise
    >= 1 to be released), and the release reports exactly this T and scale 1/ε."""
    t = exact_threshold(eps, delta)
    scale = 1.0 / eps
    assert t >= 2 and discrete_laplace_tail(t - 1, scale) <= delta
    assert t == 2 or discrete_laplace_tail(t - 2, scale) > delta
    out = release(
        histogram([1, 1, 2]), Budget(eps, delta), mechanism="exact_threshold", rng=SeededRandomSource(1)
    )
    assert dict(out.parameters) == {"threshold": t, "scale": "1/eps"}
    assert out.error_bound.below == out.error_bound.above + t - 1


def test_threshold_grows_like_log_one_over_delta_over_epsilon() -> None:
    for eps in EPSILONS:
        ts = [exact_threshold(eps, d) for d in DELTAS]
        assert ts == sorted(ts)  # smaller δ: a higher threshold
        assert exact_threshold(eps, 1e-12) <= 2 + np.log(1 / 1e-12) / eps  # ~ ln(1/δ)/ε (Lebeda-Tetek §1)
    for delta in DELTAS:
        ts = [exact_threshold(e, delta) for e in EPSILONS]
        assert ts == sorted(ts, reverse=True)
    with pytest.raises(ValueError):
        exact_threshold(0.0, 1e-6)
    with pytest.raises(ValueError):
        exact_threshold(1.0, 0.0)


@pytest.mark.parametrize("beta", [0.2, 0.05, 1e-3])
@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_noise_bound_is_per_item_without_a_domain_and_simultaneous_with_one(eps: float, beta: float) -> None:
    """b is the smallest integer with d·Pr[|Z| > b] <= β: d = 1 (each item separately, stated so)
    without a domain, d = the domain's size with one; b grows with d."""
    sketch = histogram(zipf_items(1, 500))
    budget = Budget(eps, 1e-6)
    previous = -1
    for d in (None, 1, 10, 1000, 10**6):
        domain = None if d is None else range(d)
        bound = release(sketch, budget, mechanism="exact_threshold", domain=domain, beta=beta).error_bound
        count = 1 if d is None else d
        b = int(bound.above)
        tail = lambda m: discrete_laplace_abs_tail(m, 1.0 / eps)  # noqa: E731  Pr[|Z| >= m]
        assert count * tail(b + 1) <= beta and (b == 0 or count * tail(b) > beta), (d, b)
        assert bound.beta == beta and bound.systematic == 0.0 and bound.sketch_term.startswith("0")
        if d is None:
            assert "each item separately" in bound.derivation
        else:
            assert f"all {d} items of the declared domain at once" in bound.derivation
        assert b >= previous
        previous = b
    assert previous > release(sketch, budget, mechanism="exact_threshold", beta=beta).error_bound.above


def test_keys_outside_the_declared_domain_are_dropped() -> None:
    sketch = histogram([x for x in range(100) for _ in range(200)] + ["a"] * 300 + ["b"] * 300)
    budget = Budget(1.0, 1e-6)
    rng = SeededRandomSource(3)
    out = release(sketch, budget, mechanism="exact_threshold", domain=range(20, 50), rng=rng)
    assert [x for x, _ in out.items] == list(range(20, 50))  # all heavy, all in the domain, in order
    named = release(sketch, budget, mechanism="exact_threshold", domain=["b", 7, "zzz"], rng=rng)
    assert [x for x, _ in named.items] == [7, "b"]  # the universe's order; "zzz" has no count
    everything = release(sketch, budget, mechanism="exact_threshold", rng=rng)
    assert len(everything.items) == 102


def test_refusals() -> None:
    sketch = histogram([1, 2, 3])
    with pytest.raises(MechanismNotApplicable, match="delta > 0"):
        release(sketch, Budget(1.0, 0.0), mechanism="exact_threshold")
    with pytest.raises(MechanismNotApplicable, match="no mechanism applies"):
        release(sketch, Budget(1.0, 0.0), domain=range(5))  # no pure mechanism for exact counts
    mech = get("exact_threshold")
    assert not mech.needs_domain and mech.needs_delta and not mech.privacy.pure


# ---------------------------------------------------------------------------------- coverage


def _outside(truth: Counter, got: dict, below: float, above: float, keys) -> list:  # noqa: ANN001
    return [x for x in keys if not truth.get(x, 0) - below <= got.get(x, 0) <= truth.get(x, 0) + above]


def test_coverage_with_a_domain_is_simultaneous() -> None:
    """With a declared domain of d = 60 items, every item's value lies in [f − below, f + above] at
    once (unreleased items: 0) in >= 1 − β of the runs."""
    items = zipf_items(4)
    truth, sketch = Counter(items), histogram(items)
    domain, runs, beta = range(60), 600, 0.05
    rng = SeededRandomSource("exact-coverage-domain")
    bad = tight = 0
    for _ in range(runs):
        out = release(
            sketch, Budget(1.0, 1e-6), mechanism="exact_threshold", domain=domain, beta=beta, rng=rng
        )
        b, got = out.error_bound, dict(out.items)
        bad += bool(_outside(truth, got, b.below, b.above, domain))
        tight += bool(_outside(truth, got, b.below / 3, b.above / 3, domain))
    assert bad <= stats.binom.ppf(1 - 1e-3, runs, beta), bad
    assert tight > runs // 2  # the check can fail: a third of the bound is violated in most runs


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_coverage_without_a_domain_holds_for_each_item(eps: float) -> None:
    """Without a domain the bound is per item: for each of a heavy item, one just above and one
    below the threshold, its value lies in [f − below, f + above] in >= 1 − β of the runs (the
    per-item bound is tight: b is the smallest with Pr[|Z| > b] <= β)."""
    t = exact_threshold(eps, 1e-6)
    counts = {"heavy": 500, "edge": t + 1, "low": max(1, t - 3)}
    sketch = histogram([x for x, c in counts.items() for _ in range(c)])
    runs, beta = 3000, 0.05
    rng = SeededRandomSource(f"exact-coverage-{eps}")
    bad: Counter = Counter()
    for _ in range(runs):
        out = release(sketch, Budget(eps, 1e-6), mechanism="exact_threshold", beta=beta, rng=rng)
        b = out.error_bound
        bad.update(_outside(Counter(counts), dict(out.items), b.below, b.above, counts))
    limit = stats.binom.ppf(1 - 1e-3 / len(counts), runs, beta)  # union over the three items
    assert all(bad[x] <= limit for x in counts), (bad, limit)
