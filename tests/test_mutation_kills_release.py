"""The release path (``release``, ``release_partitions``, ``release_disjoint``) and the domain-wide
mechanisms it runs (Lebeda–Tětek §6 ``pure_topk``, Chan et al.'s ``chan_topk`` / ``chan_pmg`` and
their shared noisy top-k over a declared domain), each against an independent computation.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py release``); the scales
the domain-wide releases draw with are also checked in tests/test_noise_parameters_recorded.py.

* Noisy top-k (:mod:`privstream.mechanisms.domain_topk`). The noise draws are scripted at the
  kernel boundary (each call checks the exact scale t/s and the random source it is given), the
  order-statistics sampler of the noise-only elements is replaced by a scripted non-increasing
  sequence, and the boundary tie-break reads a scripted ``randbelow``. The reference is written
  here from the module's specification: every domain element gets value + noise, the k largest
  are kept (ties at the boundary: partial Fisher–Yates over the tied candidates, in order), the
  noise-only values are generated in decreasing order exactly until k known values are strictly
  above the last one generated (or it is below ``min_value``), and every noise-only winner gets a
  distinct position outside the stored keys.
* Domain-wide mechanisms. ``pure_topk`` noises Alg. 3's lattice values at scale 2(k+1)/ε lattice
  units and rounds half up; ``chan_topk`` / ``chan_pmg`` noise the non-zero counters at scale
  (k + extra)/ε, ``chan_pmg`` keeping values >= 1. Their error bounds are recomputed here from the
  discrete Laplace tail Pr[|Z| > b] = 2α^{b+1}/(1+α), α = e^{−1/scale}. The Chan et al. mechanisms
  are built by calling ``chan_mechanism`` in the test: the registered ones are built at import,
  before mutmut's workers switch a mutant on.
* Entry points. ``auto`` with a public ``n_bound`` weighs a mechanism that subtracts the sketch
  term by systematic·n_bound/(k+1) (``registry.auto_key``), for ``release_disjoint`` once per
  partition that adds to an item's value (a test mechanism with systematic coefficient 1 is
  registered for the test; the built-in one, ``pure_topk``, is domain-wide, so never counted as
  keys disjoint); the ledger is charged once with the stated (ε, δ), epoch and label, only after
  every refusal; refusals (TypeError / ValueError / MechanismNotApplicable) name the parameter;
  ``release_partitions`` is §7's Alg. 3 per partition, key-wise sum, Laplace(2/ε) + top-k; the
  partition releases are summed per key in the universe's order (ints before strs).

Deterministic: every random source is a :class:`SeededRandomSource` or scripted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import pytest

import privstream.mechanisms.chan as chan_module
import privstream.mechanisms.domain_topk as topk_module
import privstream.mechanisms.pure_topk as pure_module
import privstream.mechanisms.registry as registry
from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms import (
    ErrorBound,
    MechanismNotApplicable,
    release,
    release_disjoint,
    release_partitions,
)
from privstream.mechanisms.chan import chan_mechanism, chan_values
from privstream.mechanisms.domain_topk import (
    _finish,
    _select,
    declared_domain,
    noisy_top_k,
    noisy_top_k_naive,
)
from privstream.mechanisms.pure_topk import DOMAIN_SCOPE, pure_topk_values
from privstream.mechanisms.registry import (
    L1_K,
    Calibration,
    Mechanism,
    PrivacyMap,
    Request,
    Structure,
    counters_of,
)
from privstream.mechanisms.release import _sum_items
from privstream.noise import SeededRandomSource
from privstream.sketches import Build, ExactHistogram, MisraGries, ReducedSketch, reduce_sensitivity

# ---------------------------------------------------------------------------------------------------
# Scripted randomness
# ---------------------------------------------------------------------------------------------------


class ScriptedRandomSource:
    """``randbelow(n)`` answers from a script (each answer checked to be below n) and records n."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[int] = []

    def randbelow(self, n: int) -> int:
        self.asked.append(n)
        assert self.answers, f"unexpected randbelow({n})"
        answer = self.answers.pop(0)
        assert 0 <= answer < n
        return answer

    def randbits(self, n: int) -> int:
        raise AssertionError(f"unexpected randbits({n})")


class BoundedRandomSource(SeededRandomSource):
    """A seeded source that fails after ``limit`` calls of ``randbelow`` (a rejection loop that
    cannot end fails at once instead of running until the timeout)."""

    def __init__(self, seed: int, limit: int = 10_000) -> None:
        super().__init__(seed)
        self.calls = 0
        self.limit = limit

    def randbelow(self, n: int) -> int:
        self.calls += 1
        assert self.calls <= self.limit, "rejection sampling does not end"
        return super().randbelow(n)


@dataclass
class ScriptedNoise:
    """Stands in for the exact discrete Laplace kernel: checks the scale t/s and the source of
    every call and returns ``values`` in turn (0 once they run out)."""

    scale: Fraction
    rng: object
    values: list[int]
    calls: int = 0

    def __call__(self, t: int, s: int, rng: object) -> int:
        assert (t, s) == (self.scale.numerator, self.scale.denominator), (t, s)
        assert rng is self.rng
        self.calls += 1
        return self.values.pop(0) if self.values else 0


class ScriptedLevels:
    """Stands in for the order-statistics sampler of the noise-only elements: checks N, the scale
    and the source, and hands out a scripted non-increasing sequence of levels (never more than N)."""

    def __init__(self, levels: list[int], n: int, scale: Fraction, rng: object) -> None:
        assert levels == sorted(levels, reverse=True)
        self.levels, self.n, self.scale, self.rng = list(levels), n, scale, rng
        self.built: list[int] = []
        self.consumed = 0

    def __call__(self, n: int, scale: Fraction, rng: object) -> ScriptedLevels:
        assert (n, Fraction(scale), rng) == (self.n, self.scale, self.rng)
        self.built.append(n)
        return self

    @property
    def generated(self) -> int:
        return self.consumed

    def next(self) -> int:
        assert self.consumed < self.n, "more than N noise-only values generated"
        value = self.levels[self.consumed]
        self.consumed += 1
        return value


# ---------------------------------------------------------------------------------------------------
# DeclaredDomain: membership and restriction
# ---------------------------------------------------------------------------------------------------


def test_range_domain_positions_are_indices_of_int_members_only() -> None:
    d = declared_domain(range(10, 40, 3))  # 10, 13, ..., 37
    assert [d.position(x) for x in (10, 13, 37)] == [0, 1, 9]
    assert d.position(11) is None and d.position(40) is None and d.position(7) is None
    assert d.position("13") is None
    small = declared_domain(range(5))
    assert small.position(1) == 1 and small.position(True) is None  # a bool is not an item
    assert d.restrict({13: 4, 11: 9, "x": 2, 37: 1, 100: 5}) == {1: 4, 9: 1}


def test_sequence_domain_positions_and_restriction() -> None:
    d = declared_domain(["a", 5, "c"])
    assert [d.position(x) for x in ("a", 5, "c")] == [0, 1, 2]
    assert d.position("zz") is None and d.position(6) is None
    assert d.restrict({"c": 3, "zz": 8, 5: 1}) == {2: 3, 1: 1}


@pytest.mark.parametrize("top_k", [noisy_top_k, noisy_top_k_naive])
@pytest.mark.parametrize("k", [0, -1, 2.0, "2", True])
def test_bad_k_is_a_value_error_naming_k(top_k: Callable, k: object) -> None:
    with pytest.raises(ValueError, match=r"^k: must be an int >= 1"):
        top_k({1: 3}, range(4), k, Fraction(1), SeededRandomSource(1))


# ---------------------------------------------------------------------------------------------------
# Selection of the k largest and the final order
# ---------------------------------------------------------------------------------------------------


def test_at_most_k_candidates_are_all_kept_without_randomness() -> None:
    candidates = [(5, "a"), (3, "b")]
    assert _select(list(candidates), 2, ScriptedRandomSource()) == candidates
    assert _select(list(candidates), 3, ScriptedRandomSource()) == candidates


def test_the_k_largest_values_are_selected() -> None:
    rng = ScriptedRandomSource([0])
    candidates = [(1, "a"), (7, "b"), (3, "c"), (9, "d"), (5, "e")]
    assert _select(candidates, 2, rng) == [(9, "d"), (7, "b")]
    assert rng.asked == [1]  # one candidate at the boundary value, one place for it


def test_boundary_ties_are_broken_by_partial_fisher_yates() -> None:
    """Tied candidates b, c, d, e (in order) for 2 places: swap position 0 with 0 + r0 (r0 below 4),
    then position 1 with 1 + r1 (r1 below 3), keep the first two."""
    candidates = [(9, "a"), (4, "b"), (4, "c"), (4, "d"), (4, "e"), (1, "f")]
    rng = ScriptedRandomSource([3, 2])  # [b c d e] -> [e c d b] -> [e b d c]
    assert _select(candidates, 3, rng) == [(9, "a"), (4, "e"), (4, "b")]
    assert rng.asked == [4, 3]
    rng = ScriptedRandomSource([1, 0])  # [b c d e] -> [c b d e] -> same
    assert _select(candidates, 3, rng) == [(9, "a"), (4, "c"), (4, "b")]


def test_finish_orders_by_item_ints_before_strs() -> None:
    selected = [(3, "b"), (9, 2), (5, "a"), (1, 7)]  # (value, item)
    assert _finish(selected) == [(2, 9), (7, 1), ("a", 5), ("b", 3)]


# ---------------------------------------------------------------------------------------------------
# The naive top-k: d draws
# ---------------------------------------------------------------------------------------------------


def _script(
    monkeypatch: pytest.MonkeyPatch, scale: Fraction, rng: object, values: list[int]
) -> ScriptedNoise:
    noise = ScriptedNoise(scale, rng, list(values))
    monkeypatch.setattr(topk_module, "_discrete_laplace", noise)
    return noise


@pytest.mark.parametrize("naive", [True, False])
def test_naive_top_k_noises_every_domain_element_once(monkeypatch: pytest.MonkeyPatch, naive: bool) -> None:
    """value + noise for each of the d elements in domain order (stored keys outside the domain
    dropped, absent ones 0); the top 3 with the tie at 0 broken by the script."""
    scale = Fraction(7, 3)
    rng = ScriptedRandomSource([2])  # tied at 0: positions 0, 2, 4 -> the third
    noise = _script(monkeypatch, scale, rng, [0, 1, 0, -1, 0])
    values = {1: 5, 3: 2, "x": 50}
    if naive:
        out = noisy_top_k_naive(values, range(5), 3, scale, rng)  # type: ignore[arg-type]
    else:  # at most naive_limit noise-only elements: the same d draws
        out = noisy_top_k(values, range(5), 3, scale, rng, naive_limit=3)  # type: ignore[arg-type]
    assert out == [(1, 6), (3, 1), (4, 0)]
    assert noise.calls == 5 and rng.asked == [3]


def test_naive_top_k_with_a_floor_keeps_values_at_or_above_it(monkeypatch: pytest.MonkeyPatch) -> None:
    scale = Fraction(2)
    rng = ScriptedRandomSource()
    _script(monkeypatch, scale, rng, [0, 1, 0, -1, 0])
    out = noisy_top_k_naive({1: 5, 3: 2}, range(5), 3, scale, rng, min_value=1)  # type: ignore[arg-type]
    assert out == [(1, 6), (3, 1)]  # 1 >= 1 is kept, the zeros are not


# ---------------------------------------------------------------------------------------------------
# The efficient top-k: which path, and how many noise-only levels it generates
# ---------------------------------------------------------------------------------------------------


def _reference(stored: list[int], levels: list[int], k: int, min_value: int | None) -> tuple[int, list[int]]:
    """How many levels the sampler must generate, and the kept ones: the first level z with at
    least k known values (stored noisy values and earlier levels) strictly above it, or below
    ``min_value``, is the last generated and is not kept."""
    known = list(stored)
    for i, z in enumerate(levels):
        if (min_value is not None and z < min_value) or sum(v > z for v in known) >= k:
            return i + 1, levels[:i]
        known.append(z)
    return len(levels), list(levels)


@dataclass(frozen=True)
class Case:
    stored: dict  # stored key -> count
    noise: list[int]  # the stored keys' noise, in order
    levels: list[int]
    k: int
    min_value: int | None = None


CASES = {
    # a noise-only level above the stored value wins; the next one (9) already has 1 above it
    "level_wins": Case({2: 7}, [2], [10, 9, 8], k=1),
    # the stored value is above the first level: nothing is kept from the sampler
    "stored_wins": Case({2: 11}, [0], [10, 9], k=1),
    # a run of equal levels: none has a value strictly above it until 9
    "equal_levels": Case({2: 10}, [0], [10, 10, 10, 10, 9, 8], k=2),
    # exactly k values above 4: 4 is the last generated
    "exactly_k_above": Case({2: 5}, [0], [10, 8, 4, 3, 2], k=3),
    # runs of equal levels after a larger one
    "runs": Case({2: 3}, [0], [10, 8, 8, 8, 7, 7, 2, 1], k=4),
    # the floor: 0 < 1 ends the generation; the stored 1 is kept (>= floor)
    "floor": Case({2: 4, 3: 1}, [0, 0], [2, 1, 0], k=4, min_value=1),
    "floor_negative_noise": Case({2: 4, 3: 3}, [0, -3], [1, 0, -1], k=3, min_value=0),
    # a stored value below the floor is no candidate, even with places left
    "below_floor": Case({2: 4, 3: 2}, [0, -3], [2, 0], k=4, min_value=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_noise_only_levels_are_generated_until_k_known_values_are_above(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    d, scale = 20, Fraction(3, 2)
    rng = BoundedRandomSource(7)
    _script(monkeypatch, scale, rng, case.noise)
    n_noise = d - len(case.stored)
    levels = ScriptedLevels(case.levels, n_noise, scale, rng)
    monkeypatch.setattr(topk_module, "TopNoiseLevels", levels)
    out = noisy_top_k(case.stored, range(d), case.k, scale, rng, min_value=case.min_value, naive_limit=0)  # type: ignore[arg-type]
    noisy = {x: c + e for (x, c), e in zip(case.stored.items(), case.noise + [0] * 9, strict=False)}
    consumed, kept = _reference(list(noisy.values()), case.levels, case.k, case.min_value)
    assert levels.built == [n_noise] and levels.consumed == consumed
    floor = case.min_value
    candidates = sorted([v for v in noisy.values() if floor is None or v >= floor] + kept, reverse=True)
    assert sorted((v for _, v in out), reverse=True) == candidates[: case.k]
    # stored keys keep their noisy value; the others are distinct noise-only positions
    for x, v in out:
        assert noisy.get(x, v) == v
    assert len({x for x, _ in out}) == len(out)


def test_sampler_is_not_asked_for_more_than_n_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """k above the domain size: every one of the N noise-only values is generated, then no more."""
    scale = Fraction(1)
    rng = BoundedRandomSource(3)
    _script(monkeypatch, scale, rng, [0])
    levels = ScriptedLevels([5, 2, 1], 3, scale, rng)
    monkeypatch.setattr(topk_module, "TopNoiseLevels", levels)
    out = noisy_top_k({0: 3}, range(4), 6, scale, rng, naive_limit=0)  # type: ignore[arg-type]
    assert levels.consumed == 3 and sorted(v for _, v in out) == [1, 2, 3, 5]
    assert sorted(x for x, _ in out) == [0, 1, 2, 3]


@pytest.mark.parametrize("seed", range(12))
def test_noise_only_winners_get_distinct_positions_outside_the_stored_keys(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    scale = Fraction(1)
    rng = BoundedRandomSource(seed, limit=200)
    _script(monkeypatch, scale, rng, [0, 0])
    levels = ScriptedLevels([5, 4, 3, 2], 3, scale, rng)
    monkeypatch.setattr(topk_module, "TopNoiseLevels", levels)
    out = noisy_top_k({0: 100, 3: 50}, range(5), 4, scale, rng, naive_limit=0)  # type: ignore[arg-type]
    got = dict(out)
    assert len(out) == 4 and got[0] == 100 and got[3] == 50
    assert sorted(v for x, v in out if x not in (0, 3)) == [4, 5]
    assert len(got) == 4 and set(got) <= {0, 1, 2, 3, 4}


class _RecordingLevels(topk_module.TopNoiseLevels):
    built: list[int] = []

    def __init__(self, n: int, scale: Fraction, rng: object) -> None:
        _RecordingLevels.built.append(n)
        super().__init__(n, scale, rng)  # type: ignore[arg-type]


@pytest.fixture
def recorded_levels(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    _RecordingLevels.built = []
    monkeypatch.setattr(topk_module, "TopNoiseLevels", _RecordingLevels)
    yield _RecordingLevels.built


def test_the_naive_path_is_taken_up_to_naive_limit_noise_only_elements(
    monkeypatch: pytest.MonkeyPatch, recorded_levels: list[int]
) -> None:
    scale = Fraction(2)
    rng = SeededRandomSource(4)
    noise = _script(monkeypatch, scale, rng, [])
    values = {0: 3, "outside": 9}
    noisy_top_k(values, range(6), 2, scale, rng, naive_limit=5)  # N = 5: naive, 6 draws
    assert noise.calls == 6 and recorded_levels == []
    noisy_top_k(values, range(6), 2, scale, rng, naive_limit=4)  # N = 5: one stored draw + sampler
    assert noise.calls == 7 and recorded_levels == [5]


def test_the_default_naive_limit_is_2048(monkeypatch: pytest.MonkeyPatch, recorded_levels: list[int]) -> None:
    scale = Fraction(2)
    rng = SeededRandomSource(5)
    noise = _script(monkeypatch, scale, rng, [])
    noisy_top_k({0: 3, "outside": 9}, range(2049), 2, scale, rng)  # N = 2048
    assert noise.calls == 2049 and recorded_levels == []
    noisy_top_k({0: 3, "outside": 9}, range(2050), 2, scale, rng)  # N = 2049
    assert noise.calls == 2050 and recorded_levels == [2049]


# ---------------------------------------------------------------------------------------------------
# Chan et al. (chan_values, chan_mechanism) and pure_topk (§6)
# ---------------------------------------------------------------------------------------------------


@dataclass
class TopKCall:
    values: dict
    domain: object
    k: int
    scale: Fraction
    rng: object
    min_value: int | None


def _spy_top_k(monkeypatch: pytest.MonkeyPatch, module: object, answer: list) -> list[TopKCall]:
    calls: list[TopKCall] = []

    def spy(values, domain, k, scale, rng, *, min_value=None):  # noqa: ANN001, ANN202
        calls.append(TopKCall(dict(values), domain, k, scale, rng, min_value))
        return list(answer)

    monkeypatch.setattr(module, "noisy_top_k", spy)
    return calls


def exact(eps: float) -> Fraction:
    """ε as the exact rational the ledger charges (its shortest decimal)."""
    return Fraction(repr(eps))


@pytest.mark.parametrize("clamp", [False, True])
def test_chan_values_noise_the_nonzero_counters_at_sensitivity_over_epsilon(
    monkeypatch: pytest.MonkeyPatch, clamp: bool
) -> None:
    calls = _spy_top_k(monkeypatch, chan_module, [(3, 8), (1, 2)])
    rng = SeededRandomSource(1)
    domain = declared_domain(range(10))
    out = chan_values({1: 4, 2: 0, 3: 1, 5: 0, 7: 9}, 0.7, 3, 5, domain, rng, clamp=clamp)
    assert out == ((3, 8), (1, 2)) and isinstance(out, tuple)
    (call,) = calls
    assert call.values == {1: 4, 3: 1, 7: 9}  # zero counters are noise-only elements
    assert call.domain is domain and call.k == 3 and call.rng is rng
    assert call.scale == Fraction(5) / exact(0.7) == Fraction(50, 7)
    assert call.min_value == (1 if clamp else None)


def _tail_bound(scale: Fraction, d: int, beta: float) -> int:
    """min{b >= 0 : d·Pr[|Z| > b] <= β}, Pr[|Z| > b] = 2α^{b+1}/(1+α), α = e^{−1/scale}."""
    alpha = math.exp(-1 / float(scale))
    b = 0
    while d * 2 * alpha ** (b + 1) / (1 + alpha) > beta:
        b += 1
    return b


@pytest.mark.parametrize(("extra", "clamp"), [(0, False), (1, True), (2, False)])
def test_chan_mechanism_declares_calibrates_and_samples_at_k_plus_extra(
    monkeypatch: pytest.MonkeyPatch, extra: int, clamp: bool
) -> None:
    """Built here (the registered chan_topk / chan_pmg are built at import): Δ = k + extra."""
    mech = chan_mechanism("chan_x", "Chan x", extra_sensitivity=extra, clamp=clamp, theorem="Thm X")
    assert (mech.name, mech.title, mech.structure, mech.needs_domain) == ("chan_x", "Chan x", L1_K, True)
    assert mech.privacy == PrivacyMap(pure=True, theorem="Thm X") and mech.prepare is counters_of
    k, eps, beta, d = 4, 0.7, 0.1, 30
    domain = declared_domain(range(d))
    request = Request(k, Budget(eps), beta, domain, "n/(k+1)")
    calibration = mech.calibrate(request)
    delta = k + extra
    assert calibration.noise == delta
    assert calibration.parameters == (
        ("scale", f"{delta}/eps"),
        ("clamp_at_zero", clamp),
        ("k", k),
        DOMAIN_SCOPE,
    )
    b = _tail_bound(Fraction(delta) / exact(eps), d, beta)
    bound = calibration.error_bound
    assert (bound.below, bound.above, bound.beta, bound.sketch_term) == (2.0 * b, float(b), beta, "n/(k+1)")
    assert bound.systematic == 0.0
    calls = _spy_top_k(monkeypatch, chan_module, [(7, 12)])
    rng = SeededRandomSource(2)
    out = mech.sample({7: 11, 8: 0, 9: 2}, request, calibration, rng)
    assert out == ((7, 12),)
    (call,) = calls
    assert call.values == {7: 11, 9: 2} and call.domain is domain and call.k == k and call.rng is rng
    assert call.scale == Fraction(delta) / exact(eps) and call.min_value == (1 if clamp else None)


def test_pure_topk_values_noise_at_2_den_over_eps_and_round_half_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lattice values v/den (den = k + 1 = 4) are rounded to the nearest integer, halves up."""
    lattice = [-3, -2, -1, 1, 2, 3, 5, 6, 7, 10]
    calls = _spy_top_k(monkeypatch, pure_module, [(x, v) for x, v in enumerate(lattice)])
    rng = SeededRandomSource(3)
    domain = declared_domain(range(20))
    out = pure_topk_values({1: 6, 2: 13}, 4, 0.7, 3, domain, rng)
    expected = [math.floor(Fraction(v, 4) + Fraction(1, 2)) for v in lattice]
    assert expected == [-1, 0, 0, 0, 1, 1, 1, 2, 2, 3]
    assert out == tuple(enumerate(expected)) and all(type(v) is int for _, v in out)
    (call,) = calls
    assert call.values == {1: 6, 2: 13} and call.domain is domain and call.k == 3 and call.rng is rng
    assert call.scale == Fraction(8) / exact(0.7) and call.min_value is None


@pytest.mark.parametrize(("k", "partitions"), [(3, 1), (6, 4)])
def test_pure_topk_calibration_is_section_6_on_the_k_plus_1_lattice(k: int, partitions: int) -> None:
    mech = pure_module.MECHANISM
    eps, beta, d = 0.7, 0.05, 50
    domain = declared_domain(range(d))
    request = Request(k, Budget(eps), beta, domain, "S", partitions=partitions)
    calibration = mech.calibrate(request)
    den = k + 1
    assert calibration.parameters == (
        ("scale", f"2/eps on the 1/{den} lattice"),
        ("k", k),
        ("partitions", partitions),
        DOMAIN_SCOPE,
    )
    b = _tail_bound(2 * den / exact(eps), d, beta)
    bound = calibration.error_bound
    assert bound.below == 2 * b / den + 0.5 and bound.above == b / den + 0.5
    assert (bound.beta, bound.sketch_term, bound.systematic) == (beta, "S", 1.0)


def test_pure_topk_prepares_alg3_and_samples_its_lattice(monkeypatch: pytest.MonkeyPatch) -> None:
    mech = pure_module.MECHANISM
    k = 3
    mg = MisraGries(k)
    mg.update_batch([1] * 9 + [2] * 5 + [3] * 2 + [4])
    counters = mg.counters()
    total = sum(counters.values())
    reduced = mech.prepare(mg)
    assert isinstance(reduced, ReducedSketch) and reduced.denominator == k + 1
    assert dict(reduced.numerators) == {
        x: c * (k + 1) - total for x, c in counters.items() if c * (k + 1) > total
    }
    assert mech.prepare(reduced) is reduced  # partition releases pass a reduced sketch
    again = reduce_sensitivity(mg)
    assert mech.prepare(again) is again
    calls = _spy_top_k(monkeypatch, pure_module, [(1, 20)])
    domain = declared_domain(range(10))
    request = Request(k, Budget(0.7), 0.05, domain, "S")
    rng = SeededRandomSource(4)
    out = mech.sample(reduced, request, mech.calibrate(request), rng)
    assert out == ((1, 5),)  # 20/4
    (call,) = calls
    assert call.values == dict(reduced.numerators) and call.domain is domain
    assert call.k == k and call.rng is rng and call.scale == Fraction(8) / exact(0.7)


# ---------------------------------------------------------------------------------------------------
# Entry points: release, release_partitions, release_disjoint
# ---------------------------------------------------------------------------------------------------


def _alg1(k: int, items: list) -> MisraGries:
    mg = MisraGries(k)
    mg.update_batch(items)
    return mg


def _partition_sketches() -> list[MisraGries]:
    """k = 3. Alg. 3 (γ = Σc/4): part 0 {1: 9, 2: 4, 3: 1} -> numerators {1: 22, 2: 2}; part 1
    {1: 3, 4: 8, 5: 2} -> {4: 19}."""
    return [_alg1(3, [1] * 9 + [2] * 4 + [3]), _alg1(3, [1] * 3 + [4] * 8 + [5] * 2)]


def test_release_partitions_is_pure_topk_on_the_summed_alg3_values_charged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """§7: Alg. 3 per partition, key-wise sum (22, 19, 2 on the 1/4 lattice), Laplace(2/ε) on the
    declared domain (every draw from the given source, at scale 8/ε lattice units; scripted to 0
    here), top 3 rounded half up: 5.5 -> 6, 4.75 -> 5, 0.5 -> 1. One charge, with epoch and label."""
    parts = _partition_sketches()
    k, eps, d = 3, 0.7, 12
    numerators: dict = {}
    for p in parts:
        counters = p.counters()
        total = sum(counters.values())
        for x, c in counters.items():
            if c * (k + 1) > total:
                numerators[x] = numerators.get(x, 0) + c * (k + 1) - total
    assert numerators == {1: 22, 2: 2, 4: 19}
    rng = SeededRandomSource(5)
    noise = _script(monkeypatch, Fraction(2 * (k + 1)) / exact(eps), rng, [])
    ledger = PrivacyLedger(Budget(2.0), composition="parallel_epochs")
    out = release_partitions(parts, Budget(eps), domain=range(d), rng=rng, epoch=3, ledger=ledger, label="p")
    assert out.items == ((1, 6), (2, 1), (4, 5)) and noise.calls == d
    assert (out.mechanism, out.epsilon, out.delta, out.epoch) == ("pure_topk", eps, 0.0, 3)
    assert dict(out.parameters)["partitions"] == 2
    head = ledger.head
    assert ledger.sequence == 1 and head is not None
    assert (head.budget, head.mechanism, head.epoch, head.label) == (Budget(eps, 0.0), "pure_topk", 3, "p")
    unlabelled = PrivacyLedger(Budget(2.0))
    release_partitions(parts, Budget(eps), domain=range(d), rng=rng, ledger=unlabelled)
    assert unlabelled.head is not None and unlabelled.head.label == "" and unlabelled.head.epoch is None


@pytest.mark.parametrize("entry", ["release", "release_partitions", "release_disjoint"])
def test_bad_rng_and_epoch_are_refused_before_the_charge(entry: str) -> None:
    parts = _partition_sketches()

    def call(**kwargs: object) -> object:
        if entry == "release":
            return release(parts[0], Budget(1.0), domain=range(10), **kwargs)  # type: ignore[arg-type]
        if entry == "release_partitions":
            return release_partitions(parts, Budget(1.0), domain=range(10), **kwargs)  # type: ignore[arg-type]
        return release_disjoint(parts, Budget(1.0), domain=range(10), **kwargs)  # type: ignore[arg-type]

    ledger = PrivacyLedger(Budget(10.0))
    with pytest.raises(TypeError, match=r"^rng must be a RandomSource"):
        call(rng=7, ledger=ledger)
    for bad in ("3", 2.0, True):
        with pytest.raises(TypeError, match=r"^epoch: must be an int"):
            call(epoch=bad, ledger=ledger)
        with pytest.raises(TypeError, match=r"^epoch: must be an int"):
            call(epoch=bad)
    assert ledger.sequence == 0
    out = call(epoch=-4, ledger=ledger, rng=SeededRandomSource(1))  # any int epoch, negative too
    assert out.epoch == -4 and ledger.head is not None and ledger.head.epoch == -4  # type: ignore[attr-defined]


@pytest.mark.parametrize("entry", ["release", "release_disjoint"])
def test_the_ledger_entry_carries_the_label_and_no_label_by_default(entry: str) -> None:
    parts = _partition_sketches()
    run = release if entry == "release" else release_disjoint
    sketch = parts[0] if entry == "release" else parts
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    run(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1), ledger=ledger, label="x")  # type: ignore[operator]
    assert ledger.head is not None and ledger.head.label == "x"
    run(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1), ledger=ledger)  # type: ignore[operator]
    assert ledger.head.label == "" and ledger.sequence == 2


def test_sum_items_adds_per_key_in_the_universe_order() -> None:
    releases = [[("b", 1), (3, 2)], [(3, 5), ("a", 4), (10, 1)], [("b", -2)]]
    assert _sum_items(iter(releases)) == ((3, 7), (10, 1), ("a", 4), ("b", -1))


def test_release_disjoint_sums_str_and_int_keys_in_the_universe_order() -> None:
    """Exact histograms of item-hashed partitions, str and int items: one charge, the per-key sum
    of the partition releases (same source, partition order), ints before strs."""
    parts = []
    for items in ([1] * 300 + ["a"] * 200, [2] * 250 + ["b"] * 220):
        h = ExactHistogram()
        h.update_batch(items)
        parts.append(h)
    ledger = PrivacyLedger(Budget(1.0, 1e-5))
    out = release_disjoint(parts, Budget(1.0, 1e-5), rng=SeededRandomSource(9), ledger=ledger)
    shared = SeededRandomSource(9)
    singles = [release(p, Budget(1.0, 1e-5), beta=0.025, rng=shared) for p in parts]
    assert out.mechanism == singles[0].mechanism == "exact_threshold"
    want: dict = {}
    for single in singles:
        for x, v in single.items:
            want[x] = want.get(x, 0) + v
    assert [x for x, _ in out.items] == [1, 2, "a", "b"] and dict(out.items) == want
    assert ledger.sequence == 1


def test_release_disjoint_states_parallel_composition_in_its_references() -> None:
    parts = _partition_sketches()
    out = release_disjoint(parts, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(2))
    single = release(parts[0], Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(2))
    assert out.relation.references == (
        *single.relation.references,
        "parallel composition over partitions (McSherry 2009)",
    )


def _systematic_mechanism(name: str) -> Mechanism:
    """A test mechanism that accepts every build without a domain, states no noise error, and
    subtracts the sketch term from every value (systematic coefficient 1), like Alg. 3 does."""

    def calibrate(request: Request) -> Calibration:
        bound = ErrorBound(0.0, 0.0, request.beta, request.sketch_term, "test", systematic=1.0)
        return Calibration(bound, (("k", request.k),))

    def sample(counts: dict, request: Request, calibration: Calibration, rng: object) -> tuple:
        return tuple(sorted(counts.items()))

    return Mechanism(
        name=name,
        title="test",
        structure=Structure(lambda g: True, "anything"),
        calibrate=calibrate,
        sample=sample,
        privacy=PrivacyMap(pure=False, theorem="test"),
    )


@pytest.mark.parametrize("keys_disjoint", [True, False])
def test_release_disjoint_auto_weighs_n_bound_once_per_partition_that_adds_to_an_item(
    monkeypatch: pytest.MonkeyPatch, keys_disjoint: bool
) -> None:
    """auto with a public n_bound per partition: a mechanism that subtracts S = n/(k+1) costs
    n_bound/(k+1) when an item's value comes from its one partition (keys disjoint), P·n_bound/(k+1)
    when the P partitions' values are summed; the others cost their stated noise error."""
    parts = [_alg1(4, [1] * 40 + [2] * 30 + list(range(3, 30))) for _ in range(3)]
    count, k = len(parts), 4
    budget = Budget(1.0, 1e-6)
    best = min(
        release_disjoint(parts, budget, mechanism=name, keys_disjoint=keys_disjoint).error_bound.noise_error
        for name in ("pmg", "pmg_standard", "gshm", "laplace_threshold")
    )
    monkeypatch.setitem(registry._REGISTRY, "test_systematic", _systematic_mechanism("test_systematic"))
    per_item = 1 if keys_disjoint else count
    # the systematic mechanism wins iff per_item·n_bound/(k+1) < best
    wins = math.ceil(best * (k + 1) / per_item) - 1
    loses = math.ceil(best * (k + 1) / per_item)
    assert wins * per_item / (k + 1) < best <= loses * per_item / (k + 1)
    assert wins * 2 / (k + 1) >= best or not keys_disjoint  # counted twice, it would lose

    def pick(n_bound: int | None) -> str:
        out = release_disjoint(
            parts, budget, keys_disjoint=keys_disjoint, n_bound=n_bound, rng=SeededRandomSource(1)
        )
        return out.mechanism

    assert pick(wins) == "test_systematic"
    assert pick(loses) != "test_systematic"
    assert pick(None) != "test_systematic"  # without n_bound S is unbounded: never preferred


# ---------------------------------------------------------------------------------------------------
# Refusals naming the parameter, all before the charge
# ---------------------------------------------------------------------------------------------------


@dataclass
class FakeSketch:
    """Only the public facts ``release`` reads: build, k, m and a counters method (optional)."""

    build: object = Build.ALG1_SEQUENTIAL
    k: object = 4


class _Counters:
    def counters(self) -> dict:
        return {1: 5, 2: 3}


@dataclass
class FakeWithCounters(FakeSketch, _Counters):
    pass


@dataclass
class NoK(_Counters):
    build: object = Build.ALG1_SEQUENTIAL


@dataclass
class NoBuild(_Counters):
    k: object = 4


@dataclass
class UserLevel(_Counters):
    build: object = Build.PAMG
    k: object = 4


@dataclass
class UserLevelWithM(UserLevel):
    m: object = 0


@pytest.mark.parametrize(
    "sketch",
    [
        FakeSketch(),  # no counters method
        NoK(),
        NoBuild(),
        FakeWithCounters(k="4"),
        FakeWithCounters(k=4.0),
        FakeWithCounters(build="ALG1_SEQUENTIAL"),
        FakeWithCounters(build=None),
        {1: 2},
    ],
    ids=["no-counters", "no-k", "no-build", "str-k", "float-k", "str-build", "no-build-value", "dict"],
)
def test_a_non_sketch_is_a_type_error_before_the_charge(sketch: object) -> None:
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    with pytest.raises(TypeError, match=r"^sketch must be a privstream Misra-Gries-type sketch"):
        release(sketch, Budget(1.0, 1e-6), mechanism="pmg", ledger=ledger)
    with pytest.raises(TypeError, match=r"^sketch must be a privstream Misra-Gries-type sketch"):
        release_disjoint([sketch], Budget(1.0, 1e-6), ledger=ledger)
    assert ledger.sequence == 0


@pytest.mark.parametrize(("k", "error"), [(0, ValueError), (-2, ValueError), (True, TypeError)])
def test_a_bad_sketch_k_is_refused_naming_sketch_k(k: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^sketch\.k: must be an int >= 1"):
        release(FakeWithCounters(k=k), Budget(1.0, 1e-6), mechanism="pmg")


@pytest.mark.parametrize(
    "sketch", [UserLevel(), UserLevelWithM(), UserLevelWithM(m="2"), UserLevelWithM(m=-1)]
)
def test_a_user_level_sketch_without_a_positive_int_m_is_not_applicable(sketch: object) -> None:
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    with pytest.raises(MechanismNotApplicable, match=r"needs a bound m .*; m: must be an int >= 1"):
        release(sketch, Budget(1.0, 1e-6), ledger=ledger)
    assert ledger.sequence == 0


@pytest.mark.parametrize("beta", [0, 0.0, 1, 1.0, 1.5, -0.1, "0.5", True, None])
def test_beta_outside_the_open_unit_interval_is_a_value_error(
    monkeypatch: pytest.MonkeyPatch, beta: object
) -> None:
    """Refused by the entry point itself, before the charge: also for a mechanism whose
    calibration does not check β, and for partitions calibrated at β/P (β = 1 would give 1/P)."""
    monkeypatch.setitem(registry._REGISTRY, "test_systematic", _systematic_mechanism("test_systematic"))
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    sketch = _alg1(4, [1, 1, 2])
    for mechanism in ("auto", "test_systematic"):
        with pytest.raises(ValueError, match=r"^beta must lie in \(0, 1\)"):
            release(sketch, Budget(1.0, 1e-6), beta=beta, mechanism=mechanism, ledger=ledger)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^beta must lie in \(0, 1\)"):
            release_disjoint(
                [sketch, sketch], Budget(1.0, 1e-6), beta=beta, mechanism=mechanism, ledger=ledger
            )  # type: ignore[arg-type]
    assert ledger.sequence == 0


@pytest.mark.parametrize("value", [0, 2.0, "2", None])
def test_group_size_must_be_a_positive_int_value_error(value: object) -> None:
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    with pytest.raises(ValueError, match=r"^group_size: must be an int >= 1"):
        release(_alg1(4, [1, 1, 2]), Budget(1.0, 1e-6), group_size=value, ledger=ledger)  # type: ignore[arg-type]
    assert ledger.sequence == 0


@pytest.mark.parametrize("value", [-1, 2.0, "5", True])
def test_n_bound_must_be_a_non_negative_int_value_error(value: object) -> None:
    ledger = PrivacyLedger(Budget(10.0, 1e-3))
    with pytest.raises(ValueError, match=r"^n_bound: must be an int >= 0"):
        release(_alg1(4, [1, 1, 2]), Budget(1.0, 1e-6), n_bound=value, ledger=ledger)  # type: ignore[arg-type]
    assert ledger.sequence == 0


def test_n_bound_zero_is_a_valid_public_bound() -> None:
    out = release(_alg1(4, [1] * 30 + [2] * 5), Budget(1.0, 1e-6), n_bound=0, rng=SeededRandomSource(1))
    assert out.mechanism in ("pmg", "pmg_standard", "gshm", "laplace_threshold")


def test_release_auto_weighs_n_bound_against_a_mechanism_that_subtracts_the_sketch_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """release(): auto_key with n_bound is (noise error + systematic·n_bound/(k+1), systematic)."""
    sketch = _alg1(4, [1] * 40 + [2] * 30 + list(range(3, 30)))
    k, budget = 4, Budget(1.0, 1e-6)
    best = min(
        release(sketch, budget, mechanism=name).error_bound.noise_error
        for name in ("pmg", "pmg_standard", "gshm", "laplace_threshold")
    )
    monkeypatch.setitem(registry._REGISTRY, "test_systematic", _systematic_mechanism("test_systematic"))
    wins = math.ceil(best * (k + 1)) - 1
    assert wins / (k + 1) < best <= (wins + 1) / (k + 1)
    rng = SeededRandomSource(1)
    assert release(sketch, budget, n_bound=wins, rng=rng).mechanism == "test_systematic"
    assert release(sketch, budget, n_bound=wins + 1, rng=rng).mechanism != "test_systematic"
    assert release(sketch, budget, rng=rng).mechanism != "test_systematic"


def test_group_size_is_a_parameter_only_when_above_one() -> None:
    sketch = _alg1(4, [1] * 30 + [2] * 5)
    one = release(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1))
    two = release(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1), group_size=2)
    assert "group_size" not in dict(one.parameters) and one.relation.group_size == 1
    assert two.parameters[-1] == ("group_size", 2) and "group_size" not in dict(two.parameters[:-1])
