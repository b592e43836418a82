"""DPSW-Sketch (Wang–Wang–Chen, KDD 2024) facts pinned against independent computations: the
guarantee a sketch states (every field, for count and event-time windowing, with and without δ),
ρ from (ε, δ) by Eq. (1) and its validation, the checkpoint list of Alg. 2 lines 1–4 against a
literal transcription and hand-computed lists, explicit checkpoint validation, the stand-alone PCMS
(Alg. 1: hashing, calibration, seeded noise, its item count n) and the noise-time statistic.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py dpsw``): each test states
a law or an exact value the survivors of that run broke. Deterministic: noise is zero, or drawn
from a seeded source, and the clock of the timing statistic is a fake.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest

from privstream.noise import SeededRandomSource
from privstream.privacy import Change, Scope, Unit
from privstream.sketches import SketchFormatError
from privstream.sketches.hashing import MAX_WIDTH
from privstream.window import (
    PCMS,
    DPSWParams,
    DPSWSketch,
    WindowGuarantee,
    Windowing,
    checkpoint_list,
    dpsw_params,
    rho_from,
)
from privstream.window import dpsw as dpsw_module
from privstream.window.checkpoints import budget_split, unit_fraction, validate_checkpoints
from privstream.window.pcms import HashFamily, noisy_table, pcms_variance

COUNT_RELATION = (
    "replace one event at a fixed position of one stream by another; stream lengths public "
    "(DPSW §3.1; count-based window of the last w items; adding or removing an event is not "
    "covered: it shifts every later position across the substream grid)"
)
EVENT_TIME_RELATION = (
    "add/remove one event at any event time of one stream (rho/2), or change one event's item "
    "and/or event time (rho); substreams and checkpoints cut event time on a fixed public grid, "
    "and the window advances only on public punctuations, never on the data"
)
THEOREM = "DPSW-Sketch Lemma 4.1 (zCDP), Thm 3.2 ((eps, delta)), discrete Gaussian per CKS 2020 Thm 4"


def zero_noise(sigma2: Fraction, count: int) -> np.ndarray:
    """Noise disabled (tests only): estimates are exact counts."""
    return np.zeros(count, dtype=np.int64)


def thm_3_2_epsilon(rho: float, delta: float) -> float:
    """DPSW Thm 3.2: ρ-zCDP gives (ρ + 2√(ρ·ln(1/δ)), δ)-DP."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


# ---------------------------------------------------------------------------------------------
# The guarantee (Lemma 4.1, Thm 3.2) for both windowings


@pytest.mark.parametrize(
    ("windowing", "change", "relation"),
    [
        (Windowing.COUNT, Change.REPLACE, COUNT_RELATION),
        (Windowing.EVENT_TIME, Change.ADD_REMOVE, EVENT_TIME_RELATION),
    ],
)
def test_the_guarantee_states_every_field(windowing: Windowing, change: Change, relation: str) -> None:
    p = dpsw_params(
        window=40,
        substream=10,
        alpha=0.5,
        rho=Fraction(1, 50),
        delta=1e-6,
        depth=2,
        width=8,
        windowing=windowing,
    )
    g = DPSWSketch(p).guarantee()  # the CSPRNG: the production noise, so a real guarantee
    assert g == WindowGuarantee(
        rho=Fraction(1, 50),
        epsilon=pytest.approx(thm_3_2_epsilon(0.02, 1e-6), rel=1e-12),
        delta=1e-6,
        unit=Unit.EVENT,
        change=change,
        scope=Scope.ONE_STREAM,
        neighbour_relation=relation,
        theorem=THEOREM,
        private=True,
    )
    assert type(g.rho) is Fraction and type(g.epsilon) is float and type(g.delta) is float
    assert g.neighbour_relation == relation and g.theorem == THEOREM  # exact text, case included


@pytest.mark.parametrize("windowing", [Windowing.COUNT, Windowing.EVENT_TIME])
def test_the_guarantee_without_delta_states_rho_only(windowing: Windowing) -> None:
    p = dpsw_params(
        window=40, substream=10, alpha=0.5, rho=Fraction(1, 50), depth=2, width=8, windowing=windowing
    )
    g = p.guarantee()
    assert (g.rho, g.epsilon, g.delta, g.private) == (Fraction(1, 50), None, None, True)
    assert g.theorem == THEOREM


def test_the_guarantee_from_epsilon_and_delta_converts_back_below_epsilon() -> None:
    p = dpsw_params(window=40, substream=10, alpha=0.5, epsilon=1.0, delta=1e-5, depth=2, width=8)
    g = p.guarantee()
    assert g.rho == p.rho == rho_from(1.0, 1e-5)
    assert g.delta == 1e-5
    assert g.epsilon == pytest.approx(thm_3_2_epsilon(float(p.rho), 1e-5), rel=1e-12)
    assert g.epsilon <= 1.0 and g.epsilon == pytest.approx(1.0, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# ρ from (ε, δ): DPSW Eq. (1) and its validation


@pytest.mark.parametrize("delta", [0, 0.0, 1, 1.0, 1.5, Fraction(3, 2), "0.5", None, True])
def test_rho_from_refuses_delta_outside_the_open_unit_interval_naming_delta(delta: object) -> None:
    with pytest.raises(ValueError, match=r"^delta: must be a number in \(0, 1\)"):
        rho_from(1.0, delta)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [0, -1.0, float("inf"), "1"])
def test_rho_from_refuses_a_bad_epsilon_naming_epsilon(epsilon: object) -> None:
    with pytest.raises(ValueError, match=r"^epsilon: must be a finite number > 0"):
        rho_from(epsilon, 1e-6)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 0.1), (2.0, 0.01), (4.0, 1e-9), (0.2, 0.25)])
def test_rho_from_keeps_eq_1_when_its_conversion_gives_epsilon_exactly(epsilon: float, delta: float) -> None:
    """Eq. (1): ρ = (√(L + ε) − √L)², L = ln(1/δ). For these (ε, δ) the float ρ converts back to
    exactly ε (Thm 3.2), so it is not over ε and must not be stepped down."""
    big_l = math.log(1.0 / delta)
    rho = (math.sqrt(big_l + epsilon) - math.sqrt(big_l)) ** 2
    assert thm_3_2_epsilon(rho, delta) == epsilon  # the premise: an exact round trip
    assert rho_from(epsilon, delta) == Fraction(rho)


# ---------------------------------------------------------------------------------------------
# The checkpoint list (Alg. 2 lines 1–4)


def alg2_checkpoints(length: int, alpha: Fraction) -> tuple[int, ...]:
    """Alg. 2 lines 1–4 transcribed literally (1-based, linear search, exact arithmetic): for i = W
    down to 1, append i to I; then for j = 1 to |I| − 2 (|I| re-read after each deletion), find the
    largest k > j with I[k] >= (1 − α)·I[j] and delete I[j+1..k−1]."""
    points: list[int] = []
    for i in range(length, 0, -1):
        points.append(i)
        j = 1
        while j <= len(points) - 2:
            ks = [k for k in range(j + 1, len(points) + 1) if points[k - 1] >= (1 - alpha) * points[j - 1]]
            if ks:
                del points[j : max(ks) - 1]  # the 1-based indices j+1 .. k−1
            j += 1
    return tuple(points)


@pytest.mark.parametrize(
    ("length", "alpha", "expected"),
    [
        (3, 0.9, (3, 1)),  # I = [3, 2, 1]: 1 >= 0.1·3, so 2 goes
        (5, 0.8, (5, 1)),  # [5, 4, 3] -> [5, 3]; [5, 3, 2] -> [5, 2]; [5, 2, 1] -> [5, 1]
        (4, 0.5, (4, 2, 1)),  # [4, 3, 2] -> [4, 2]; [4, 2, 1]: 1 < 0.5·4, kept
        (2, 0.9, (2, 1)),
        (1, 0.5, (1,)),
    ],
)
def test_checkpoint_list_by_hand(length: int, alpha: float, expected: tuple[int, ...]) -> None:
    assert checkpoint_list(length, alpha) == expected


@pytest.mark.parametrize(
    "alpha", [Fraction(1, 10), Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(9, 10)]
)
def test_checkpoint_list_equals_alg2_transcribed(alpha: Fraction) -> None:
    for length in range(1, 41):
        assert checkpoint_list(length, alpha) == alg2_checkpoints(length, alpha), length


# ---------------------------------------------------------------------------------------------
# Explicit checkpoints: validated, naming the parameter


def test_explicit_checkpoints_accept_numpy_integers() -> None:
    assert validate_checkpoints([np.int64(10), np.int32(4), np.int64(1)], 10) == (10, 4, 1)
    p = dpsw_params(
        window=20, substream=10, checkpoints=np.array([10, 4, 1]), budget_ratio=0.5, rho=0.1, depth=2, width=8
    )
    assert p.checkpoints == (10, 4, 1) and all(type(c) is int for c in p.checkpoints)


@pytest.mark.parametrize("bad", [2.5, "4", True, 0, -3])
def test_a_bad_explicit_checkpoint_is_a_value_error_naming_checkpoints(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^checkpoints: must be an int"):
        validate_checkpoints([10, bad, 1], 10)
    with pytest.raises(ValueError, match=r"^checkpoints: must be an int"):
        dpsw_params(
            window=20, substream=10, checkpoints=[10, bad, 1], budget_ratio=0.5, rho=0.1, depth=2, width=8
        )


# ---------------------------------------------------------------------------------------------
# The stand-alone PCMS (Alg. 1)


def test_pcms_hashes_with_seed_0_by_default() -> None:
    items = np.arange(200, dtype=np.int64)
    pcms = PCMS(3, 64, Fraction(1), noise=zero_noise)
    pcms.add_batch(items)
    buckets = HashFamily(3, 64, 0).buckets(items)
    expected = np.stack([np.bincount(row, minlength=64) for row in buckets])
    assert (pcms.table == expected).all()


def test_pcms_counts_its_items() -> None:
    pcms = PCMS(2, 16, Fraction(1), noise=zero_noise)
    assert pcms.n == 0
    pcms.add(7)
    assert pcms.n == 1 and pcms.query(7) == 1
    pcms.add_batch([1, 2, 7])
    assert pcms.n == 4 and pcms.query(7) == 2
    pcms.add_batch(np.arange(5, dtype=np.int64))
    assert pcms.n == 9


@pytest.mark.parametrize(
    ("rho", "exact"), [(0.1, Fraction(1, 10)), (2, Fraction(2)), (Fraction(1, 3), Fraction(1, 3))]
)
def test_pcms_rho_is_exact_and_calibrates_the_variance(rho: object, exact: Fraction) -> None:
    pcms = PCMS(3, 8, rho, noise=zero_noise)  # type: ignore[arg-type]
    assert pcms.rho == exact and type(pcms.rho) is Fraction
    assert pcms.variance == 3 / exact


@pytest.mark.parametrize("rho", [True, 0, -1.0, 0.0, float("nan"), float("inf"), "1"])
def test_pcms_refuses_a_bad_rho_naming_it(rho: object) -> None:
    with pytest.raises(ValueError, match=r"^rho: must be a finite number > 0"):
        PCMS(2, 8, rho, noise=zero_noise)  # type: ignore[arg-type]


def test_pcms_noise_comes_from_the_given_source() -> None:
    a = PCMS(2, 32, Fraction(1, 10), rng=SeededRandomSource(11))
    b = PCMS(2, 32, Fraction(1, 10), rng=SeededRandomSource(11))
    assert (a.table == b.table).all()
    assert (a.table != 0).any()


# ---------------------------------------------------------------------------------------------
# The noise-time statistic (throughput reports subtract it)


class FakeClock:
    """perf_counter advancing by ``step`` per call, from a large start."""

    def __init__(self, start: float = 1000.0, step: float = 0.5) -> None:
        self.now, self.step = start, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_noise_seconds_adds_up_the_time_of_every_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dpsw_module, "time", FakeClock())
    p = dpsw_params(window=4, substream=2, alpha=0.5, rho=0.1, depth=2, width=4)
    sketch = DPSWSketch(p, noise=zero_noise)
    assert sketch.noise_seconds == 0.0
    sketch.update_batch(np.arange(6, dtype=np.int64))  # 3 substreams, one draw of 0.5 s each
    assert sketch.noise_seconds == 1.5


def test_a_fresh_sketch_has_spent_no_noise_time() -> None:
    p = dpsw_params(window=4, substream=2, alpha=0.5, rho=0.1, depth=2, width=4)
    assert DPSWSketch(p, noise=zero_noise).noise_seconds == 0.0


# ---------------------------------------------------------------------------------------------
# Maintenance (Alg. 2 lines 10–11): what the kernel receives, event-time grids off zero


def test_count_batches_hand_the_kernel_each_items_offset_in_its_substream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """w = 8, W = 4: positions 1..10 are offsets 0..3 of substreams 0 and 1 and 0..1 of 2; the next
    batch continues at offset 2 of substream 2. One offset per item, nothing more."""
    calls: list[tuple[list[int], int, int]] = []
    real = dpsw_module.add_items

    def spy(
        tables: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        offsets: np.ndarray,
        buckets: np.ndarray,
        lo: int,
        hi: int,
    ) -> int:
        assert offsets.dtype == np.int64
        calls.append((offsets.tolist(), lo, hi))
        return real(tables, starts, ends, offsets, buckets, lo, hi)

    monkeypatch.setattr(dpsw_module, "add_items", spy)
    p = dpsw_params(window=8, substream=4, alpha=0.5, rho=0.1, depth=2, width=16)
    sketch = DPSWSketch(p, noise=zero_noise)
    sketch.update_batch(np.arange(10, dtype=np.int64))
    assert calls == [([0, 1, 2, 3], 0, 4), ([0, 1, 2, 3], 4, 8), ([0, 1], 8, 10)]
    calls.clear()
    sketch.update_batch([1, 2, 3])
    assert calls == [([2, 3], 0, 2), ([0], 2, 3)]


def collision_free(depth: int, width: int, seed: int, domain: int) -> bool:
    buckets = HashFamily(depth, width, seed).buckets(np.arange(domain, dtype=np.int64))
    return all(len(set(row.tolist())) == domain for row in buckets)


@pytest.mark.parametrize("origin", [5, -3])
def test_event_time_cuts_substreams_on_the_grid_from_origin(origin: int) -> None:
    """W = 10 from ``origin``: substream l covers [origin + 10l, origin + 10l + 9]. Every event lands
    in its substream (its insertions are counted) and the estimates are the exact window counts."""
    assert collision_free(2, 256, 0, 4)
    p = dpsw_params(
        window=20,
        substream=10,
        checkpoints=[10, 5, 1],
        budget_ratio=0.5,
        rho=0.1,
        depth=2,
        width=256,
        windowing=Windowing.EVENT_TIME,
        origin=origin,
    )
    sketch = DPSWSketch(p, noise=zero_noise)
    o = origin
    # offsets 0, 7, 9 of substream 0: in the whole-substream PCMS (prefix 1), prefix 2 only for
    # offsets <= 4, prefix 3 for offset 0; suffix 2 for offsets >= 5, suffix 3 for offset 9
    sketch.update_batch([0, 1, 1], [o, o + 7, o + 9])
    assert sketch.insertions == (1 + 1 + 1) + (1 + 1) + (1 + 1 + 1)
    sketch.advance_to(o + 9)
    sketch.update_batch([2, 1, 3], [o + 10, o + 12, o + 19])
    sketch.advance_to(o + 19)
    assert sketch.live_substreams == [0, 1]
    assert [(u.start, u.end) for u in sketch.query_plan()] == [(o, o + 9), (o + 10, o + 19)]
    assert sketch.estimate_batch([0, 1, 2, 3]).tolist() == [1, 3, 1, 1]
    assert sketch.items == 6


def test_event_times_as_nanosecond_timestamps_land_in_their_substream() -> None:
    """Event times beyond 2**53 (epoch nanoseconds, ~1.7e18): the substream of each is exact integer
    arithmetic; a float division would put T − 3 into T's substream (at offset −3: never counted)."""
    assert collision_free(2, 256, 0, 4)
    t = 1_700_000_000_000_000_000  # a multiple of W = 1000: a substream starts at t
    p = dpsw_params(
        window=4000,
        substream=1000,
        checkpoints=[1000, 100, 10, 1],
        budget_ratio=0.5,
        rho=0.1,
        depth=2,
        width=256,
        windowing=Windowing.EVENT_TIME,
        origin=0,
    )
    sketch = DPSWSketch(p, noise=zero_noise)
    sketch.advance_to(t - 501)
    sketch.update_batch([0, 1, 1, 2, 3], np.array([t - 500, t - 3, t - 1, t, t + 5], dtype=np.int64))
    sketch.advance_to(t + 999)
    assert [u.substream for u in sketch.query_plan()] == [t // 1000 - 3 + k for k in range(4)]
    assert sketch.estimate_batch([0, 1, 2, 3]).tolist() == [1, 2, 1, 1]
    assert sketch.items == 5


# ---------------------------------------------------------------------------------------------
# Validation of the helpers, naming the parameter


@pytest.mark.parametrize("count", [2.0, "3", True, 0])
def test_budget_split_refuses_a_bad_count_naming_checkpoints(count: object) -> None:
    with pytest.raises(ValueError, match=r"^checkpoints: must be an int"):
        budget_split(Fraction(1), Fraction(1, 2), count)  # type: ignore[arg-type]


@pytest.mark.parametrize("length", [2.5, "10", True, 0])
def test_checkpoint_list_refuses_a_bad_length_naming_substream(length: object) -> None:
    with pytest.raises(ValueError, match=r"^substream: must be an int"):
        checkpoint_list(length, 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("alpha", [1.0, 0, "0.5", None, True, float("nan")])
def test_checkpoint_list_refuses_a_bad_alpha_naming_alpha(alpha: object) -> None:
    with pytest.raises(ValueError, match=r"^alpha: must be a number in \(0, 1\)"):
        checkpoint_list(10, alpha)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["alpha", "budget_ratio", "delta"])
def test_a_numeric_string_is_not_a_unit_fraction(name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: must be a number in \(0, 1\), got str"):
        unit_fraction(name, "0.5")
    assert unit_fraction(name, 0.25) == Fraction(1, 4)


# ---------------------------------------------------------------------------------------------
# PCMS calibration and table type


def test_a_zero_rho_is_refused_naming_rho_not_divided_by() -> None:
    with pytest.raises(ValueError, match=r"^rho: must be > 0, got 0"):
        pcms_variance(2, Fraction(0))
    with pytest.raises(ValueError, match=r"^rho: must be > 0"):
        PCMS(2, 8, Fraction(0), noise=zero_noise)
    assert pcms_variance(3, Fraction(1, 4)) == 12


def int32_zero_noise(sigma2: Fraction, count: int) -> np.ndarray:
    return np.zeros(count, dtype=np.int32)


def test_tables_are_int64_whatever_integer_type_the_sampler_returns() -> None:
    """Alg. 1 init as documented: a (depth, width) int64 table, so the counters never wrap at 2**31."""
    table = noisy_table(2, 4, Fraction(1), int32_zero_noise)
    assert table.dtype == np.int64 and table.shape == (2, 4)
    assert PCMS(2, 4, Fraction(1), noise=int32_zero_noise).table.dtype == np.int64
    p = dpsw_params(window=8, substream=4, alpha=0.5, rho=0.1, depth=2, width=4)
    sketch = DPSWSketch(p, noise=int32_zero_noise)
    sketch.update_batch([1, 2])
    assert all(s.tables.dtype == np.int64 for s in sketch.substreams())
    assert sketch.memory_bytes() == 8 * (2 * 3 - 1) * 2 * 4  # 2|I| − 1 = 5 PCMSs of 2 x 4 int64


# ---- dpsw_params: every parameter checked by name, numpy ints taken, exact bounds ---------------------

BASE = dict(window=16, depth=2, width=8, substream=4, alpha=0.5, epsilon=1.0, delta=1e-6)


def _params(**changes: object) -> DPSWParams:
    return dpsw_params(**{**BASE, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"window": "16"}, "window"),
        ({"window": 0}, "window"),
        ({"depth": "2"}, "depth"),
        ({"depth": 0}, "depth"),
        ({"width": "8"}, "width"),
        ({"width": MAX_WIDTH + 1}, "width"),
        ({"seed": "1"}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"substream": "4"}, "substream"),
        ({"substream": None, "beta": 1.5}, "beta"),
        ({"budget_ratio": 1.5}, "budget_ratio"),
        ({"epsilon": None, "rho": -1.0}, "rho"),
        ({"epsilon": None, "rho": "1"}, "rho"),
        ({"epsilon": None, "rho": Fraction(0)}, "rho"),
        ({"epsilon": None, "rho": 0.5, "delta": 1.5}, "delta"),
        ({"delta": 1.5}, "delta"),
        ({"delta": None}, "epsilon"),
        ({"width": 2}, "zeta"),
        ({"zeta": 1.0}, "zeta"),
        ({"windowing": Windowing.EVENT_TIME, "origin": "0"}, "origin"),
        ({"windowing": Windowing.EVENT_TIME, "origin": 2**62}, "origin"),
        ({"windowing": Windowing.EVENT_TIME, "origin": -(2**62) - 1}, "origin"),
    ],
)
def test_dpsw_params_refuses_each_bad_parameter_by_name(changes: dict, named: str) -> None:
    """A ValueError (never a TypeError) whose message starts with the parameter's name."""
    with pytest.raises(ValueError, match=f"^{named}: "):
        _params(**changes)


def test_dpsw_params_takes_numpy_ints_and_the_bounds_themselves() -> None:
    p = _params(
        window=np.int64(16), depth=np.int64(2), width=np.int64(8), seed=np.int64(3), substream=np.int64(4)
    )
    assert (p.window, p.depth, p.width, p.seed, p.substream) == (16, 2, 8, 3, 4)
    assert _params(width=MAX_WIDTH).width == MAX_WIDTH
    assert _params(seed=2**64 - 1).seed == 2**64 - 1
    assert _params().seed == 0  # the public default seed
    for origin in (np.int64(5), -(2**62), 2**62 - 1):
        assert _params(windowing=Windowing.EVENT_TIME, origin=origin).origin == origin
    assert _params(zeta=0).zeta == 0  # zeta lies in [0, 1)
    assert _params(zeta=Fraction(1, 3)).zeta == Fraction(1, 3)
    assert _params(width=3).zeta == Fraction(repr(math.e / 3))  # the default e/width, below 1 from width 3


def test_dpsw_params_derives_the_substream_from_beta_and_keeps_epsilon() -> None:
    """W = ceil(window**beta): 16**0.5 = 4 (not 16·0.5 = 8); the (ε, δ) given are stated exactly."""
    p = _params(substream=None, beta=0.5)
    assert p.substream == 4
    assert (p.epsilon, p.delta) == (Fraction(1), Fraction(1, 10**6))
    assert _params(epsilon=None, rho=Fraction(1, 8), delta=1e-6).rho == Fraction(1, 8)


def test_from_bytes_passes_the_domain_and_the_injected_sampler_on() -> None:
    """A restored sketch keeps answering for the declared domain it is given, and draws from the
    sampler it is given (here: zero noise, so its estimates are the exact counts)."""
    calls: list[int] = []

    def zero_noise(sigma2: Fraction, count: int) -> np.ndarray:
        calls.append(count)
        return np.zeros(count, dtype=np.int64)

    p = _params(window=8, width=64, substream=4)
    sketch = DPSWSketch(p, domain=["a", "b", "c"], noise=zero_noise)
    sketch.update_batch(["a", "b", "a", "c", "a", "b", "a", "a"])
    restored = DPSWSketch.from_bytes(sketch.to_bytes(), domain=["a", "b", "c"], noise=zero_noise)
    assert restored.domain is not None and restored.domain.size == 3
    before = len(calls)
    restored.update_batch(["a", "a", "b", "c"])
    assert len(calls) > before  # the new substream's tables drew from the sampler given


# ---- decode_state: exactly the states encode_state writes, every field restored -------------------
# A corrupt or forged checkpoint must be refused, never resumed (a resumed state with another noise
# key, version or substream layout would draw or reuse noise the guarantee does not cover); each
# refusal is checked by its whole message (the reason a user reads).

STATE_KEY = bytes(range(32))


def _state_parts(data: bytes) -> tuple[list[int], list[bytes]]:
    from privstream.continual.pcc import unpack_blobs
    from privstream.sketches.binary_format import decode_envelope
    from privstream.window.state import DPSW_STATE_CODE

    head, payload = decode_envelope(data, DPSW_STATE_CODE, 11, "DPSW state")
    return list(head), unpack_blobs(payload)


def _sealed(head: list[int], blobs: list[bytes]) -> bytes:
    from privstream.continual.pcc import pack_blobs
    from privstream.sketches.binary_format import encode_envelope
    from privstream.window.state import DPSW_STATE_CODE

    return encode_envelope(DPSW_STATE_CODE, head, pack_blobs(blobs))


def _refusal(data: bytes) -> str:
    with pytest.raises(SketchFormatError) as info:
        DPSWSketch.from_bytes(data)
    return str(info.value)


def _keyed(windowing: Windowing = Windowing.COUNT, items: int = 25, **budget: object) -> DPSWSketch:
    """A keyed sketch (hash seed 3); count windows: ``items`` items; event time: clock 124 in the
    third substream (two complete, one incomplete)."""
    budget = budget or {"epsilon": 1.0, "delta": 1e-6}
    extra = {"origin": 100} if windowing is Windowing.EVENT_TIME else {}
    p = dpsw_params(
        window=40,
        substream=10,
        alpha=0.5,
        depth=2,
        width=8,
        seed=3,
        windowing=windowing,
        **budget,
        **extra,  # type: ignore[arg-type]
    )
    sketch = DPSWSketch(p, noise_key=STATE_KEY)
    if windowing is Windowing.EVENT_TIME:
        sketch.update_batch([1, 2], [100, 105])
        sketch.advance_to(110)
        sketch.update_batch([3, 4], [111, 124])
        sketch.advance_to(124)
    elif items:
        sketch.update_batch([i % 5 for i in range(items)])
    return sketch


def _same_state(restored: DPSWSketch, sketch: DPSWSketch) -> None:
    assert restored.params == sketch.params
    assert (restored.params.epsilon, restored.params.delta) == (sketch.params.epsilon, sketch.params.delta)
    assert restored.params.seed == sketch.params.seed == 3
    assert restored.noise_key == STATE_KEY and not restored.injected_noise
    assert restored.noise_version == sketch.noise_version
    assert (restored.clock, restored.items, restored.insertions) == (
        sketch.clock,
        sketch.items,
        sketch.insertions,
    )
    assert restored.live_substreams == sketch.live_substreams
    for a, b in zip(restored.substreams(), sketch.substreams(), strict=True):
        assert (a.index, a.complete) == (b.index, b.complete)
        assert np.array_equal(a.tables, b.tables) and a.tables.dtype == np.int64
    assert restored.guarantee() == sketch.guarantee()
    assert restored.to_bytes() == sketch.to_bytes()


@pytest.mark.parametrize("windowing", list(Windowing))
@pytest.mark.parametrize("budget", [{"epsilon": 1.0, "delta": 1e-6}, {"rho": Fraction(1, 7)}])
def test_a_restored_state_has_every_field_of_the_saved_one(windowing: Windowing, budget: dict) -> None:
    """Parameters (the hash seed; ε and δ exactly, or none when ρ was given), the noise key and its
    version, the clock, the counters and every substream's tables: a restored sketch continues the
    same run."""
    sketch = _keyed(windowing, **budget)
    _same_state(DPSWSketch.from_bytes(sketch.to_bytes()), sketch)


@pytest.mark.parametrize("items", [0, 1, 9, 10, 11, 29, 30, 65])
def test_every_count_state_round_trips_at_substream_edges(items: int) -> None:
    """Count windows of W = 10 at the clock's edges: nothing yet (clock = origin − 1), the first
    item (clock = origin: started), one item before a substream ends (still incomplete), at its end
    (complete) and one after it; each is a reachable state and must restore."""
    sketch = _keyed(items=items)
    _same_state(DPSWSketch.from_bytes(sketch.to_bytes()), sketch)


def test_the_stored_noise_version_is_the_restored_one() -> None:
    """A state records the version of the keyed noise it drew (re-keying regenerates that version):
    the restored sketch carries the stored text, whatever this code's current version is."""
    head, blobs = _state_parts(_keyed().to_bytes())
    blobs[8] = b"v7"
    assert DPSWSketch.from_bytes(_sealed(head, blobs)).noise_version == "v7"
    for bad in (b"", b"v", b"x3", b"v1234567", b"v1\n", b"V3"):
        blobs[8] = bad
        assert _refusal(_sealed(head, blobs)) == "DPSW state: bad noise version"


def test_a_state_of_another_type_layout_windowing_or_flags_is_refused() -> None:
    from privstream.sketches import MisraGries

    assert _refusal(MisraGries(3).to_bytes()).startswith("wrong sketch type: expected DPSW state, got ")
    head, blobs = _state_parts(_keyed().to_bytes())
    layout_1 = [1, *head[1:]]
    assert _refusal(_sealed(layout_1, blobs)) == (
        "unsupported DPSW state layout 1 (this code reads 2; a layout-1 state, written before the noise "
        "version was stored, cannot be resumed: start afresh)"
    )
    for changed in ([*head[:1], len(Windowing), *head[2:]], [*head[:10], 3], [*head[:10], 4]):
        assert _refusal(_sealed(changed, blobs)) == "bad DPSW state header"
    assert _refusal(_sealed([*head[:10], 0], blobs)) == "DPSW state: noise key presence disagrees with flags"


def test_the_blobs_must_be_exactly_the_header_ones_and_one_per_live_substream() -> None:
    head, blobs = _state_parts(_keyed().to_bytes())
    for changed in (blobs[:-1], [*blobs, blobs[-1]]):
        assert _refusal(_sealed(head, changed)) == "DPSW state: wrong number of blobs"
    for at, blob in (
        (0, blobs[0] + b"\0" * 8),
        (0, blobs[0][:-8]),
        (1, blobs[1][:-8]),
        (1, blobs[1] + b"\0" * 8),
    ):
        changed = list(blobs)
        changed[at] = blob
        assert _refusal(_sealed(head, changed)) == "DPSW state: bad header blobs"


@pytest.mark.parametrize(
    ("at", "name"), [(2, "rho"), (3, "budget_ratio"), (4, "zeta"), (5, "epsilon"), (6, "delta")]
)
def test_an_unreadable_fraction_is_refused_naming_it(at: int, name: str) -> None:
    head, blobs = _state_parts(_keyed().to_bytes())
    # ρ, q and ζ are read inside dpsw_params' check, which names the parameters as a group
    prefix = "bad DPSW parameters: " if name in ("rho", "budget_ratio", "zeta") else ""
    for bad in (b"one", b"1/0", b"\xff"):
        blobs[at] = bad
        assert _refusal(_sealed(head, blobs)) == f"{prefix}bad {name} in DPSW state"


def test_only_epsilon_and_delta_may_be_absent() -> None:
    """ε and δ are stored empty when the budget was given as ρ; ρ, q and ζ never are."""
    head, blobs = _state_parts(_keyed().to_bytes())
    for at in (5, 6):
        changed = list(blobs)
        changed[at] = b""
        restored = DPSWSketch.from_bytes(_sealed(head, changed))
        assert (restored.params.epsilon is None) == (at == 5) and (restored.params.delta is None) == (at == 6)
    for at, name in ((2, "rho"), (3, "budget_ratio"), (4, "zeta")):
        changed = list(blobs)
        changed[at] = b""
        assert _refusal(_sealed(head, changed)) == f"bad DPSW parameters: bad {name} in DPSW state"


def _substream_blob(index: int, complete: int, tables: np.ndarray) -> bytes:
    from privstream.window.state import _SUB

    return _SUB.pack(index, complete) + tables.astype("<i8").tobytes()


def test_every_substream_header_and_size_is_checked() -> None:
    """Substream blobs: index in 0..next−1, completeness 0 or 1, and exactly K·a·b int64s with
    K = |I| for a complete substream and 2|I| − 1 for one under construction."""
    from privstream.window.state import _SUB

    sketch = _keyed()
    head, blobs = _state_parts(sketch.to_bytes())
    n, a, b = len(sketch.params.checkpoints), 2, 8
    first = 9  # the first substream blob
    complete = np.zeros((n, a, b), dtype=np.int64)
    cases = {
        "DPSW state: bad substream header": [
            _substream_blob(0, 2, complete),
            _substream_blob(-1, 1, complete),
            _substream_blob(head[9], 1, complete),  # index = next_index
        ],
        "DPSW state: substream size mismatch": [
            _substream_blob(0, 1, np.zeros((2 * n - 1, a, b), dtype=np.int64)),  # complete with K = 2n−1
            _substream_blob(0, 0, complete),  # incomplete with K = n
            _substream_blob(0, 1, complete)[:-8],
            _SUB.pack(0, 1),  # a header and no tables
        ],
        "DPSW state: truncated substream": [b"\0" * (_SUB.size - 1)],
    }
    for reason, replacements in cases.items():
        for blob in replacements:
            changed = list(blobs)
            changed[first] = blob
            assert _refusal(_sealed(head, changed)) == reason


def _with_head(data: bytes, **values: int) -> bytes:
    from privstream.window.state import _HEAD

    head, blobs = _state_parts(data)
    origin, clock, items, insertions = _HEAD.unpack(blobs[0])
    fields = {"origin": origin, "clock": clock, "items": items, "insertions": insertions, **values}
    blobs[0] = _HEAD.pack(fields["origin"], fields["clock"], fields["items"], fields["insertions"])
    return _sealed(head, blobs)


def test_the_clock_lies_between_just_before_the_origin_and_2_to_the_62() -> None:
    fresh = DPSWSketch(_keyed(Windowing.EVENT_TIME).params, noise_key=STATE_KEY)
    data = fresh.to_bytes()
    assert DPSWSketch.from_bytes(data).clock == 99  # origin − 1: nothing yet
    for clock in (98, 2**62):
        assert _refusal(_with_head(data, clock=clock)) == "DPSW state: clock before the origin"


def _without_substreams(data: bytes, drop: slice) -> tuple[list[int], list[bytes]]:
    """``data``'s parts with the substream blobs ``drop`` removed (the count in the header too)."""
    head, blobs = _state_parts(data)
    subs = blobs[9:]
    del subs[drop]
    head[8] = len(subs)
    return head, blobs[:9] + subs


def test_the_next_substream_is_the_clocks_in_count_windows_and_at_most_one_beyond_in_event_time() -> None:
    """Count windows: the live substreams end at the clock's; event time: at the clock's or the one
    after it (an event within the horizon), never before the clock's."""
    count = _keyed()  # 25 items at positions 1..25: clock 25, substream 2 live and incomplete
    head, blobs = _state_parts(count.to_bytes())
    assert head[9] == 3
    head[9] = 4
    assert _refusal(_sealed(head, blobs)) == "DPSW state: next substream 4 unreachable at clock 25"
    event = _keyed(Windowing.EVENT_TIME)  # clock 124 (substream 2), live 0..2
    assert event.live_substreams == [0, 1, 2]
    head, blobs = _without_substreams(event.to_bytes(), slice(-1, None))  # the clock's substream dropped
    head[9] = 2
    assert _refusal(_sealed(head, blobs)) == "DPSW state: next substream 2 unreachable at clock 124"
    event.update(9, 131)  # substream 3 opened ahead of the clock: reachable
    data = event.to_bytes()
    assert DPSWSketch.from_bytes(data).live_substreams == event.live_substreams == [0, 1, 2, 3]
    head, blobs = _state_parts(data)
    head[9] = 5
    assert _refusal(_sealed(head, blobs)) == "DPSW state: next substream 5 unreachable at clock 124"


def test_the_live_substreams_are_exactly_the_windows_and_complete_iff_ended() -> None:
    count = _keyed(items=65)  # clock 65: window 26..65, substreams 2..6 live
    assert count.live_substreams == [2, 3, 4, 5, 6]
    head, blobs = _without_substreams(count.to_bytes(), slice(0, 1))
    assert _refusal(_sealed(head, blobs)) == (
        "DPSW state: live substreams [3, 4, 5]... are not those of clock 65 (2..6)"
    )
    head, blobs = _state_parts(count.to_bytes())
    index, complete = struct.unpack_from("<qB", blobs[-1])
    assert (index, complete) == (6, 0)
    n = len(count.params.checkpoints)
    blobs[-1] = _substream_blob(6, 1, np.zeros((n, 2, 8), dtype=np.int64))
    assert _refusal(_sealed(head, blobs)) == "DPSW state: a substream's completeness disagrees with the clock"


def test_the_item_and_insertion_counters_must_agree() -> None:
    """Count windows: items = clock − origin + 1; always items <= insertions <= (2|I| − 1)·items."""
    sketch = _keyed()
    data = sketch.to_bytes()
    n = len(sketch.params.checkpoints)
    for bad in ({"items": sketch.items - 1}, {"items": sketch.items + 1}):
        assert _refusal(_with_head(data, **bad)) == "DPSW state: bad counters"
    event = _keyed(Windowing.EVENT_TIME)
    data = event.to_bytes()
    top = (2 * n - 1) * event.items
    assert DPSWSketch.from_bytes(_with_head(data, insertions=top)).insertions == top
    assert DPSWSketch.from_bytes(_with_head(data, insertions=event.items)).insertions == event.items
    for bad in ({"insertions": top + 1}, {"insertions": event.items - 1}, {"items": -1, "insertions": 0}):
        assert _refusal(_with_head(data, **bad)) == "DPSW state: bad counters"
