"""DPSW-Sketch core (privstream.window): the faithfulness checks 1–8 and 11 of the implementation
notes (docs/sliding-window.md, "Checks"), against brute-force window counts.

Statistical checks use fixed seeds (deterministic outcomes); each states the false-failure rate its
tolerance would have for a fresh seed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from privstream.noise import SeededRandomSource
from privstream.sketches.order import item_order_key
from privstream.window import (
    PCMS,
    DPSWSketch,
    Windowing,
    budget_split,
    checkpoint_list,
    dpsw_params,
    rho_from,
    substream_total,
    suffix_starts,
)
from privstream.window.pcms import HashFamily


def zero_noise(sigma2: Fraction, count: int) -> np.ndarray:
    """Noise disabled (tests only): lets a test compare estimates with exact counts."""
    return np.zeros(count, dtype=np.int64)


def collision_free(depth: int, width: int, seed: int, domain: int) -> bool:
    buckets = HashFamily(depth, width, seed).buckets(np.arange(domain, dtype=np.int64))
    return all(len(set(row.tolist())) == domain for row in buckets)


# ---------------------------------------------------------------------------------------------
# Check 1: ρ from (ε, δ) by Eq. (1)

DELTA_1E7 = 10**-10.5  # n^-1.5 at n = 10^7


@pytest.mark.parametrize("epsilon", [0.1, 0.2, 0.4, 1.0, 1.6, 2.0])
def test_rho_round_trip(epsilon: float) -> None:
    rho = float(rho_from(epsilon, DELTA_1E7))
    back = rho + 2 * math.sqrt(rho * math.log(1 / DELTA_1E7))
    assert back == pytest.approx(epsilon, rel=1e-12) and back <= epsilon


@pytest.mark.parametrize(("epsilon", "rho"), [(1.0, 1.0132e-2), (0.1, 1.032e-4), (2.0, 3.973e-2)])
def test_rho_reference_values(epsilon: float, rho: float) -> None:
    assert float(rho_from(epsilon, DELTA_1E7)) == pytest.approx(rho, rel=1e-3)


def test_rho_increases_with_epsilon() -> None:
    values = [rho_from(e, DELTA_1E7) for e in (0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.2, 1.4, 1.6, 1.8, 2)]
    assert values == sorted(values) and len(set(values)) == len(values)


# ---------------------------------------------------------------------------------------------
# Check 2: budget split


@pytest.mark.parametrize(("alpha", "count"), [(Fraction(1, 2), 3), (Fraction(1, 2), 8), (Fraction(3, 4), 5)])
def test_budget_split_sums_below_rho(alpha: Fraction, count: int) -> None:
    rho = Fraction(1, 100)
    budgets = budget_split(rho, alpha, count)
    assert substream_total(budgets) == rho * (1 - (1 - alpha) ** 2 * alpha ** (count - 1)) < rho
    assert all(budgets[j + 1] / budgets[j] == alpha for j in range(1, count - 1))  # geometric, ratio α


def test_budget_split_reference_and_one_whole_substream_pcms() -> None:
    assert substream_total(budget_split(Fraction(1), Fraction(1, 2), 3)) == Fraction(15, 16)  # 0.9375ρ
    p = dpsw_params(window=400, substream=100, alpha=0.5, rho=0.01, depth=2, width=8)
    sketch = DPSWSketch(p, noise=zero_noise)
    sketch.update_batch(np.zeros(10, dtype=np.int64))
    (sub,) = sketch.substreams()
    assert len(sub.tables) == 2 * len(p.checkpoints) - 1  # prefix_1 is also suffix_1: one PCMS
    assert p.substream_rho == p.rho * (1 - Fraction(1, 4) * Fraction(1, 2) ** (len(p.checkpoints) - 1))


# ---------------------------------------------------------------------------------------------
# Check 3: noise scale a/ρ_j, drawn once


def test_noise_std_reference_values() -> None:
    rho = rho_from(1.0, DELTA_1E7)
    sigmas = [math.sqrt(3 / float(r)) for r in budget_split(rho, Fraction(1, 2), 3)]
    assert sigmas == pytest.approx([19.9, 68.8, 97.3], rel=2e-3)


@pytest.mark.parametrize("j", [0, 1, 2])
def test_pcms_noise_variance_is_a_over_rho_j(j: int) -> None:
    """Sample variance of a·b = 6000 counters; tolerance 4 standard errors (σ²·√(2/N) = 1.8 %),
    false-failure rate ≈ 6e-5 for a fresh seed."""
    rho_j = budget_split(Fraction(1, 100), Fraction(1, 2), 3)[j]
    pcms = PCMS(3, 2000, rho_j, rng=SeededRandomSource(30 + j))
    var = float(3 / rho_j)
    assert pcms.variance == 3 / rho_j
    assert np.var(pcms.table) == pytest.approx(var, rel=4 * math.sqrt(2 / 6000))


def test_noise_is_drawn_once_and_never_on_query() -> None:
    pcms = PCMS(3, 50, Fraction(1, 10), rng=SeededRandomSource(1))
    before = pcms.table.copy()
    first = pcms.query_batch(list(range(20)))
    assert (pcms.query_batch(list(range(20))) == first).all() and (pcms.table == before).all()


# ---------------------------------------------------------------------------------------------
# Check 4: exact without noise and collisions; the min's downward bias with noise


def test_pcms_exact_without_noise_or_collisions() -> None:
    assert collision_free(4, 4096, 0, 50)
    pcms = PCMS(4, 4096, Fraction(1), noise=zero_noise)
    items = np.random.default_rng(4).integers(0, 50, 3000)
    pcms.add_batch(items)
    assert (pcms.query_batch(np.arange(50)) == np.bincount(items, minlength=50)).all()


@pytest.mark.parametrize(("depth", "mean_min"), [(2, -0.564), (3, -0.846), (5, -1.163)])
def test_pcms_empty_query_mean_is_expected_min(depth: int, mean_min: float) -> None:
    """Mean of 2000 queries of an empty PCMS ≈ σ·E[min of a N(0,1)]; the sd of one min is <= 0.83σ,
    so the tolerance 0.1σ is >= 5 standard errors (false-failure rate < 1e-6, ignoring the weak
    dependence of queries that share a bucket)."""
    rho = Fraction(1, 50)
    sigma = math.sqrt(depth / rho)
    pcms = PCMS(depth, 8192, rho, seed=3, rng=SeededRandomSource(depth))
    values = pcms.query_batch(np.arange(2000))
    assert abs(values.mean() / sigma - mean_min) < 0.1


# ---------------------------------------------------------------------------------------------
# Check 5: checkpoints


@pytest.mark.parametrize(
    ("length", "alpha", "expected"),
    [
        (100, 0.5, (100, 50, 25, 13, 7, 4, 2, 1)),
        (100, 0.75, (100, 25, 7, 2, 1)),
        (1000, 0.9, (1000, 100, 10, 1)),
        (10**5, 0.9, (100000, 10000, 1000, 100, 10, 1)),
        (10**5, 0.75, (100000, 25000, 6250, 1563, 391, 98, 25, 7, 2, 1)),
        # exact arithmetic; float (1 − α) is a hair above the decimal α's (0.0030000000000000027), which
        # turns these into (100000, 301, 1) and (100000, 1001, 11, 1)
        (10**5, 0.997, (100000, 300, 1)),
        (10**5, 0.99, (100000, 1000, 10, 1)),
    ],
)
def test_checkpoint_table(length: int, alpha: float, expected: tuple[int, ...]) -> None:
    assert checkpoint_list(length, alpha) == expected


@pytest.mark.parametrize("length", [1, 2, 3, 17, 100, 999])
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_checkpoint_properties(length: int, alpha: float) -> None:
    points = checkpoint_list(length, alpha)
    assert points[0] == length and points[-1] == 1
    for prev, cur in zip(points, points[1:], strict=False):
        assert cur < prev and (cur >= (1 - alpha) * prev or cur == prev - 1)
    assert suffix_starts(points) == tuple(length - c + 1 for c in points)
    assert list(suffix_starts(points)) == sorted(set(suffix_starts(points)))


# ---------------------------------------------------------------------------------------------
# Checks 6–8: window alignment, expiry and update cost against brute force (w = 1000, W = 100)

ALPHA = 0.5


def aligned_sketch(window: int = 1000, length: int = 100, **kw: object) -> DPSWSketch:
    p = dpsw_params(window=window, substream=length, alpha=ALPHA, rho=0.01, depth=3, width=2048, **kw)
    return DPSWSketch(p, noise=zero_noise)


def check_plan(sketch: DPSWSketch, positions: np.ndarray, items: np.ndarray, domain: int) -> None:
    """Check 6 at the sketch's clock T: the union of the PCMS ranges read is [u_x, v_y], every range
    ends by T, the estimate equals the exact count over it, and the misalignment bounds hold."""
    p, t = sketch.params, sketch.clock
    plan = sketch.query_plan()
    assert all(u.end <= t for u in plan)  # no partially built PCMS is read
    assert all(b.start == a.end + 1 for a, b in zip(plan, plan[1:], strict=False))  # contiguous
    lo, hi = plan[0].start, plan[-1].end
    s_w = sketch.window_start()
    in_range = (positions >= lo) & (positions <= hi)
    exact = np.bincount(items[in_range], minlength=domain)
    assert (sketch.estimate_batch(np.arange(domain)) == exact).all()
    over, under = max(s_w - lo, 0), t - hi
    first, last = plan[0], plan[-1]
    if first.substream != last.substream:
        assert lo <= s_w and over <= ALPHA * p.checkpoints[first.j - 1]
    else:
        assert lo == s_w
    assert under == 0 if last.j == 1 else under <= ALPHA * p.checkpoints[last.j - 2]


def test_window_alignment_and_expiry_against_brute_force() -> None:
    domain = 20
    assert collision_free(3, 2048, 0, domain)
    sketch = aligned_sketch()
    p = sketch.params
    items = np.random.default_rng(6).integers(0, domain, 3450)
    positions = np.arange(1, len(items) + 1)
    n = len(p.checkpoints)
    for i, x in enumerate(items.tolist()):
        before = {s.index: s.tables.copy() for s in sketch.substreams() if s.complete}
        inserted = sketch.insertions
        sketch.update(x)
        t = i + 1
        # check 8: one item, <= 2|I| − 1 PCMS insertions, all in the current substream
        offset = (t - 1) % p.substream
        expected = sum(offset < c for c in p.checkpoints) + sum(
            offset >= p.substream - c for c in p.checkpoints[1:]
        )
        assert sketch.insertions - inserted == expected <= 2 * n - 1
        assert all((s.tables == before[s.index]).all() for s in sketch.substreams() if s.index in before)
        # check 7: only substreams overlapping the window, at most ⌈w/W⌉ + 1
        live = sketch.live_substreams
        assert len(live) <= p.max_live_substreams == 11
        assert all(sketch.substream_start(k) + p.substream - 1 >= sketch.window_start() for k in live)
        if t % 7 == 0 or t % 100 in (0, 1, 99) or t < 5:
            check_plan(sketch, positions[:t], items[:t], domain)
        if t % 100 == 0 and t >= 1000:  # w a multiple of W, t the last item of a substream: exact
            assert [u.j for u in sketch.query_plan()] == [1] * 10
            assert (
                sketch.estimate_batch(np.arange(domain)) == np.bincount(items[t - 1000 : t], minlength=domain)
            ).all()


def test_window_equal_to_substream_length() -> None:
    """w = W: the window starts in the current substream (l' = l, erratum 3) at every substream end."""
    domain = 10
    sketch = aligned_sketch(window=100, length=100)
    items = np.random.default_rng(2).integers(0, domain, 450)
    for t, x in enumerate(items.tolist(), start=1):
        sketch.update(x)
        check_plan(sketch, np.arange(1, t + 1), items[:t], domain)
        assert len(sketch.live_substreams) <= 2


def test_event_time_alignment_with_gaps_and_ties() -> None:
    """EVENT_TIME: several events per time unit, empty substreams, punctuations every few units."""
    domain = 15
    sketch = aligned_sketch(windowing=Windowing.EVENT_TIME, origin=0)
    rng = np.random.default_rng(8)
    gaps = rng.choice([0, 0, 1, 2, 250], size=1500)
    positions = 1 + np.cumsum(gaps)
    items = rng.integers(0, domain, len(positions))
    done = 0
    for clock in range(0, int(positions[-1]) + 300, 37):
        upto = int(np.searchsorted(positions, clock, side="right"))
        if upto > done:
            sketch.update_batch(items[done:upto], positions[done:upto])
            done = upto
        sketch.advance_to(clock)
        assert len(sketch.live_substreams) <= sketch.params.max_live_substreams
        check_plan(sketch, positions[:done], items[:done], domain)


def test_a_late_event_is_refused() -> None:
    sketch = aligned_sketch(windowing=Windowing.EVENT_TIME)
    sketch.update_batch([1, 2], [5, 9])
    sketch.advance_to(10)
    with pytest.raises(ValueError, match="positions"):
        sketch.update(3, 10)


# ---------------------------------------------------------------------------------------------
# Batch == item by item; binary state


PUNCTUATION = 10  # EVENT_TIME: a punctuation every 10 time units (< W = 12: within the horizon)


def built(windowing: Windowing, cuts: list[int], items: list, seed: int = 5) -> DPSWSketch:
    """COUNT: ``items`` in batches cut at ``cuts``. EVENT_TIME: item i at time 3i//2 + 1, the clock
    advanced to every multiple of PUNCTUATION, the items between two punctuations in batches cut at
    ``cuts`` (batch == item by item holds for the same punctuations)."""
    kw = {"windowing": windowing} if windowing is Windowing.EVENT_TIME else {}
    p = dpsw_params(window=60, substream=12, alpha=0.5, epsilon=1.0, delta=1e-6, depth=2, width=16, **kw)
    sketch = DPSWSketch(p, rng=SeededRandomSource(seed))
    positions = [3 * i // 2 + 1 for i in range(len(items))]
    bounds = [0, *cuts, len(items)]
    if windowing is Windowing.EVENT_TIME:
        marks = [
            i for i in range(1, len(items)) if positions[i] // PUNCTUATION > positions[i - 1] // PUNCTUATION
        ]
        bounds = sorted(set(bounds) | set(marks))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if windowing is Windowing.COUNT:
            sketch.update_batch(items[lo:hi])
        else:
            punctuation = positions[lo] // PUNCTUATION * PUNCTUATION - 1
            if punctuation > sketch.clock:
                sketch.advance_to(punctuation)
            sketch.update_batch(items[lo:hi], positions[lo:hi])
    if windowing is Windowing.EVENT_TIME:
        sketch.advance_to(positions[-1])
    return sketch


@pytest.mark.parametrize("windowing", list(Windowing))
@pytest.mark.parametrize("kind", ["int", "str"])
def test_batch_update_equals_item_by_item(windowing: Windowing, kind: str) -> None:
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 30, 400).tolist()
    items = [str(x) for x in raw] if kind == "str" else raw
    one_by_one = built(windowing, list(range(1, len(items))), items)
    for cuts in ([], [5, 6, 100, 101, 250], sorted(rng.choice(400, 40, replace=False).tolist())):
        batched = built(windowing, [c for c in cuts if c > 0], items)
        assert batched.to_bytes() == one_by_one.to_bytes()
        assert batched.insertions == one_by_one.insertions and batched.items == 400
    assert (one_by_one.estimate_batch(items[:30]) == batched.estimate_batch(items[:30])).all()


def test_numpy_batch_equals_list_batch() -> None:
    items = np.random.default_rng(3).integers(-5, 1000, 500)
    a = built(Windowing.COUNT, [], items.tolist())
    p = a.params
    b = DPSWSketch(p, rng=SeededRandomSource(5))
    b.update_batch(items)
    assert a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize("windowing", list(Windowing))
def test_binary_round_trip_and_resume(windowing: Windowing) -> None:
    items = np.random.default_rng(12).integers(0, 30, 300).tolist()
    sketch = built(windowing, [100], items)
    data = sketch.to_bytes()
    restored = DPSWSketch.from_bytes(data, rng=SeededRandomSource(99))
    assert restored.to_bytes() == data
    assert (restored.estimate_batch(range(30)) == sketch.estimate_batch(range(30))).all()
    assert restored.params == sketch.params
    # both continue identically from the same source
    sketch._rng = SeededRandomSource(99)
    more = list(range(50))
    if windowing is Windowing.COUNT:
        sketch.update_batch(more)
        restored.update_batch(more)
    else:
        for lo in range(0, 50, 10):
            pos = list(range(sketch.clock + 1, sketch.clock + 11))
            for s in (sketch, restored):
                s.update_batch(more[lo : lo + 10], pos)
                s.advance_to(pos[-1])
    assert restored.to_bytes() == sketch.to_bytes()


def test_noise_key_redraws_identical_noise_per_substream() -> None:
    p = dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8)
    key = bytes(range(32))
    a, b = DPSWSketch(p, noise_key=key), DPSWSketch(p, noise_key=key)
    a.update_batch(list(range(25)))
    for x in range(25):
        b.update(x)
    assert a.to_bytes() == b.to_bytes()
    assert DPSWSketch.from_bytes(a.to_bytes()).noise_key == key
    c = DPSWSketch(p, noise_key=bytes(32))
    c.update_batch(list(range(25)))
    assert c.to_bytes() != a.to_bytes()


def test_corrupt_or_foreign_bytes_are_refused() -> None:
    from privstream.sketches import CountMinSketch, SketchFormatError

    data = built(Windowing.COUNT, [], list(range(100))).to_bytes()
    for bad in (data[:-1], data + b"\x00", data[:40] + bytes([data[40] ^ 1]) + data[41:]):
        with pytest.raises(SketchFormatError):
            DPSWSketch.from_bytes(bad)
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        DPSWSketch.from_bytes(CountMinSketch(8, 2, 0).to_bytes())


# ---------------------------------------------------------------------------------------------
# Check 11: heavy hitters over a declared domain


def test_heavy_hitters_over_declared_domain() -> None:
    """γ = 0.05 ≥ 4ζ (ζ = 0.01), ε = 50: noise std <= 2 per PCMS; every item with f ≥ γw + 80 is
    reported and none below (γ − 2ζ)w − 80 is (both sets non-empty here). False-failure rate for a
    fresh seed ≈ 1e-3: a light item is reported only if all 3 rows collide with one of the 8
    frequent items, (8/512)³ ≈ 4e-6 per item, times ~290 light items; a heavy item is missed only if
    the noise and misalignment take 120 from it, > 20 standard deviations (negligible)."""
    w, m = 4000, 300
    p = dpsw_params(
        window=w,
        substream=1000,
        checkpoints=[1000, 200, 1],
        budget_ratio=0.5,
        epsilon=50.0,
        delta=1e-6,
        depth=3,
        width=512,
        zeta=0.01,
    )
    sketch = DPSWSketch(p, domain=range(m), rng=SeededRandomSource(7))
    rng = np.random.default_rng(7)
    weights = np.r_[np.full(4, 60.0), np.full(4, 15.0), np.ones(m - 8)]
    items = rng.choice(m, size=5300, p=weights / weights.sum())
    sketch.update_batch(items)
    gamma = 0.05
    assert sketch.heavy_threshold(gamma) == math.ceil((gamma - 0.01) * w)
    truth = np.bincount(items[-w:], minlength=m)
    found = dict(sketch.heavy_hitters(gamma))
    heavy = {x for x in range(m) if truth[x] >= gamma * w + 80}
    light = {x for x in range(m) if truth[x] < (gamma - 0.02) * w - 80}
    assert len(heavy) == 4 and len(light) > 250
    assert heavy <= set(found) and not light & set(found)
    assert all(v >= sketch.heavy_threshold(gamma) for v in found.values())
    assert list(found) == sorted(found, key=item_order_key)
    assert dict(sketch.heavy_hitters(gamma, domain=list(range(m)))) == found


def test_heavy_hitters_refused_without_a_domain() -> None:
    sketch = aligned_sketch()
    sketch.update_batch([1, 2, 3])
    with pytest.raises(ValueError, match="domain"):
        sketch.heavy_hitters(0.01)


# ---------------------------------------------------------------------------------------------
# Bad parameters fail fast, naming the parameter

GOOD = {"window": 100, "substream": 10, "alpha": 0.5, "rho": 0.1, "depth": 2, "width": 8}


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
        ({"depth": 0}, "depth"),
        ({"width": True}, "width"),
        ({"substream": 101}, "substream"),
        ({"substream": None}, "substream"),
        ({"beta": 0.5}, "substream"),
        ({"substream": None, "beta": 1.5}, "beta"),
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": None}, "checkpoints"),
        ({"alpha": None, "checkpoints": [10, 3, 1]}, "budget_ratio"),
        ({"alpha": None, "checkpoints": [10, 3, 3, 1], "budget_ratio": 0.5}, "checkpoints"),
        ({"alpha": None, "checkpoints": [9, 1], "budget_ratio": 0.5}, "checkpoints"),
        ({"budget_ratio": 0}, "budget_ratio"),
        ({"rho": -1.0}, "rho"),
        ({"rho": float("nan")}, "rho"),
        ({"rho": None}, "epsilon"),
        ({"epsilon": 1.0}, "rho"),
        ({"rho": None, "epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"rho": None, "epsilon": 0.0, "delta": 0.1}, "epsilon"),
        ({"zeta": 1.0}, "zeta"),
        ({"seed": -1}, "seed"),
        ({"origin": 0}, "origin"),
    ],
)
def test_bad_parameters_name_themselves(change: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        dpsw_params(**{**GOOD, **change})


def test_bad_query_and_update_arguments_name_themselves() -> None:
    sketch = aligned_sketch()
    with pytest.raises(ValueError, match="gamma"):
        sketch.heavy_threshold(1.5)
    with pytest.raises(ValueError, match="positions"):
        sketch.update_batch([1], [3])
    with pytest.raises(ValueError, match="clock"):
        sketch.advance_to(5)
    with pytest.raises(ValueError, match="noise_key|key"):
        DPSWSketch(sketch.params, noise_key=b"short")
    with pytest.raises(ValueError, match="params"):
        DPSWSketch(GOOD)  # type: ignore[arg-type]


def test_a_long_event_time_gap_creates_only_the_window_substreams() -> None:
    sketch = aligned_sketch(windowing=Windowing.EVENT_TIME)
    sketch.update_batch([1, 2], [5, 9])
    sketch.advance_to(10**6)  # 10^4 substreams pass; only the ≤ 11 overlapping the window get noise
    assert sketch.live_substreams == list(range(9990, 10001))
    assert (sketch.estimate_batch([1, 2]) == 0).all()
