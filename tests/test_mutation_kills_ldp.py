"""The LDP randomisers' exact output law, read off a scripted random source (no statistics).

Written for the mutation run of issue 23 (``python benchmarks/mutation.py ldp``). A statistical test
cannot see an off-by-one in GRR's comparison ``u < a`` (it moves 2^-40 of probability), yet that is a
different mechanism than the one whose ε is reported. Here every randomiser draws from a
:class:`Scripted` source that returns chosen values of ``randbelow`` and records each bound, so:

* GRR's single draw has the bound W = a + b(d−1), with a/b (b = 2^40) the largest such ratio
  <= e^ε, computed here independently with 400-digit :mod:`decimal` arithmetic;
* u < a keeps the value and u in [a + jb, a + (j+1)b) reports the j-th other value (the value
  itself skipped), at every boundary: so p = a/W and q = b/W exactly, p/q = a/b <= e^ε;
* OLH hashes with a in [1, P) and c in [0, P) (P = 2^31 − 1) and g = round(e^ε) + 1 buckets;
* HR's column is uniform over [0, K) among those of the chosen side (K the power of two > d).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from privstream.ldp import SCHEMES, HgLdpParams, PublicState, make_client
from privstream.ldp.grr import GeneralizedRandomizedResponse, rational_exp_lower
from privstream.ldp.hadamard import HadamardResponse
from privstream.ldp.olh import PRIME, OptimisedLocalHashing
from privstream.noise import SeededRandomSource
from tests.test_continual_pcc import CountingSource

B = 1 << 40


class Scripted:
    """A RandomSource returning scripted ``randbelow`` values (in order) and recording the bounds."""

    def __init__(self, values: list[int]) -> None:
        self.values = list(values)
        self.bounds: list[int] = []

    def randbelow(self, n: int) -> int:
        self.bounds.append(n)
        v = self.values.pop(0)
        assert 0 <= v < n, (v, n)
        return v

    def randbits(self, n: int) -> int:
        raise AssertionError("the randomisers draw with randbelow only")


def exp_numerator(epsilon: Fraction | int | float | Decimal) -> int:
    """floor(e^ε · 2^40), from a 400-digit Decimal e^ε (independent of rational_exp_lower); a
    Decimal ε is read exactly (Fraction(Decimal) is exact)."""
    with localcontext() as ctx:
        ctx.prec = 400
        eps = Decimal(Fraction(epsilon).numerator) / Decimal(Fraction(epsilon).denominator)
        return int((eps.exp() * B).to_integral_value(rounding=ROUND_FLOOR))


@pytest.mark.parametrize("epsilon", [Fraction(1, 2), 1, 2.5, Fraction(7, 3), 10, 90, Fraction(601, 2), 700])
def test_rational_exp_lower_is_the_largest_ratio_not_above_e_to_the_epsilon(epsilon: object) -> None:
    ratio = rational_exp_lower(epsilon)  # type: ignore[arg-type]
    top = exp_numerator(epsilon)  # type: ignore[arg-type]
    assert ratio.denominator * (B // ratio.denominator) == B
    a = ratio.numerator * (B // ratio.denominator)
    # a/2^40 <= e^ε (a lower bound, the privacy side) and at most a few units below the largest
    assert a <= top and top - a <= 2
    assert rational_exp_lower(epsilon, 20) == Fraction(exp_numerator(epsilon) >> 20, 1 << 20)  # type: ignore[arg-type]


def epsilon_near(numerator: int, offset: str) -> Decimal:
    """A 200-digit Decimal ε with e^ε · 2^40 = numerator + offset (to 10^-150): ε = ln((N + s)/2^40)
    at 300 digits. Decimal ε is exact input for rational_exp_lower, so the test can place e^ε · 2^40
    as close to an integer as it likes (no float ε gets within 10^-9 of one)."""
    with localcontext() as ctx:
        ctx.prec = 300
        eps = ((Decimal(numerator) + Decimal(offset)) / B).ln()
        ctx.prec = 200
        return +eps


N_E = 2988782477962  # ⌊e · 2^40⌋: e^ε ≈ e, so rational_exp_lower works at 60 digits


def test_rational_exp_lower_stays_below_e_to_the_epsilon_just_under_a_representable_ratio() -> None:
    """e^ε · 2^40 = N − 10^-50: the 60-digit exp rounds to exactly N/2^40 (an exactly representable
    decimal), so only a margin that moves the value by more than rounding keeps a = N − 1, the
    largest ratio below e^ε. Kills an added margin and one below the working precision (whose
    subtraction rounds back to N/2^40): both return N/2^40 > e^ε, a privacy loss."""
    eps = epsilon_near(N_E, "-1e-50")
    assert exp_numerator(eps) == N_E - 1  # the independent 400-digit floor
    assert rational_exp_lower(eps) == Fraction(N_E - 1, B)


def test_rational_exp_lower_keeps_the_largest_ratio_above_an_integer_by_more_than_its_margin() -> None:
    """e^ε · 2^40 = N + 10^-42, about three times the margin (a relative 10^-(p-5) = 10^-55 of
    N ≈ 3·10^12, i.e. 3·10^-43): the largest ratio N/2^40 is returned. A margin ten times larger
    (3·10^-42) would give N − 1: still private, but not the ratio the docstring promises."""
    eps = epsilon_near(N_E, "1e-42")
    assert exp_numerator(eps) == N_E
    assert rational_exp_lower(eps) == Fraction(N_E, B)


def test_rational_exp_lower_is_one_unit_less_within_its_margin_above_an_integer() -> None:
    """e^ε · 2^40 = N + 10^-43, a third of the margin (3·10^-43 at p = 60 digits): the documented
    one unit less, N − 1. The margin is a relative 10^-(p−5) of the working precision p = 60 + ⌊ε⌋/2;
    a working precision one digit larger would shrink it tenfold and return N."""
    eps = epsilon_near(N_E, "1e-43")
    assert exp_numerator(eps) == N_E
    assert rational_exp_lower(eps) == Fraction(N_E - 1, B)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), 701])
def test_rational_exp_lower_refuses_non_positive_non_finite_and_huge_epsilon(bad: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        rational_exp_lower(bad)


def test_rational_exp_lower_refuses_non_numbers() -> None:
    for bad in (True, "1", None):
        with pytest.raises(TypeError, match="epsilon"):
            rational_exp_lower(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epsilon", "d"), [(1, 2), (Fraction(3, 2), 5), (4, 9)])
def test_grr_output_at_every_boundary_of_its_one_draw(epsilon: object, d: int) -> None:
    grr0 = GeneralizedRandomizedResponse(epsilon, d)  # type: ignore[arg-type]
    a = grr0.weight_true  # within 2 units of floor(e^ε·2^40) (previous test); the exact a used
    assert abs(a - exp_numerator(epsilon)) <= 2  # type: ignore[arg-type]
    assert grr0.weight_other == B
    W = a + B * (d - 1)
    assert grr0.total_weight == W
    assert grr0.p == Fraction(a, W) and grr0.q == Fraction(B, W)
    assert grr0.effective_epsilon == pytest.approx(math.log(a / B), rel=1e-12)
    assert grr0.effective_epsilon <= float(Fraction(epsilon)) + 1e-15  # type: ignore[arg-type]
    for index in range(d):
        others = [v for v in range(d) if v != index]
        cases = [(0, index), (a - 1, index)]
        for j, other in enumerate(others):
            cases += [(a + j * B, other), (a + (j + 1) * B - 1, other)]
        for u, want in cases:
            source = Scripted([u])
            grr = GeneralizedRandomizedResponse(epsilon, d, rng=source)  # type: ignore[arg-type]
            assert grr.randomise_index(index) == want, (index, u)
            assert source.bounds == [W]


def test_grr_on_an_item_domain_reports_the_index_of_the_item() -> None:
    items = ["x", 3, "y"]
    a = GeneralizedRandomizedResponse(2, items).weight_true
    keep = GeneralizedRandomizedResponse(2, items, rng=Scripted([0]))
    assert keep.decode_index(keep.encode("y")) == 2
    move = GeneralizedRandomizedResponse(2, items, rng=Scripted([a]))
    assert move.decode_index(move.encode(3)) == 0
    assert move.index_of(3) == 1 and move.index_of("x") == 0
    with pytest.raises(ValueError, match="withheld"):
        move.index_of("3")


@pytest.mark.parametrize("bad", [1, 0, True, [1], [1, 1], [1, True], [1.5, 2]])
def test_grr_refuses_degenerate_domains(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="domain"):
        GeneralizedRandomizedResponse(1, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epsilon", "g"), [(1, 4), (2, 8), (Fraction(1, 10), 2), (3, 21)])
def test_olh_hash_draws_and_bucket_count(epsilon: object, g: int) -> None:
    # g = round(e^ε) + 1 (at least 2): e = 2.718 -> 4, e^2 = 7.39 -> 8, e^0.1 = 1.1 -> 2, e^3 = 20.09 -> 21
    olh = OptimisedLocalHashing(epsilon, 50)  # type: ignore[arg-type]
    assert olh.g == g
    a_hash, c_hash = 5, 11
    for value in (0, 17, 49):
        bucket = ((a_hash * value + c_hash) % PRIME) % g
        inner = olh._grr.weight_true  # keep the bucket
        source = Scripted([a_hash - 1, c_hash, inner - 1])
        o = OptimisedLocalHashing(epsilon, 50, rng=source)  # type: ignore[arg-type]
        assert o.randomise(value) == (a_hash, c_hash, bucket)
        assert source.bounds == [PRIME - 1, PRIME, o._grr.total_weight]
        assert o._grr.total_weight == o._grr.weight_true + (g - 1) * B


@pytest.mark.parametrize("d", [3, 7, 8, 12])
def test_hr_column_is_drawn_from_the_chosen_side(d: int) -> None:
    K = 1 << d.bit_length()
    assert K > d and K // 2 <= d
    hr0 = HadamardResponse(1, d)
    a = hr0._grr.weight_true
    for value in range(d):
        row = value + 1
        for inside, u in ((True, 0), (False, a)):
            for j in range(K):
                source = Scripted([u, j])
                hr = HadamardResponse(1, d, rng=source)
                col = hr.randomise(value)
                assert source.bounds == [hr._grr.total_weight, K]
                assert 0 <= col < K
                # the column is on the chosen side: H[row, col] = +1 (even parity) iff inside
                assert ((row & col).bit_count() % 2 == 0) == inside
                # and it is j itself when j is on that side, else j with the lowest bit of row flipped
                if ((row & j).bit_count() % 2 == 0) == inside:
                    assert col == j
                else:
                    assert col == j ^ (row & -row)


HG_D, HG_K, HG_EPS, HG_ALPHA = 10, 3, 1.5, Fraction(1, 3)
HG_HOT = (2, 5, 7)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_hg_reports_carry_the_state_they_were_randomised_against(scheme: str) -> None:
    params = HgLdpParams(scheme, HG_EPS, HG_D, HG_K, alpha=HG_ALPHA)
    for state in (PublicState(7, HG_HOT, False, run_id=b"run-a"), PublicState(3, HG_HOT, True, run_id=b"b")):
        client = make_client(params, rng=SeededRandomSource(11))
        twin = make_client(params, rng=SeededRandomSource(11))
        client.update_state(state)
        for value in (0, 2, 9):
            report = client.encode(value)
            assert report.state_version == state.version
            assert report.state_digest == state.digest and report.state_digest != b""
            # the payload is the randomised output for this state, big-endian in the client's width
            want = twin.randomise(value, state)
            assert report.payload == want.to_bytes(max(1, (HG_D.bit_length() + 7) // 8), "big")


def test_an_hg_report_without_a_state_read_has_version_zero_and_no_digest() -> None:
    client = make_client(HgLdpParams("bgr", HG_EPS, HG_D, HG_K, alpha=HG_ALPHA), rng=SeededRandomSource(2))
    report = client.encode(4)
    assert report.state_version == 0 and report.state_digest == b""


@pytest.mark.parametrize("scheme", ["dsr", "bdr", "cnr"])
def test_state_dependent_hg_clients_need_a_state_read(scheme: str) -> None:
    client = make_client(HgLdpParams(scheme, HG_EPS, HG_D, HG_K, alpha=HG_ALPHA), rng=SeededRandomSource(2))
    with pytest.raises(RuntimeError, match="state"):
        client.encode(4)


def test_hr_domain_limit_and_report_width() -> None:
    assert HadamardResponse(1, (1 << 31) - 1).K == 1 << 31
    with pytest.raises(ValueError, match="domain_size"):
        HadamardResponse(1, 1 << 31)
    # d = 100: K = 128, columns 0..127 fit one byte; d = 300: K = 512, columns need two bytes
    for d, width in ((100, 1), (300, 2), (3, 1)):
        hr0 = HadamardResponse(1, d)
        K = 1 << d.bit_length()
        assert hr0.K == K
        source = Scripted([0, K - 1])
        hr = HadamardResponse(1, d, rng=source)
        report = hr.encode(0)
        assert len(report.payload) == width
        assert int.from_bytes(report.payload, "big") in (K - 1, (K - 1) ^ 1)


def test_olh_limits_and_public_parameters() -> None:
    olh = OptimisedLocalHashing(2, PRIME - 1)  # the largest domain: items must be below P
    assert olh.parameters["g"] == "8" and olh.parameters["domain_size"] == str(PRIME - 1)
    with pytest.raises(ValueError, match="domain_size"):
        OptimisedLocalHashing(2, PRIME)
    # g = round(e^ε) + 1 must stay below P: ε = ln(P − 1) gives g = P exactly, which is refused
    with pytest.raises(ValueError, match="epsilon"):
        OptimisedLocalHashing(math.log(PRIME - 1), 10)
    assert OptimisedLocalHashing(math.log(PRIME - 2), 10).g == PRIME - 1


@pytest.mark.parametrize("scheme", SCHEMES)
def test_hg_clients_draw_from_the_injected_source(scheme: str) -> None:
    source = CountingSource(5)
    client = make_client(HgLdpParams(scheme, HG_EPS, HG_D, HG_K, alpha=HG_ALPHA), rng=source)
    state = PublicState(1, HG_HOT, False)
    client.update_state(state)
    for value in range(HG_D):
        before = source.calls
        client.encode(value)
        assert source.calls > before
    # randomise(index, None) uses the state read last
    twin = make_client(HgLdpParams(scheme, HG_EPS, HG_D, HG_K, alpha=HG_ALPHA), rng=SeededRandomSource(8))
    again = make_client(HgLdpParams(scheme, HG_EPS, HG_D, HG_K, alpha=HG_ALPHA), rng=SeededRandomSource(8))
    again.update_state(state)
    assert [again.randomise(v, None) for v in range(HG_D)] == [twin.randomise(v, state) for v in range(HG_D)]


def test_grr_index_of_on_int_and_item_domains() -> None:
    sized = GeneralizedRandomizedResponse(1, 4)
    assert [sized.index_of(v) for v in (0, 3, np.int64(2))] == [0, 3, 2]
    for bad in (True, False, -1, 4, 1.0, "1"):
        with pytest.raises(ValueError, match="withheld"):
            sized.index_of(bad)  # type: ignore[arg-type]
    items = GeneralizedRandomizedResponse(1, [1, 5, "x"])
    assert items.index_of(np.int64(5)) == 1 and items.index_of(5) == 1 and items.index_of("x") == 2
    with pytest.raises(ValueError, match="withheld"):
        items.index_of(True)


def test_grr_public_parameters_name_an_item_domain_only() -> None:
    sized = GeneralizedRandomizedResponse(1, 4)
    assert sized.domain is None and "domain_digest" not in sized.parameters
    assert sized.parameters["domain_size"] == "4"
    assert sized.parameters["epsilon_ratio"] == f"{sized.weight_true}/{B}"
    assert sized.parameters["effective_epsilon"] == repr(math.log(sized.weight_true) - math.log(B))
    items = GeneralizedRandomizedResponse(1, ["a", 2])
    assert items.domain == ("a", 2) and len(items.parameters["domain_digest"]) == 32


@pytest.mark.parametrize(("d", "width"), [(2, 1), (256, 1), (257, 2), (65536, 2), (65537, 3)])
def test_grr_report_width_is_the_bytes_of_the_largest_index(d: int, width: int) -> None:
    grr = GeneralizedRandomizedResponse(Fraction(1, 2), d, rng=SeededRandomSource(1))
    assert grr.epsilon == Fraction(1, 2)
    report = grr.encode(d - 1)
    assert len(report.payload) == width
    assert grr.decode_index(report) < d


@pytest.mark.parametrize(("d", "width"), [(10, 1), (255, 1), (256, 2), (300, 2)])
def test_hg_report_width_holds_every_output_and_bottom(d: int, width: int) -> None:
    """Outputs are item indices 0..d−1 or d for ⊥, written big-endian in the fewest bytes holding d."""
    client = make_client(HgLdpParams("bgr", HG_EPS, d, HG_K, alpha=HG_ALPHA), rng=SeededRandomSource(4))
    client.update_state(PublicState(1, (0, 1, 2), False))
    for value in (0, d - 1):
        report = client.encode(value)
        assert len(report.payload) == width
        assert int.from_bytes(report.payload, "big") <= d


# ---- HgLdpParams: the parameters the HG-LDP randomisers are built from ----------------------------

HG_BASE = dict(scheme="cnr", epsilon=1.0, domain_size=10, k=2)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"epsilon": "x"}, TypeError, "epsilon: expected a real number"),
        ({"epsilon": 0}, ValueError, "epsilon: must be > 0, got 0"),
        ({"epsilon": 1e-13}, ValueError, "epsilon: too small (e^epsilon rounds to 1"),
        ({"alpha": 1e-13}, ValueError, "epsilon1: too small (e^epsilon1 rounds to 1"),
        ({"alpha": 1 - 1e-13}, ValueError, "epsilon2: too small (e^epsilon2 rounds to 1"),
        ({"k": 1}, ValueError, "k: must be an int >= 2, got 1"),
        ({"domain_size": 1}, ValueError, "domain_size: must be an int >= 2, got 1"),
        ({"domain_size": 3}, ValueError, "domain_size: must be >= k + 2 = 4"),
        ({"alpha": "x"}, TypeError, "alpha: expected a real number"),
        ({"decay_base": "x"}, TypeError, "decay_base: expected a real number"),
        ({"light_cells": 0}, ValueError, "light_cells: must be an int >= 1, got 0"),
    ],
)
def test_hg_params_refuse_each_bad_parameter_by_name(changes: dict, error: type, message: str) -> None:
    """Each split budget is checked under its own name: ε₁ = αε and ε₂ = (1 − α)ε must each leave a
    ratio e^ε above 1 at 2^-40, or that branch's randomiser would not randomise."""
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        HgLdpParams(**{**HG_BASE, **changes})  # type: ignore[arg-type]


def test_hg_params_accept_the_bounds_and_store_exact_rationals() -> None:
    assert HgLdpParams(**{**HG_BASE, "k": 2, "domain_size": 4}).domain_size == 4  # d = k + 2 is enough
    assert HgLdpParams(**{**HG_BASE, "light_cells": 1}).light_cells == 1  # CNR needs one light cell
    p = HgLdpParams(**{**HG_BASE, "alpha": 0.25, "decay_base": 1.5})
    assert (p.alpha, p.decay_base) == (Fraction(1, 4), Fraction(3, 2))
    assert type(p.alpha) is Fraction and type(p.decay_base) is Fraction


# ---- int_domain.py: the private-value check and the inner GRR of OLH and HR ------------------------


@pytest.mark.parametrize("make", [lambda: OptimisedLocalHashing(1, 10), lambda: HadamardResponse(1, 10)])
def test_only_int_items_of_the_domain_are_randomised_and_the_value_is_withheld(make: object) -> None:
    """0..d−1 only (d = 10), ints only (a bool is not an item); the refusal never echoes the value."""
    oracle = make()  # type: ignore[operator]
    for value in (0, 9):
        oracle.encode(value)
    for bad in (-1, 10, True, False, 1.0, "1", None):
        with pytest.raises(ValueError) as info:
            oracle.encode(bad)
        assert str(info.value) == "value: not in the domain 0..9 (value withheld)"


def test_the_inner_grr_has_the_schemes_size_ratio_and_source() -> None:
    """OLH: one exact GRR on g = round(e^ε) + 1 hash values; HR: on 2 values (the side). Its exact
    ratio a/2^40 = rational_exp_lower(ε) is the public parameter the server checks, its ε the
    effective ε stated, and it draws from the oracle's injected source (two oracles seeded alike
    report alike; another seed, other reports)."""
    for oracle, size in ((OptimisedLocalHashing(1.5, 50), 5), (HadamardResponse(1.5, 50), 2)):
        ratio = rational_exp_lower(1.5)
        assert oracle._grr.d == size
        assert oracle.ratio == ratio and oracle.ratio <= Fraction(math.exp(1.5))
        assert oracle.parameters["epsilon_ratio"] == f"{ratio.numerator}/{ratio.denominator}"
        assert oracle.parameters["domain_size"] == "50"
        assert oracle.effective_epsilon == pytest.approx(math.log(ratio), abs=1e-15)
        assert oracle.parameters["effective_epsilon"] == repr(oracle.effective_epsilon)

    def reports(make: type, seed: int) -> list[bytes]:
        oracle = make(1.5, 50, rng=SeededRandomSource(seed))
        return [oracle.encode(v % 50).payload for v in range(60)]

    for make in (OptimisedLocalHashing, HadamardResponse):
        assert reports(make, 4) == reports(make, 4) != reports(make, 5)


@pytest.mark.parametrize("make", [OptimisedLocalHashing, HadamardResponse])
def test_a_domain_of_one_item_is_refused_naming_domain_size(make: type) -> None:
    make(1, 2)
    with pytest.raises(ValueError, match="^domain_size"):
        make(1, 1)


# ---- the vectorised GRR (randomise_indices): the same comparisons on one bulk uniform per report ----

#: ln 2 rounded up (above ln 2 by ~1e-28): a = 2^41 exactly, so d = 2^23 − 1 gives W = 2^40·(d + 1) = 2^63
LN2_UP = Decimal("0.6931471805599453094172321215")


class ScriptedUniforms:
    """Stands in for :func:`privstream.noise.vectorised.uniform_below` in ``privstream.ldp.grr``:
    returns the scripted uniforms and records (bound, count, source) of each call."""

    def __init__(self, values: list[int]) -> None:
        self.values = values
        self.calls: list[tuple[int, int, object]] = []

    def __call__(self, bound: int, count: int, rng: object) -> np.ndarray:
        self.calls.append((bound, count, rng))
        assert count == len(self.values) and all(0 <= u < bound for u in self.values)
        return np.array(self.values, dtype=np.int64)


def _boundary_draws(a: int, W: int, index: int) -> list[int]:
    """u at both sides of every boundary around ``index`` and at the ends: 0, a − 1 (kept), a, a + B − 1
    (first other), a + (index − 1)·B … a + index·B (the skip over the value itself), W − 1 (last)."""
    cases = {0, a - 1, a, a + B - 1, a + B, W - 1}
    for j in (index - 1, index, index + 1):
        cases |= {a + j * B - 1, a + j * B}
    return sorted(u for u in cases if 0 <= u < W)


@pytest.mark.parametrize(
    ("epsilon", "d"), [(1, 2), (Fraction(3, 2), 5), (4, 9), (LN2_UP, 2**23 - 1)], ids=str
)
def test_vectorised_grr_maps_each_draw_exactly_as_the_scalar_grr(
    epsilon: object, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """randomise_indices draws ONE uniform u < W per report (one bulk call with bound W and the
    randomiser's own source) and maps it exactly as randomise_index maps its one randbelow draw:
    checked at every boundary u ∈ {a − 1, a, a + jB − 1, a + jB, W − 1} for the first, second,
    middle and last index. The last case has W = 2^63 exactly, the largest bound drawn in bulk (no
    scalar randbelow: its source refuses every draw), with int64 arithmetic at its top."""
    import privstream.ldp.grr as grr_module

    probe = GeneralizedRandomizedResponse(epsilon, d)  # type: ignore[arg-type]
    a, W = probe.weight_true, probe.total_weight
    if d == 2**23 - 1:
        assert (a, W) == (2**41, 2**63)
    indices, draws = [], []
    for index in sorted({0, 1, d // 2, d - 1}):
        for u in _boundary_draws(a, W, index):
            indices.append(index)
            draws.append(u)
    want = [
        GeneralizedRandomizedResponse(epsilon, d, rng=Scripted([u])).randomise_index(i)  # type: ignore[arg-type]
        for i, u in zip(indices, draws, strict=True)
    ]
    fake = ScriptedUniforms(draws)
    monkeypatch.setattr(grr_module, "uniform_below", fake)
    source = Scripted([])  # any scalar draw fails the test
    grr = GeneralizedRandomizedResponse(epsilon, d, rng=source)  # type: ignore[arg-type]
    out = grr.randomise_indices(np.array(indices, dtype=np.int64))
    assert out.dtype == np.int64 and out.tolist() == want
    assert fake.calls == [(W, len(draws), source)] and source.bounds == []


@pytest.mark.parametrize("d", [6, 2**23 + 1])  # W below 2^63 (bulk) and above it (report by report)
def test_vectorised_grr_returns_int64_for_any_integer_input_and_an_empty_batch(d: int) -> None:
    """The output is an int64 array of output indices whatever integer type (or list) the true indices
    come in, with the same outputs as for int64 input from the same seeded source; an empty input
    gives an empty int64 array on both paths."""
    values = [0, 1, 5, 3, 0, 2]
    ref = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(21))
    want = ref.randomise_indices(np.array(values, dtype=np.int64))
    assert want.dtype == np.int64 and want.shape == (len(values),)
    for given in (values, np.array(values, dtype=np.uint64), np.array(values, dtype=np.int32)):
        grr = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(21))
        out = grr.randomise_indices(given)  # type: ignore[arg-type]
        assert out.dtype == np.int64 and out.tolist() == want.tolist()
    empty = GeneralizedRandomizedResponse(1.0, d, rng=SeededRandomSource(21)).randomise_indices(
        np.array([], dtype=np.int64)
    )
    assert empty.dtype == np.int64 and empty.shape == (0,)
