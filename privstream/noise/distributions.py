"""Probability mass functions and tails of the noise distributions, in floating point.

These are used to *calibrate* mechanisms (thresholds, error bounds, the GSHM condition) and to test
the exact samplers; they never generate noise. Tails of the discrete Laplace are closed forms;
tails of the discrete Gaussian are computed by summing the pmf (CKS 2020 give no closed form),
with the normalising constant summed over ±(40σ + 10), where the omitted mass is below 1e-300.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np


def _alpha(scale: float) -> float:
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    return math.exp(-1.0 / scale)


def discrete_laplace_pmf(z: int | np.ndarray, scale: float) -> float | np.ndarray:
    """Pr[Z = z] = (1-α)/(1+α)·α^|z| with α = exp(-1/scale)."""
    a = _alpha(scale)
    return (1 - a) / (1 + a) * np.power(a, np.abs(z))


def discrete_laplace_tail(m: int, scale: float) -> float:
    """Pr[Z >= m]: α^m/(1+α) for m >= 1 and 1 - α^(1-m)/(1+α) for m <= 0 (symmetry)."""
    a = _alpha(scale)
    if m >= 1:
        return math.exp(-m / scale) / (1 + a)
    return 1.0 - math.exp(-(1 - m) / scale) / (1 + a)


def discrete_laplace_abs_tail(m: int, scale: float) -> float:
    """Pr[|Z| >= m] = 2α^m/(1+α) for m >= 1 (1 for m <= 0)."""
    return 1.0 if m <= 0 else 2.0 * discrete_laplace_tail(m, scale)


@lru_cache(maxsize=256)
def _gaussian_table(sigma2: float) -> tuple[int, np.ndarray, np.ndarray]:
    """(half-width R, pmf over [-R, R], upper-tail array tail[i] = Pr[Y >= i - R])."""
    if not sigma2 > 0:
        raise ValueError(f"sigma2 must be > 0, got {sigma2}")
    radius = int(40 * math.sqrt(sigma2)) + 10
    ys = np.arange(-radius, radius + 1, dtype=np.float64)
    weights = np.exp(-(ys * ys) / (2.0 * sigma2))
    pmf = weights / weights.sum()
    tail = np.cumsum(pmf[::-1])[::-1]
    return radius, pmf, tail


def discrete_gaussian_pmf(y: int | np.ndarray, sigma2: float) -> float | np.ndarray:
    """Pr[Y = y] ∝ exp(-y²/(2σ²)), normalised by summation."""
    radius, pmf, _ = _gaussian_table(float(sigma2))
    idx = np.asarray(y) + radius
    inside = (idx >= 0) & (idx < pmf.size)
    out = np.where(inside, pmf[np.clip(idx, 0, pmf.size - 1)], 0.0)
    return float(out) if out.ndim == 0 else out


def discrete_gaussian_tail(m: int, sigma2: float) -> float:
    """Pr[Y >= m], by summing the pmf (at most 1: the summed tail near 1 can round above it)."""
    radius, _, tail = _gaussian_table(float(sigma2))
    idx = m + radius
    if idx <= 0:
        return 1.0
    if idx >= tail.size:
        return 0.0
    return min(1.0, float(tail[idx]))


def discrete_gaussian_abs_tail(m: int, sigma2: float) -> float:
    """Pr[|Y| >= m] (= 2·Pr[Y >= m] for m >= 1, by symmetry)."""
    return 1.0 if m <= 0 else min(1.0, 2.0 * discrete_gaussian_tail(m, sigma2))


def smallest_satisfying(pred: Callable[[int], bool], lower: int, start: int | None = None) -> int:
    """Smallest integer m >= ``lower`` with ``pred(m)``, for a predicate that is monotone (false,
    then true forever); galloping from ``start`` (a guess), then bisection."""
    guess = lower if start is None else max(lower, start)
    if pred(guess):
        lo, hi, step = lower - 1, guess, 1  # invariant: pred(hi), not pred(lo) (lo = lower-1: none)
        while hi - step >= lower and pred(hi - step):
            hi -= step
            step *= 2
        lo = max(lo, hi - step)
    else:
        lo, hi, step = guess, guess + 1, 1
        while not pred(hi):
            lo = hi
            step *= 2
            hi += step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest_abs_bound(abs_tail: Callable[[int], float], count: int, beta: float) -> int:
    """Smallest integer b >= 0 with count·Pr[|X| > b] = count·abs_tail(b + 1) <= beta: with
    probability >= 1 - beta all ``count`` i.i.d. samples lie in [-b, b] (union bound)."""
    if not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta}")
    return smallest_satisfying(lambda b: count * abs_tail(b + 1) <= beta, 0)
