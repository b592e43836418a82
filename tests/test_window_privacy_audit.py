"""Empirical privacy audit of one DPSW-Sketch release (Lemma 4.1: ρ-zCDP, so (ε, δ) = (1, 1e-3)
with ρ from Eq. (1)), with the harness of tests/test_privacy_audit.py (one-sided Clopper–Pearson
bounds on event probabilities of neighbouring inputs; a violation is lower(p) > e^ε·upper(p') + δ).

False-failure rate: the harness splits α = 1e-3 over its one-sided bounds, so a correct mechanism is
flagged in one audit with probability <= 1e-3 (union bound). Seeds are fixed: every outcome here is
deterministic.

The release is the estimates of items 0 and 1 at T = 12 (w = 8, W = 4, I = [4, 2, 1], budget ratio
q = 0.9 so ρ_1 = 0.99ρ, a = 1, b = 3 with items 0, 1, 2 in distinct buckets): Alg. 3 reads the whole
PCMSs of substreams [5, 8] and [9, 12]. Every PCMS of every live substream (also the unread ones)
gets its noise from the production discrete-Gaussian sampler at creation.

* COUNT windowing, the paper's relation: the item at position 6 replaced (0 → 1). Statistic
  ĉ_0 − ĉ_1, which moves by 2 (the likelihood-ratio statistic of the Gaussian noise).
* EVENT_TIME windowing: one early event (item 0 at time 6) removed. Read as positions, removing it
  would shift every later event one position earlier, across every checkpoint and substream
  boundary after it; with event times nothing else moves and only that event's substream changes.
  Statistic ĉ_0.
* Power: the same COUNT audit flags the production sampler run with the noise variance divided by
  64 (σ/8). Measured with these seeds (n = 5000 per side): ε lower bounds 0.07 (replacement),
  0.00 (removal), 2.32 (σ/8; σ/4 gave 0.99 before ρ became the exact float, not flagged at this
  sample size). Asserted: no
  violation, resp. a violation with ε lower bound > 1.3.
* A release through boundary PCMSs only (w = W = 4, T = 14: suffix_2 of [9, 12] and prefix_2 of
  [13, 16]; q = 0.1) with the item at position 13 replaced, and the same with σ/16 (flagged).
  Measured: ε lower bounds 0.00 and 2.99 (σ/8 reached only 0.80: the suffix's noise also enters
  the statistic).
* Two releases on the keyed path (the job's: one keyed DRBG per substream), T = 4 and T = 8 with
  w = W = 4 and the item at position 6 replaced: no violation (ε lower bound 0.03); a DRBG context
  without the substream index (every substream the same noise, which cancels in the statistic)
  reached 5.11 when measured.
* Power limit: σ/√2 is not a violation of the claimed (1, 1e-3) at all (its exact δ(1) ≈ 5e-4 for
  this release: the zCDP conversion is loose), and σ/2 (δ(1) ≈ 8e-3) would need ≈ 7e4 runs per
  side; the per-table variance test (tests/test_window_state.py) and check 3 catch those.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from privstream.noise import SeededRandomSource
from privstream.noise.discrete import discrete_gaussian_array
from privstream.noise.rng import RandomSource
from privstream.window import DPSWSketch, Windowing, dpsw_params
from privstream.window.pcms import HashFamily, NoiseSampler
from tests.test_privacy_audit import DELTA, EPS, audit, threshold_events

RUNS, PILOT = 5000, 1500
FILL = 2
STREAM = [FILL] * 5 + [0] + [FILL] * 6  # position 6 holds item 0; T = 12
REPLACED = [*STREAM[:5], 1, *STREAM[6:]]
TIMES = list(range(1, 13))  # event times for EVENT_TIME (origin 1: the same grid [1,4], [5,8], [9,12])

Output = tuple


def params(windowing: Windowing, budget_ratio: float = 0.9) -> object:
    return dpsw_params(
        window=8 if budget_ratio == 0.9 else 4,
        substream=4,
        alpha=0.5,
        budget_ratio=budget_ratio,
        epsilon=EPS,
        delta=DELTA,
        depth=1,
        width=3,
        windowing=windowing,
        origin=1,
    )


def release(
    windowing: Windowing,
    events: list[tuple[int, int]],
    noise: Callable[[RandomSource], NoiseSampler] | None,
    budget_ratio: float = 0.9,
) -> Callable[[RandomSource], Output]:
    p = params(windowing, budget_ratio)
    clock = len(events) if windowing is Windowing.COUNT else 12

    def run(rng: RandomSource) -> Output:
        sketch = DPSWSketch(p, noise=None if noise is None else noise(rng), rng=rng)  # type: ignore[arg-type]
        items = [x for x, _ in events]
        if windowing is Windowing.COUNT:
            sketch.update_batch(items)
        else:  # a punctuation at every substream end (events may run one substream ahead of the clock)
            for end in (4, 8, 12):
                group = [(x, t) for x, t in events if end - 4 < t <= end]
                sketch.update_batch([x for x, _ in group], [t for _, t in group])
                sketch.advance_to(end)
        assert sketch.clock == clock
        return tuple(zip((0, 1), sketch.estimate_batch([0, 1]).tolist(), strict=True))

    return run


def shrunk(factor: int) -> Callable[[RandomSource], NoiseSampler]:
    """The production sampler with the variance divided by ``factor`` (a broken calibration)."""
    return lambda rng: lambda sigma2, count: discrete_gaussian_array(sigma2 / Fraction(factor), count, rng)


def sample(mechanism: Callable[[RandomSource], Output], seed: int, n: int) -> list[Output]:
    rng = SeededRandomSource(seed)
    return [mechanism(rng) for _ in range(n)]


def run_audit(
    windowing: Windowing,
    a: list[tuple[int, int]],
    b: list[tuple[int, int]],
    stat: Callable[[Output], int],
    noise: Callable[[RandomSource], NoiseSampler] | None = None,
    seed: int = 500,
    budget_ratio: float = 0.9,
) -> tuple[list[str], float]:
    outs_a = sample(release(windowing, a, noise, budget_ratio), seed, RUNS)
    outs_b = sample(release(windowing, b, noise, budget_ratio), seed + 1, RUNS)
    pilot = sample(release(windowing, a, noise, budget_ratio), seed + 2, PILOT)
    return audit(outs_a, outs_b, threshold_events(stat, pilot))


def difference(out: Output) -> int:
    return out[0][1] - out[1][1]


def test_the_audited_items_do_not_collide() -> None:
    assert len(set(HashFamily(1, 3, 0).buckets(np.array([0, 1, FILL])).ravel().tolist())) == 3
    sketch = DPSWSketch(params(Windowing.COUNT))  # type: ignore[arg-type]
    sketch.update_batch(STREAM)
    plan = [(u.start, u.end) for u in sketch.query_plan()]
    assert plan == [(5, 8), (9, 12)]  # two whole-substream PCMSs, ρ_1 = 0.99ρ each


def test_count_window_replacement_passes() -> None:
    violations, eps_lower = run_audit(
        Windowing.COUNT,
        list(zip(STREAM, TIMES, strict=True)),
        list(zip(REPLACED, TIMES, strict=True)),
        difference,
    )
    print(f"count replacement: eps_lower={eps_lower:.3f}")
    assert not violations, violations


def test_event_time_removal_of_an_early_event_passes() -> None:
    events = list(zip(STREAM, TIMES, strict=True))
    removed = [e for e in events if e != (0, 6)]
    violations, eps_lower = run_audit(Windowing.EVENT_TIME, events, removed, lambda out: out[0][1], seed=700)
    print(f"event-time removal: eps_lower={eps_lower:.3f}")
    assert not violations, violations


def test_audit_flags_noise_eight_times_too_small() -> None:
    violations, eps_lower = run_audit(
        Windowing.COUNT,
        list(zip(STREAM, TIMES, strict=True)),
        list(zip(REPLACED, TIMES, strict=True)),
        difference,
        noise=shrunk(64),
        seed=900,
    )
    print(f"count replacement, sigma/8: eps_lower={eps_lower:.3f}")
    assert violations and eps_lower > 1.3 * EPS


# A release through boundary PCMSs only: w = W = 4 and T = 14 read suffix_2 [11, 12] of substream
# [9, 12] and prefix_2 [13, 14] of substream [13, 16]. Budget ratio q = 0.1 puts ρ_2 = ρ(1 − q)³/2
# = 0.36ρ on each prefix/suffix pair; the audited position 13 lies in prefix_2 (of the PCMSs read).
LONG = [*STREAM, 0, FILL]  # position 13 holds item 0; T = 14
LONG_REPLACED = [*STREAM, 1, FILL]
Q_BOUNDARY = 0.1


def test_a_prefix_suffix_release_reads_the_boundary_pcms() -> None:
    sketch = DPSWSketch(params(Windowing.COUNT, Q_BOUNDARY))  # type: ignore[arg-type]
    sketch.update_batch(LONG)
    assert [(u.kind, u.start, u.end) for u in sketch.query_plan()] == [("suffix", 11, 12), ("prefix", 13, 14)]


@pytest.mark.parametrize(("divisor", "seed"), [(1, 1100), (256, 1300)])
def test_prefix_release_audit(divisor: int, seed: int) -> None:
    """Correct noise: no violation. Every variance divided by 256 (σ/16; σ/8 reached only ε ≈ 0.8
    here, as the suffix's noise also enters the statistic): flagged with ε lower bound > 1.3."""
    violations, eps_lower = run_audit(
        Windowing.COUNT,
        list(zip(LONG, range(1, 15), strict=True)),
        list(zip(LONG_REPLACED, range(1, 15), strict=True)),
        difference,
        noise=None if divisor == 1 else shrunk(divisor),
        seed=seed,
        budget_ratio=Q_BOUNDARY,
    )
    print(f"count replacement in prefix_2, variance/{divisor}: eps_lower={eps_lower:.3f}")
    if divisor == 1:
        assert not violations, violations
    else:
        assert violations and eps_lower > 1.3 * EPS


# Two releases of the job's keyed path (noise_key: one keyed DRBG per substream, its context bound to
# the substream index): w = W = 4, releases at T = 4 (substream [1, 4]) and T = 8 ([5, 8]), the item
# at position 6 replaced (0 → 1). Statistic: the change of ĉ_0 − ĉ_1 from T = 4 to T = 8, in which the
# noise of the two substreams cancels if they share it. Each run draws its own 256-bit key from the
# seeded source. Measured (1500 runs per side): ε lower bound 0.03 for the code, 5.11 with the
# substream index dropped from the DRBG context (every substream the same noise). q = 0.9 as above.
TWO_RELEASES = [FILL] * 5 + [0] + [FILL] * 2
TWO_RELEASES_REPLACED = [*TWO_RELEASES[:5], 1, *TWO_RELEASES[6:]]
KEYED_RUNS, KEYED_PILOT = 1500, 500


def keyed_releases(stream: list[int]) -> Callable[[RandomSource], Output]:
    p = dpsw_params(
        window=4, substream=4, alpha=0.5, budget_ratio=0.9, epsilon=EPS, delta=DELTA, depth=1, width=3
    )

    def run(rng: RandomSource) -> Output:
        sketch = DPSWSketch(p, noise_key=rng.randbits(256).to_bytes(32, "big"))
        sketch.update_batch(stream[:4])
        first = tuple(sketch.estimate_batch([0, 1]).tolist())
        sketch.update_batch(stream[4:])
        return first, tuple(sketch.estimate_batch([0, 1]).tolist())

    return run


def test_two_keyed_releases_share_no_noise() -> None:
    def change(out: Output) -> int:
        return (out[1][0] - out[1][1]) - (out[0][0] - out[0][1])

    outs_a = sample(keyed_releases(TWO_RELEASES), 1, KEYED_RUNS)
    outs_b = sample(keyed_releases(TWO_RELEASES_REPLACED), 2, KEYED_RUNS)
    pilot = sample(keyed_releases(TWO_RELEASES), 3, KEYED_PILOT)
    violations, eps_lower = audit(outs_a, outs_b, threshold_events(change, pilot))
    print(f"two keyed releases, replacement at 6: eps_lower={eps_lower:.3f}")
    assert not violations, violations
