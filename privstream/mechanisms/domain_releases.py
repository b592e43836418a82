"""Releases that add noise to every element of a declared universe and keep the top k.

* :func:`pure_topk_values` — Lebeda–Tětek §6: Alg. 3 (sensitivity reduction, ℓ1 < 2, Lemma 6.2)
  + Laplace(2/ε) on every element + top-k; ε-DP. Values of Alg. 3 are multiples of 1/(k+1), so the
  noise is the exact discrete Laplace on that lattice: Z/(k+1) with Z of scale 2(k+1)/ε. The ℓ1
  distance of neighbours in lattice units is an integer < 2(k+1), so this is ε·(2k+1)/(2k+2) <= ε
  DP. The same works for per-partition Alg. 3 + key-wise sum (§7: one partition changes).
* :func:`chan_values` — Chan et al.'s baseline: Laplace(Δ/ε) on every element, top-k (ε-DP), and
  Chan et al. Alg. 1 (PMG): Geom(exp(ε/Δ)) on every counter, clamp at 0, keep the top k non-zero
  values (``clamp=True``). Δ = k for add/remove neighbours on MG sketches (Lebeda–Tětek §2, Cor. 7.2,
  Lemma 8.9), Δ = β + 1 = k + 1 under Chan et al.'s replace-one-event relation (their Lemma 2).
  The release entry point uses Δ = k + 1 for ``chan_pmg`` (Chan et al.'s own calibration, valid for
  both relations) and Δ = k for ``chan_topk`` (their Laplace(k/ε) baseline).

Both use :func:`privstream.mechanisms.domain_topk.noisy_top_k`, which samples only the noise values
that can reach the top k; its output law equals the naive one (see that module). Both release
over the declared domain only: stored keys outside it are dropped before noising.
"""

from __future__ import annotations

from collections.abc import Mapping

from privstream.mechanisms.common import check_epsilon, laplace_scale
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain, noisy_top_k
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.distributions import discrete_laplace_abs_tail, smallest_abs_bound
from privstream.noise.rng import RandomSource
from privstream.sketches import Item


def pure_topk_values(
    numerators: Mapping[Item, int],
    denominator: int,
    epsilon: float,
    k: int,
    domain: Domain | DeclaredDomain,
    rng: RandomSource,
) -> tuple[tuple[Item, int], ...]:
    """§6 release on Alg. 3 output (values numerators/denominator); released values are the noisy
    lattice values rounded to the nearest integer (post-processing)."""
    scale = laplace_scale(2 * denominator, epsilon)
    top = noisy_top_k(numerators, domain, k, scale, rng)
    return tuple((x, (2 * v + denominator) // (2 * denominator)) for x, v in top)


def pure_topk_error_bound(
    epsilon: float, denominator: int, domain: Domain | DeclaredDomain, beta: float
) -> ErrorBound:
    """W.p. >= 1−β all d noises are within b lattice units (d·Pr[|Z| > b] <= β). Released: value
    within b/(k+1) + 1/2 of Alg. 3's ĉ ∈ [f − n/(k+1), f] (Lemma 6.1); an unreleased stored key lost
    to some key whose noisy value is larger, so ĉ_x <= 2b/(k+1)."""
    scale = 2 * denominator / check_epsilon(epsilon)
    b = smallest_abs_bound(lambda m: discrete_laplace_abs_tail(m, scale), declared_domain(domain).size, beta)
    return ErrorBound(
        below=2 * b / denominator + 0.5,
        above=b / denominator + 0.5,
        beta=beta,
        sketch_term="n/(k+1)",
        derivation=f"Lebeda-Tetek §6: d·Pr[|Z|>b]<=beta, b={b} lattice units of 1/{denominator}",
    )


def chan_values(
    counts: Mapping[Item, int],
    epsilon: float,
    k: int,
    sensitivity: int,
    domain: Domain | DeclaredDomain,
    rng: RandomSource,
    *,
    clamp: bool,
) -> tuple[tuple[Item, int], ...]:
    """Chan et al.: Laplace/Geom(exp(ε/Δ)) on every element; top k (``clamp``: only values >= 1)."""
    scale = laplace_scale(sensitivity, epsilon)
    nonzero = {x: c for x, c in counts.items() if c != 0}
    return tuple(noisy_top_k(nonzero, domain, k, scale, rng, min_value=1 if clamp else None))


def chan_error_bound(
    epsilon: float, sensitivity: int, domain: Domain | DeclaredDomain, beta: float, sketch_term: str
) -> ErrorBound:
    """d·Pr[|Z| > b] <= β: released values within b of the counter; an unreleased key lost to a key
    with a larger noisy value (or was clamped), so its counter is <= 2b."""
    b = smallest_abs_bound(
        lambda m: discrete_laplace_abs_tail(m, sensitivity / epsilon), declared_domain(domain).size, beta
    )
    return ErrorBound(
        below=float(2 * b),
        above=float(b),
        beta=beta,
        sketch_term=sketch_term,
        derivation=f"Chan et al. top-k: d·Pr[|Z|>b]<=beta, b={b}, scale {sensitivity}/eps",
    )
