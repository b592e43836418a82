"""Thresholded Laplace(k/ε) (Lebeda–Tětek's baseline for a sketch of sensitivity k): its new-key
factor, its threshold, which counts it noises and the parameters it reports, each against an
independent computation (a brute-force maximum, a linear scan), never against itself.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py thresholds``); the scale
and threshold the release samples with are checked in tests/test_noise_parameters_recorded.py.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from privstream.accounting import Budget
from privstream.mechanisms import release
from privstream.noise import SeededRandomSource
from privstream.sketches import MisraGries

#: the module (the package exports its function of the same name)
module = importlib.import_module("privstream.mechanisms.laplace_threshold")


@pytest.mark.parametrize(("epsilon", "k"), [(0.5, 10), (3.0, 10), (2.5, 7), (1.0, 1)])
def test_new_key_factor_is_the_maximum_over_every_n(epsilon: float, k: int) -> None:
    """C(ε, k) = max(k, max_{1<=n<=k} n·e^{ε(1−n/k)}), here by trying every n (at ε = 3, k = 10 the
    maximiser is n = 3 = ⌊k/ε⌋, not ⌈k/ε⌉ = 4)."""
    brute = max(float(k), *(n * math.exp(epsilon * (1 - n / k)) for n in range(1, k + 1)))
    assert module.new_key_factor(epsilon, k) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize(
    ("epsilon", "delta", "k"),
    [(1.0, 1e-6, 8), (0.3, 1e-9, 4), (8.0, 0.09, 1)],  # the last: T = 2, the smallest allowed
)
def test_threshold_is_the_first_integer_from_two_meeting_the_condition(
    epsilon: float, delta: float, k: int
) -> None:
    expected = next(t for t in range(2, 10**6) if module.laplace_threshold_delta(epsilon, k, t) <= delta)
    assert module.laplace_threshold(epsilon, delta, k) == expected
    assert (expected == 2) == (epsilon == 8.0)


@pytest.mark.parametrize(("epsilon", "k", "t"), [(1.0, 10, 40), (0.5, 3, 17)])
def test_a_delta_met_exactly_gives_that_threshold(epsilon: float, k: int, t: int) -> None:
    """The condition is δ(T) <= δ: asked for exactly δ(T) (as the double the module computes), the
    threshold is T itself, not T + 1."""
    delta = module.laplace_threshold_delta(epsilon, k, t)
    assert module.laplace_threshold_delta(epsilon, k, t - 1) > delta
    assert module.laplace_threshold(epsilon, delta, k) == t


def test_a_non_integer_k_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="^k"):
        module.laplace_threshold(1.0, 1e-6, 2.5)  # type: ignore[arg-type]


def test_only_nonzero_counts_are_noised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero counts are never noised (so never released); counts of 1 are."""
    seen: list[list[tuple[object, int]]] = []
    real = module.add_laplace

    def recording(items, scale, rng):  # type: ignore[no-untyped-def]
        items = list(items)
        seen.append(items)
        return real(items, scale, rng)

    monkeypatch.setattr(module, "add_laplace", recording)
    module.laplace_threshold_release({"a": 1, "b": 0, "c": 3}, 1.0, 2, 4, SeededRandomSource(1))
    assert [x for x, _ in seen[0]] == ["a", "c"]


def test_the_release_reports_its_threshold_scale_and_sketch_term() -> None:
    """The registered release's parameters name its threshold (the calibrated one) and its scale,
    and its error bound carries the sketch term of the request, as every mechanism's does."""
    k, budget = 8, Budget(1.0, 1e-6)
    sketch = MisraGries(k)
    sketch.update_batch(np.array([1] * 500 + [2] * 300))
    out = release(sketch, budget, mechanism="laplace_threshold", rng=SeededRandomSource(2))
    assert dict(out.parameters) == {"threshold": module.laplace_threshold(1.0, 1e-6, k), "scale": f"{k}/eps"}
    pmg = release(sketch, budget, mechanism="pmg", rng=SeededRandomSource(2))
    assert out.error_bound.sketch_term == pmg.error_bound.sketch_term != ""
