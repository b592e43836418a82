"""Chan et al.'s Alg. 1 (their PMG): Geom(exp(ε/(k+1))) on every counter of the declared domain,
clamp at 0, keep the top k non-zero values (ε-DP; their Lemma 2: ℓ1 <= k + 1, which also bounds the
add/remove sensitivity k). See :mod:`privstream.mechanisms.chan`."""

from __future__ import annotations

from privstream.mechanisms.chan import chan_mechanism

MECHANISM = chan_mechanism(
    "chan_pmg",
    "Chan et al. Alg. 1: Geom(exp(ε/(k+1))), clamp at 0, top-k",
    extra_sensitivity=1,
    clamp=True,
    theorem="Chan et al. 2012 Alg. 1 / Lemma 2 (l1 <= k + 1), geometric mechanism + clamp + top-k",
)
