"""Exact integer noise samplers driven by a cryptographic random source.

Samplers follow Canonne–Kamath–Steinke 2020 (Algorithms 1–3) with integer arithmetic only; the
float pmfs/tails in :mod:`privstream.noise.distributions` calibrate mechanisms and never sample.
"""

from privstream.noise.bernoulli import bernoulli, bernoulli_exp
from privstream.noise.discrete import (
    discrete_gaussian,
    discrete_gaussian_array,
    discrete_laplace,
    discrete_laplace_array,
)
from privstream.noise.rng import (
    CryptoRandomSource,
    RandomSource,
    SeededRandomSource,
    default_source,
    resolve,
)

__all__ = [
    "CryptoRandomSource",
    "RandomSource",
    "SeededRandomSource",
    "bernoulli",
    "bernoulli_exp",
    "default_source",
    "discrete_gaussian",
    "discrete_gaussian_array",
    "discrete_laplace",
    "discrete_laplace_array",
    "resolve",
]
