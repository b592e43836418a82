"""Chan et al.'s baseline: Laplace(k/ε) on every element of the declared domain, top k (ε-DP;
ℓ1 <= k for every MG build: Lebeda–Tětek Lemma 2, Cor. 7.2, Lemma 8.9). See
:mod:`privstream.mechanisms.chan`."""

from __future__ import annotations

from privstream.mechanisms.chan import chan_mechanism

MECHANISM = chan_mechanism(
    "chan_topk",
    "Chan et al. Laplace(k/ε) on the declared domain + top-k",
    extra_sensitivity=0,
    clamp=False,
    theorem="Chan et al. 2012 (Laplace mechanism, l1 <= k by Lebeda-Tetek Lemma 2 / Cor. 7.2 / Lemma 8.9) + top-k",
)
