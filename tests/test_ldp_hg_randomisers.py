"""HG-LDP clients (docs/ldp.md, "Checks"): exact output distributions and worst-case likelihood
ratios by enumeration, the sampler against them, debias constants, branch on public state only."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.ldp import SCHEMES, HgLdpParams, PublicState, make_client
from privstream.ldp.hg_clients import BdrClient, CnrClient, DsrClient, cold_item, cold_rank
from privstream.noise.rng import CryptoRandomSource, SeededRandomSource

D, K, EPS, ALPHA = 10, 3, 1.5, Fraction(1, 3)
HOT = (2, 5, 7)


def _states() -> list[PublicState]:
    return [PublicState(0, HOT, True), PublicState(1, HOT, False)]


def _worst_ratio(dists: list[dict[int, Fraction]]) -> Fraction:
    outputs = set().union(*dists)
    worst = Fraction(1)
    for y in outputs:
        probs = [dist.get(y, Fraction(0)) for dist in dists]
        assert min(probs) > 0, "an output possible for one input must be possible for all"
        worst = max(worst, max(probs) / min(probs))
    return worst


@pytest.mark.parametrize("scheme", SCHEMES)
def test_exact_distributions_match_the_paper(scheme: str) -> None:
    """Every input, both public states: the distribution sums to exactly 1 and its entries are the
    paper's p/q (GRR), p1 (M1), p2/q2 (M2), p3/q3 (M3) and the wrong-side uniform maps."""
    params = HgLdpParams(scheme, EPS, D, K, alpha=ALPHA)
    client = make_client(params)
    e, e1, e2 = math.exp(EPS), math.exp(EPS / 3), math.exp(2 * EPS / 3)
    p1 = e1 / (e1 + 1)
    cold = [c for c in range(D) if c not in HOT]
    for state in _states():
        for v in range(D):
            dist = client.output_distribution(v, state)
            assert sum(dist.values()) == 1
            got = {y: float(pr) for y, pr in dist.items()}
            if scheme == "bgr" or (scheme == "dsr" and state.weakest_low):
                want = {y: (e if y == v else 1.0) / (e + D - 1) for y in range(D)}
            elif scheme == "dsr":
                x = v if v in HOT else D  # cold inputs become ⊥ (encoded d)
                want = {y: (e if y == x else 1.0) / (e + K) for y in (*HOT, D)}
            else:
                hot_pr = p1 if v in HOT else 1 - p1
                if v in HOT:
                    m2 = {h: (e2 if h == v else 1.0) / (e2 + K - 1) for h in HOT}
                    m3 = {c: 1 / len(cold) for c in cold}
                else:
                    m2 = {h: 1 / K for h in HOT}
                    m3 = {c: (e2 if c == v else 1.0) / (e2 + len(cold) - 1) for c in cold}
                want = {h: hot_pr * pr for h, pr in m2.items()}
                if scheme == "bdr" and not state.weakest_low:
                    want[D] = 1 - hot_pr
                else:
                    want.update({c: (1 - hot_pr) * pr for c, pr in m3.items()})
            assert got.keys() == want.keys()
            for y in want:
                assert got[y] == pytest.approx(want[y], rel=1e-10, abs=0)


@pytest.mark.parametrize(
    ("scheme", "weakest_low", "expected"),
    [
        ("bgr", True, math.exp(1.5)),
        ("dsr", True, math.exp(1.5)),
        ("dsr", False, math.exp(1.5)),
        ("bdr", True, 3.598395),  # evict mode: the full ε1 + ε2 output space
        ("bdr", False, 2.849568),  # ⊥ mode: only ε1 is spent on cold outputs
        ("cnr", True, 3.598395),
        ("cnr", False, 3.598395),
    ],
)
def test_worst_case_likelihood_ratio(scheme: str, weakest_low: bool, expected: float) -> None:
    """d = 10, λ_h = 3, ε = 1.5, α = 1/3 gives ≈ 3.60 (CNR, BDR evicting) and ≈ 2.85
    (BDR ⊥); every ratio is ≤ e^ε' ≤ e^1.5, exactly (fractions)."""
    params = HgLdpParams(scheme, EPS, D, K, alpha=ALPHA)
    client = make_client(params)
    state = PublicState(0, HOT, weakest_low)
    worst = _worst_ratio([client.output_distribution(v, state) for v in range(D)])
    assert float(worst) == pytest.approx(expected, rel=1e-6)
    bound = params.ratio if scheme in ("bgr", "dsr") else params.ratio1 * params.ratio2
    assert worst <= bound and float(bound) <= math.exp(EPS)
    assert params.effective_epsilon <= EPS


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sampler_matches_the_exact_distribution(scheme: str) -> None:
    """Inputs 2 (hot) and 4 (cold), both states, 20k draws each: chi-square against the exact
    distribution at the 1e-4 upper tail (≤ 4 tests per scheme: false-failure rate ≤ 4e-4; seeded)."""
    client = make_client(HgLdpParams(scheme, EPS, D, K, alpha=ALPHA), rng=SeededRandomSource(f"s-{scheme}"))
    for state in _states():
        for v in (2, 4):
            dist = client.output_distribution(v, state)
            outputs = sorted(dist)
            draws = [client.randomise(v, state) for _ in range(20_000)]
            assert set(draws) <= set(outputs)
            observed = np.array([draws.count(y) for y in outputs])
            expected = np.array([float(dist[y]) for y in outputs]) * len(draws)
            if len(outputs) > 1:
                statistic = float(((observed - expected) ** 2 / expected).sum())
                assert statistic < stats.chi2.ppf(1 - 1e-4, df=len(outputs) - 1), (state, v)


def test_branch_depends_only_on_public_state() -> None:
    """BDR/CNR's branch is a function of (state, M1's flag) — no value argument — and
    DSR's of the state; with M1's flag fixed, every input lands in the same output category."""
    params = {s: HgLdpParams(s, EPS, D, K, alpha=ALPHA) for s in SCHEMES}
    bdr, cnr, dsr = BdrClient(params["bdr"]), CnrClient(params["cnr"]), DsrClient(params["dsr"])
    for state in _states():
        assert bdr.branch(state, True) == cnr.branch(state, True) == "m2"
        assert bdr.branch(state, False) == ("m3" if state.weakest_low else "bottom")
        assert cnr.branch(state, False) == "m3"
        for client in (bdr, cnr):
            for flag in (True, False):
                client.m1 = lambda is_hot, flag=flag: flag  # type: ignore[method-assign]
                categories = set()
                for v in range(D):
                    for _ in range(20):
                        y = client.randomise(v, state)
                        categories.add("bottom" if y == D else "hot" if y in HOT else "cold")
                assert categories == {
                    "hot" if flag else {"m3": "cold", "bottom": "bottom"}[client.branch(state, False)]
                }
        supports = {frozenset(dsr.output_distribution(v, state)) for v in range(D)}
        assert supports == {frozenset(range(D)) if state.weakest_low else frozenset((*HOT, D))}
        assert dsr.branch(state) == state.dsr_mode


def test_debias_constants_eps1_d1000() -> None:
    """ε = 1, d = 1000: GRR p = 0.0027136, q = 0.00099828, p − q = 0.0017153, BGR's
    1/(p−q) ≈ 583; BDR's 1/(p1(p2 − q2)) does not depend on d."""
    bgr = HgLdpParams("bgr", 1.0, 1000, 20)
    p, q = bgr.grr_full
    assert float(p) == pytest.approx(0.0027136, abs=5e-8)
    assert float(q) == pytest.approx(0.00099828, abs=5e-9)
    assert float(p - q) == pytest.approx(0.0017153, abs=5e-8)
    assert round(float(1 / (p - q))) == 583
    small, large = HgLdpParams("bdr", 1.0, 1000, 20), HgLdpParams("bdr", 1.0, 10**6, 20)
    assert small.eq2_denominator() == large.eq2_denominator()
    assert float(1 / small.eq2_denominator()) < 40 < 583


def test_gamma_h_sign() -> None:
    """α = 1/3, k = 20: p1·q2 > q1/λ_h, so ∂f̂/∂γ_h = −N(p1q2 − q1/λ_h)/(p1(p2−q2)) < 0:
    lowering γ_h raises every estimate (the offset per report falls)."""
    params = HgLdpParams("bdr", 1.0, 1000, 20)
    p1, q1 = params.m1
    _, q2 = params.m2
    assert p1 * q2 > q1 / 20
    assert params.eq2_offset(Fraction(1, 3)) < params.eq2_offset(Fraction(2, 3))


def test_cold_index_maps_are_inverse() -> None:
    for c in range(D - K):
        assert cold_rank(cold_item(c, HOT), HOT) == c and cold_item(c, HOT) not in HOT
    assert [cold_item(c, HOT) for c in range(D - K)] == [0, 1, 3, 4, 6, 8, 9]


def test_report_carries_state_version_and_no_value() -> None:
    client = make_client(HgLdpParams("cnr", EPS, D, K), rng=SeededRandomSource(3))
    with pytest.raises(RuntimeError, match="state"):
        client.encode(4)
    client.update_state(PublicState(7, HOT, False))
    report = client.encode(4)
    assert report.state_version == 7 and report.scheme == "hg-cnr" and len(report.payload) == 1
    assert client.accepts(report) and 0 <= int.from_bytes(report.payload, "big") < D
    with pytest.raises(ValueError, match="withheld") as info:
        client.encode(12345)
    assert "12345" not in str(info.value)
    with pytest.raises(ValueError, match="state"):
        client.update_state(PublicState(8, (1, 2), False))
    assert isinstance(make_client(HgLdpParams("bgr", EPS, D, K))._rng, CryptoRandomSource)


@pytest.mark.parametrize(
    ("kwargs", "param", "error"),
    [
        ({"scheme": "xyz"}, "scheme", ValueError),
        ({"epsilon": 0}, "epsilon", ValueError),
        ({"epsilon": float("nan")}, "epsilon", ValueError),
        ({"epsilon": "1"}, "epsilon", TypeError),
        ({"epsilon": 1e-14}, "epsilon", ValueError),
        ({"k": 1}, "k", ValueError),
        ({"k": True}, "k", TypeError),
        ({"domain_size": 4}, "domain_size", ValueError),
        ({"alpha": Fraction(1)}, "alpha", ValueError),
        ({"alpha": 0.0}, "alpha", ValueError),
        ({"decay_base": Fraction(1)}, "decay_base", ValueError),
        ({"light_cells": 2}, "light_cells", ValueError),
        ({"scheme": "cnr", "light_cells": 0}, "light_cells", ValueError),
    ],
)
def test_bad_parameters_fail_fast(kwargs: dict, param: str, error: type) -> None:
    args = {"scheme": "bdr", "epsilon": 1.0, "domain_size": 100, "k": 3} | kwargs
    with pytest.raises(error, match=param):
        HgLdpParams(**args)


def test_a_state_with_hot_ids_outside_the_domain_is_refused() -> None:
    client = make_client(HgLdpParams("bdr", EPS, D, K))
    for hot in ((-1, *HOT[1:]), (*HOT[:-1], D)):
        with pytest.raises(ValueError, match=r"hot items must be item indices 0\.\.9; version 3 has"):
            client.update_state(PublicState(3, tuple(sorted(hot)), False))
    assert client.state is None


@pytest.mark.parametrize("cli", ["produce", "job"])
@pytest.mark.parametrize("bad", ["x", "1/0", "3/2"])
def test_alpha_option_is_named_on_bad_input(cli: str, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    if cli == "produce":
        from privstream.connectors.ldp_produce_cli import add_ldp_arguments

        add_ldp_arguments(parser)
    else:
        from privstream.jobs.ldp_heavy_hitters import configure

        configure(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--alpha", bad])
    assert "argument --alpha:" in capsys.readouterr().err
