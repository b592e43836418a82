"""Empirical privacy audit of ``exact_threshold`` (thresholded discrete Laplace(1/ε) on an exact
histogram) with the harness of tests/test_privacy_audit.py, on its two worst neighbouring pairs:

* NEW KEY: a key of count 1 stored in one histogram only (the other keys equal): it is released
  with probability Pr[Z >= T − 1] <= δ, the δ part of the guarantee;
* SHARED: a key stored in both whose counts differ by 1: a sensitivity-1 geometric mechanism, the
  ε part (the probability ratio of every tail event is exactly e^ε).

The real calibration passes both. Power: the same audit flags the production sampler with the
noise scale halved (ε doubled, same threshold) on SHARED (true loss 2ε), and with the threshold
lowered to 2 (the smallest allowed, real noise) on NEW KEY (the new key is released with
probability Pr[Z >= 1] ≈ 0.27 against 0).

Measured with these seeds (n = 20000 runs per side, ε = 1, δ = 1e-3, T = 8): empirical ε lower
bounds 0.00 (new key) and 0.93 (shared) at the real calibration; 1.92 with the noise halved; 6.20
with threshold 2 (asserted: no violation at the real calibration; broken > 1.3·ε resp. > 3·ε, violated).

False-failure rate: each one-sided Clopper–Pearson bound fails with probability
α = 1e-3 / (2·2·#events), so a correct (ε, δ)-DP mechanism is flagged in one audit with probability
<= 1e-3 (union bound). Seeds are fixed, so every outcome here is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from privstream.accounting import Budget
from privstream.mechanisms import Request, get, release
from privstream.mechanisms.exact_threshold import exact_threshold
from privstream.mechanisms.laplace_threshold import laplace_threshold_release
from privstream.noise import SeededRandomSource
from privstream.noise.distributions import discrete_laplace_tail
from privstream.sketches import ExactHistogram
from tests.test_privacy_audit import DELTA, EPS, Output, audit, runs, threshold_events

HEAVY, KEY = 5, 9  #: a shared heavy key, and the key whose count differs between the neighbours
Sampler = Callable[[ExactHistogram, SeededRandomSource], Output]


def histogram(counts: dict[int, int]) -> ExactHistogram:
    h = ExactHistogram()
    h.update_batch([x for x, c in counts.items() for _ in range(c)])
    return h


def pairs() -> dict[str, tuple[ExactHistogram, ExactHistogram]]:
    """(larger, smaller) histograms: one event of KEY added to the smaller one."""
    return {
        "new_key": (histogram({HEAVY: 40, KEY: 1}), histogram({HEAVY: 40})),
        "shared": (histogram({HEAVY: 40, KEY: 30}), histogram({HEAVY: 40, KEY: 29})),
    }


_MECH = get("exact_threshold")
_REQUEST = Request(1, Budget(EPS, DELTA), 0.05, None, "0 (exact counts)")
_CALIBRATION = _MECH.calibrate(_REQUEST)
THRESHOLD = exact_threshold(EPS, DELTA)


def real(sketch: ExactHistogram, rng: SeededRandomSource) -> Output:
    """The registered mechanism's sampler at its real calibration (what release() runs)."""
    return _MECH.sample(sketch.counters(), _REQUEST, _CALIBRATION, rng)


def halved_noise(sketch: ExactHistogram, rng: SeededRandomSource) -> Output:
    """The production sampler with scale 1/(2ε) (ε doubled) and the real threshold: NOT ε-DP."""
    return laplace_threshold_release(sketch.counters(), 2 * EPS, THRESHOLD, 1, rng)


def low_threshold(sketch: ExactHistogram, rng: SeededRandomSource) -> Output:
    """The production sampler with the real noise and threshold 2: a new key leaks, NOT (ε, δ)-DP."""
    return laplace_threshold_release(sketch.counters(), EPS, 2, 1, rng)


def key_value(out: Output) -> int:
    return dict(out).get(KEY, 0)


def run_audit(sampler: Sampler, pair: str, seed: int, n: int) -> tuple[list[str], float]:
    big, small = pairs()[pair]
    diff = {x: big.estimate(x) - small.estimate(x) for x in big.counters().keys() | small.counters().keys()}
    assert {x: d for x, d in diff.items() if d} == {KEY: 1} and big.n == small.n + 1  # neighbours
    events = threshold_events(key_value, runs(sampler, big, seed, 1500))
    events.append(lambda o: KEY in dict(o))  # the key is released at all
    events.append(lambda o: dict(o).get(HEAVY, 0) >= 40)  # a shared key that does not differ
    return audit(runs(sampler, big, seed + 1, n), runs(sampler, small, seed + 2, n), events)


def test_the_audited_sampler_is_the_release() -> None:
    for big, small in pairs().values():
        for sketch in (big, small):
            stated = release(
                sketch, Budget(EPS, DELTA), mechanism="exact_threshold", rng=SeededRandomSource(4)
            )
            assert stated.items == real(sketch, SeededRandomSource(4))
    assert dict(_CALIBRATION.parameters)["threshold"] == THRESHOLD == 8
    assert discrete_laplace_tail(THRESHOLD - 1, 1 / EPS) <= DELTA  # the new key's release probability


@pytest.mark.parametrize("pair", ["new_key", "shared"])
def test_audit_passes_the_real_calibration(pair: str) -> None:
    violations, _ = run_audit(real, pair, 61, 20000)
    assert not violations, violations


def test_audit_flags_noise_two_times_too_small_on_the_shared_key() -> None:
    violations, eps_lower = run_audit(halved_noise, "shared", 71, 20000)
    assert violations
    assert eps_lower > 1.3 * EPS


def test_audit_flags_a_threshold_too_low_on_the_new_key() -> None:
    violations, eps_lower = run_audit(low_threshold, "new_key", 81, 20000)
    assert violations and any("D->D'" in v for v in violations)
    assert eps_lower > 3 * EPS
