"""Empirical privacy audit of PCC's per-block PMG release and of the PCC and PDCH-LU transcripts
(Chan, Li, Shi, Xu Lemma 1, Lemma 3, Theorem 1), with the harness of tests/test_privacy_audit.py
(one-sided Clopper–Pearson bounds on event probabilities of neighbouring inputs; a violation is
lower(p) > e^ε·upper(p') + δ with the harness's ε = 1, δ = 1e-3).

False-failure rate: the harness splits α = 1e-3 over its one-sided bounds, so a correct mechanism is
flagged in one audit with probability <= 1e-3 (union bound). Seeds are fixed, so every outcome here
is deterministic.

* Block release (:func:`~privstream.continual.pcc.pmg_release`, the function PCC calls for every
  block): the MG cores (β = 3, PCC's core :class:`StandardMisraGries`) of two streams that differ in
  their FIRST item, which changes whether a decrement happens and shifts the core for everything
  after it: ℓ1 distance β + 1 = 4, Lemma 2's bound, reached. PMG(ε = 1) passes; the same audit
  flags the noise scale halved (true loss 2ε). Measured with these seeds: ε lower bound 0.85 (real)
  → 1.82 (halved); asserted: no violation, resp. > 1.3ε with one.
* Transcripts: every block release of a PCC(ε = 1, λ = 1/2) run (and 𝒫_T), and every message of a
  PDCH-LU node, on streams differing in their first item (for PCC a level-0 block pair at distance
  β_0 + 1 again). The claim is Σε_i < 1. On such small inputs the true loss of the transcript is far
  below the claim (most of ε sits in the high levels' β_i + 1 coordinates), so a 2×-too-small noise
  cannot be detected by sampling there; the procedure's power on transcripts is shown instead by
  flagging the noiseless baselines (DCH: the same code path with ``noiseless=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import pytest

from privstream.continual import PCC, LazyUpdateNode
from privstream.continual.pcc import pmg_release
from privstream.mechanisms.domain_topk import declared_domain
from privstream.noise import SeededRandomSource
from privstream.noise.rng import RandomSource
from tests.test_privacy_audit import EPS, audit, runs, standard_of, threshold_events
from tests.test_privacy_audit_power import audit_arrays, build_events, values_matrix

# ---------------------------------------------------------------------------------------------
# Block release: PMG(ε, β) on the tight pair of MG cores

BETA = 3
SUFFIX = [0, 1, 2] * 120
SHIFTED = [3, 0, 1, 2, *SUFFIX]  # 3 fills the 3rd counter, so 2 triggers a decrement: all cores 0
UNSHIFTED = [0, 0, 1, 2, *SUFFIX]  # no decrement: {0: 122, 1: 121, 2: 121}
BLOCK_DOMAIN = declared_domain(range(4))


def block_sampler(factor: int) -> Callable[[dict, RandomSource], Sequence[tuple[int, int]]]:
    """PCC's block release at ε = factor·EPS (factor 2: noise scale (β+1)/ε halved)."""
    return lambda counts, rng: list(
        pmg_release(counts, Fraction(factor * EPS), BETA, BLOCK_DOMAIN, rng).items()
    )


def block_audit(factor: int, n: int = 20000, seed: int = 61) -> tuple[list[str], float]:
    big, small = standard_of(UNSHIFTED, BETA).counters(), standard_of(SHIFTED, BETA).counters()
    assert small == {0: 120, 1: 120, 2: 120} and big == {0: 122, 1: 121, 2: 121}
    assert sum(abs(big.get(x, 0) - small.get(x, 0)) for x in range(4)) == BETA + 1  # Lemma 2, tight
    keys = [0, 1, 2]
    c_big, c_small = np.array([big[x] for x in keys]), np.array([small[x] for x in keys])
    sampler = block_sampler(factor)
    a = values_matrix(sampler, big, keys, seed, n)
    b = values_matrix(sampler, small, keys, seed + 1, n)
    pilot = values_matrix(sampler, big, keys, seed + 2, 4000)
    return audit_arrays(a, b, build_events(pilot, c_big, c_small))


def test_block_release_passes_its_calibration() -> None:
    violations, eps_lower = block_audit(1)
    print(f"block release real: eps_lower={eps_lower:.3f}")
    assert not violations, violations


def test_block_release_audit_flags_noise_two_times_too_small() -> None:
    violations, eps_lower = block_audit(2)
    print(f"block release halved: eps_lower={eps_lower:.3f}")
    assert violations
    assert eps_lower > 1.3 * EPS


# ---------------------------------------------------------------------------------------------
# Transcripts

PCC_DOMAIN = range(10)
# W = 80, λ = 1/2: W_0 = 10, β_0 = 8. D: 9 then 1..7 fill the 8 counters, 8 decrements them all;
# D': 1 twice, so 8 finds a free counter. Leaf 1 ends {1: 1} vs {1: 3, 2..8: 1}: distance 9 = β_0 + 1.
PCC_TAIL = [1, 2, 3, 4, 5, 6, 7, 8, 1] + [1, 2, 3, 1, 4, 5, 1, 6, 7, 1] * 3
PCC_D, PCC_D2 = [9, *PCC_TAIL], [1, *PCC_TAIL]


def pcc_transcript(stream: Sequence[int], rng: RandomSource | None) -> tuple:
    """Every block release of a PCC run, in release order, and the final 𝒫_T."""
    if rng is None:
        pcc = PCC(EPS, Fraction(1, 2), 80, noiseless=True)  # DCH: not private
    else:
        pcc = PCC(EPS, Fraction(1, 2), 80, PCC_DOMAIN, rng=rng)
    releases = []
    for x in stream:
        releases += [(b, pcc.block_values(b)) for b in pcc.step(x)]
    return tuple(releases), pcc.estimates()


def pcc_stats() -> list[Callable[[tuple], int]]:
    def leaf_value(item: int) -> Callable[[tuple], int]:
        return lambda out: out[0][0][1].get(item, 0)  # block (0, 1): the first release

    def first_blocks(out: tuple) -> int:  # Σ over the blocks holding step 1 of 𝒫(1) − 𝒫(9)
        return sum(v.get(1, 0) - v.get(9, 0) for b, v in out[0] if b.index == 1)

    return [
        leaf_value(1),
        lambda out: sum(out[0][0][1].get(x, 0) for x in range(2, 9)),
        first_blocks,
        lambda out: out[1].get(1, 0),
    ]


LU_DOMAIN = range(4)
LU_D, LU_D2 = [3] + [0, 0, 1] * 4, [0] + [0, 0, 1] * 4  # noiseless: Up for 0 at step 12 vs 11


def lu_transcript(stream: Sequence[int], rng: RandomSource | None) -> tuple:
    """Every message of a PDCH-LU node (λ = 3/4, so its PCC runs λ = 1/16; W = 12), per step."""
    if rng is None:
        node = LazyUpdateNode(EPS, Fraction(3, 4), 12, noiseless=True)  # DCH-LU: not private
    else:
        node = LazyUpdateNode(EPS, Fraction(3, 4), 12, LU_DOMAIN, rng=rng)
    return tuple(tuple(node.step(x)) for x in stream)


def lu_stats() -> list[Callable[[tuple], int]]:
    def sent(item: int) -> Callable[[tuple], int]:
        return lambda out: sum(m.value for step in out for m in step if m.item == item)

    def first_step(out: tuple) -> int:
        return next((t for t, step in enumerate(out) if any(m.item == 0 for m in step)), -1)

    return [
        sent(0),
        lambda out: sent(0)(out) - sent(3)(out),
        lambda out: sum(1 for step in out for m in step if m.item == 0),
        first_step,
    ]


TRANSCRIPTS = {
    "pcc": (pcc_transcript, pcc_stats, PCC_D, PCC_D2, 2000, 71),
    "lazy_update": (lu_transcript, lu_stats, LU_D, LU_D2, 1500, 81),
}


def transcript_audit(name: str, noiseless: bool) -> tuple[list[str], float]:
    run, stats, d, d2, n, seed = TRANSCRIPTS[name]
    n = 50 if noiseless else n

    def mechanism(stream: object, rng: SeededRandomSource) -> tuple:
        return run(stream, None if noiseless else rng)  # type: ignore[arg-type]

    pilot = runs(mechanism, d, seed + 2, n // 2)
    events = [e for stat in stats() for e in threshold_events(stat, pilot)]
    return audit(runs(mechanism, d, seed, n), runs(mechanism, d2, seed + 1, n), events)


def test_the_pcc_pair_shifts_the_leaf_core_by_beta_0_plus_1() -> None:
    leaf_d, leaf_d2 = pcc_transcript(PCC_D, None)[0][0], pcc_transcript(PCC_D2, None)[0][0]
    assert leaf_d[0] == leaf_d2[0] and leaf_d[0].level == 0
    diff = sum(abs(leaf_d[1].get(x, 0) - leaf_d2[1].get(x, 0)) for x in PCC_DOMAIN)
    assert diff == PCC(EPS, Fraction(1, 2), 80, PCC_DOMAIN).params.level_beta(0) + 1 == 9


@pytest.mark.parametrize("name", list(TRANSCRIPTS))
def test_transcript_audit_passes(name: str) -> None:
    violations, eps_lower = transcript_audit(name, noiseless=False)
    print(f"{name} transcript: eps_lower={eps_lower:.3f}")
    assert not violations, violations


@pytest.mark.parametrize("name", list(TRANSCRIPTS))
def test_transcript_audit_flags_the_noiseless_baseline(name: str) -> None:
    violations, _ = transcript_audit(name, noiseless=True)
    assert violations
