"""Synthetic generators (DPSW App. A Zipf/Gaussian, HG-LDP Normal/Exponential): shape, seeding, bad params."""

from __future__ import annotations

import numpy as np
import pytest

from privstream import datagen


@pytest.mark.parametrize("generator", datagen.GENERATORS)
def test_seeded_generators_are_reproducible_and_in_range(generator: str) -> None:
    a = datagen.generate_events(generator, 5000, seed=11, num_users=20, rate=100.0, start_time_ms=1000)
    b = datagen.generate_events(generator, 5000, seed=11, num_users=20, rate=100.0, start_time_ms=1000)
    c = datagen.generate_events(generator, 5000, seed=12, num_users=20, rate=100.0, start_time_ms=1000)
    assert np.array_equal(a.items, b.items) and np.array_equal(a.user_ids, b.user_ids)
    assert not np.array_equal(a.items, c.items)
    assert a.items.dtype == np.int64 and a.items.min() >= 1
    upper = 25_600 if generator in ("zipf", "gaussian") else 1000
    assert a.items.max() <= upper
    assert set(np.unique(a.user_ids)) <= set(range(20))
    assert a.event_time_ms[0] == 1000 and a.event_time_ms[100] == 2000  # 100 events/s -> 10 ms apart
    assert np.all(np.diff(a.event_time_ms) >= 0)


def test_zipf_matches_dpsw_appendix_a() -> None:
    """Top item share ≈ 0.95/H_25600 + 0.05/25600 ≈ 0.0888. n = 200k: sd ≈ 6.4e-4, tolerance 0.004
    (> 6 sd: false-failure rate < 1e-9; the seed is fixed, so the outcome is deterministic)."""
    items = datagen.zipf_items(200_000, seed=1)
    harmonic = np.sum(1.0 / np.arange(1, 25_601))
    expected = 0.95 / harmonic + 0.05 / 25_600
    assert abs(np.mean(items == 1) - expected) < 0.004
    assert abs(np.mean(items == 2) - (0.95 / 2 / harmonic + 0.05 / 25_600)) < 0.004


def test_gaussian_mixture_matches_dpsw_appendix_a() -> None:
    items = datagen.gaussian_items(200_000, seed=2)
    background = items > 200  # Gaussian(50, 25) mass above 200 is ~1e-9: these are the uniform 5 %
    assert abs(background.mean() - 0.05 * (25_600 - 200) / 25_600) < 0.005
    core = items[~background]
    assert abs(np.median(core) - 51) < 2  # redrawn negatives shift the centre slightly upwards
    assert items.min() >= 1


def test_normal_and_exponential_defaults() -> None:
    normal = datagen.normal_items(100_000, domain=1000, seed=3)
    assert abs(normal.mean() - 500) < 2 and abs(normal.std() - 50) < 2
    expo = datagen.exponential_items(100_000, domain=1000, seed=4)
    assert abs(expo.mean() - 51) < 2  # 1 + round(Exp(50)), truncation at 1000 negligible
    assert np.bincount(expo).argmax() in (1, 2)


def test_no_users_and_no_rate() -> None:
    events = datagen.generate_events("normal", 10, seed=1, start_time_ms=7)
    assert events.user_ids is None and np.all(events.event_time_ms == 7) and len(events) == 10


@pytest.mark.parametrize(
    ("kwargs", "param", "error"),
    [
        ({"generator": "poisson", "count": 5}, "generator", ValueError),
        ({"generator": "zipf", "count": -1}, "count", ValueError),
        ({"generator": "zipf", "count": 1.5}, "count", TypeError),
        ({"generator": "zipf", "count": 5, "s": 0}, "s", ValueError),
        ({"generator": "zipf", "count": 5, "universe": 0}, "universe", ValueError),
        ({"generator": "gaussian", "count": 5, "std": -1.0}, "std", ValueError),
        ({"generator": "exponential", "count": 5, "scale": float("nan")}, "scale", ValueError),
        ({"generator": "normal", "count": 5, "num_users": 0}, "num_users", ValueError),
        ({"generator": "normal", "count": 5, "rate": 0}, "rate", ValueError),
        ({"generator": "normal", "count": 5, "seed": -3}, "seed", ValueError),
        ({"generator": "normal", "count": 5, "universe": 10}, "params", TypeError),
    ],
)
def test_invalid_parameters_fail_fast_naming_the_parameter(kwargs: dict, param: str, error: type) -> None:
    generator = kwargs.pop("generator")
    count = kwargs.pop("count")
    with pytest.raises(error, match=param):
        datagen.generate_events(generator, count, **kwargs)
