"""Seeded synthetic event streams from the papers' experiments.

- :func:`zipf_items`, :func:`gaussian_items`: DPSW-Sketch Appendix A (Wang, Wang, Chen 2024): 95 % of the
  items from Zipf(s = 1) on ``1..universe`` (``p(k) ∝ k^-s``, bounded support, since
  ``numpy.random.zipf`` needs s > 1) or from a Gaussian (μ = 50, σ = 25; negative draws redrawn,
  values rounded to the nearest integer and clamped to ``1..universe``), and 5 % uniform on
  ``1..universe``; mixed i.i.d. per item. Defaults: ``universe = 25_600``.
- :func:`normal_items`, :func:`exponential_items`: HG-LDP's synthetic Normal and Exponential streams
  on the domain ``1..domain`` (default 1,000). The paper's variances are lost in the text (see
  HG-LDP §6.1); our defaults are μ = domain/2, σ = domain/20 for the Normal and
  scale = domain/20 for the Exponential; draws are rounded and redrawn until inside the domain.
- :func:`generate_events`: items plus user ids (uniform over ``num_users``) and event times at a given
  rate, as :class:`EventColumns`.

Uses ``numpy.random`` (synthetic *data*, never privacy noise). Invalid parameters raise ValueError /
TypeError naming the parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privstream.validation import check_int

GENERATORS = ("zipf", "gaussian", "normal", "exponential")
UNIFORM_SHARE = 0.05  # DPSW App. A: 5 % uniform background


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    return float(value)


def _rng(seed: int | None) -> np.random.Generator:
    if seed is not None:
        check_int("seed", seed, minimum=0, allow_numpy=True)
    return np.random.default_rng(seed)


def _mix_uniform(rng: np.random.Generator, items: np.ndarray, universe: int, share: float) -> np.ndarray:
    mask = rng.random(items.size) < share
    items[mask] = rng.integers(1, universe + 1, size=int(mask.sum()), dtype=np.int64)
    return items


def zipf_items(
    count: int,
    *,
    universe: int = 25_600,
    s: float = 1.0,
    uniform_share: float = UNIFORM_SHARE,
    seed: int | None = None,
) -> np.ndarray:
    """DPSW App. A Zipf stream: int64 items in ``1..universe``."""
    count = check_int("count", count, minimum=0, allow_numpy=True)
    universe = check_int("universe", universe, minimum=1, allow_numpy=True)
    s = _check_positive("s", s)
    share = _check_share(uniform_share)
    rng = _rng(seed)
    weights = np.arange(1, universe + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    items = np.searchsorted(cdf, rng.random(count), side="right").astype(np.int64) + 1
    np.minimum(items, universe, out=items)
    return _mix_uniform(rng, items, universe, share)


def _check_share(share: object) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ValueError(f"uniform_share: must be a number in [0, 1], got {share!r}")
    return float(share)


def _rounded_in_range(draw: Callable[[int], np.ndarray], count: int, low: int, high: int) -> np.ndarray:
    """Round draws to integers, redrawing those outside ``low..high`` (rejection keeps the shape)."""
    out = np.empty(count, dtype=np.int64)
    filled = 0
    for _ in range(1000):
        if filled == count:
            return out
        values = np.rint(draw(max(1024, 2 * (count - filled))))
        values = values[(values >= low) & (values <= high)].astype(np.int64)[: count - filled]
        out[filled : filled + values.size] = values
        filled += values.size
    raise ValueError("parameters: the distribution puts almost no mass inside the domain")


def gaussian_items(
    count: int,
    *,
    universe: int = 25_600,
    mean: float = 50.0,
    std: float = 25.0,
    uniform_share: float = UNIFORM_SHARE,
    seed: int | None = None,
) -> np.ndarray:
    """DPSW App. A Gaussian stream (μ = 50, σ = 25, + 5 % uniform): int64 items in ``1..universe``.

    Negative draws are redrawn and draws in [0, 0.5) clamp to 1 ("nearest positive integer").
    """
    count = check_int("count", count, minimum=0, allow_numpy=True)
    universe = check_int("universe", universe, minimum=1, allow_numpy=True)
    std = _check_positive("std", std)
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not np.isfinite(mean):
        raise ValueError(f"mean: must be a finite number, got {mean!r}")
    share = _check_share(uniform_share)
    rng = _rng(seed)

    def draw(n: int) -> np.ndarray:
        values = rng.normal(mean, std, size=n)
        values = values[values >= 0]
        return np.maximum(values, 1.0)

    items = _rounded_in_range(draw, count, 1, universe)
    return _mix_uniform(rng, items, universe, share)


def normal_items(
    count: int,
    *,
    domain: int = 1000,
    mean: float | None = None,
    std: float | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """HG-LDP synthetic Normal stream on ``1..domain`` (defaults μ = domain/2, σ = domain/20)."""
    count = check_int("count", count, minimum=0, allow_numpy=True)
    domain = check_int("domain", domain, minimum=1, allow_numpy=True)
    mean = domain / 2 if mean is None else mean
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not np.isfinite(mean):
        raise ValueError(f"mean: must be a finite number, got {mean!r}")
    std = _check_positive("std", domain / 20 if std is None else std)
    rng = _rng(seed)
    return _rounded_in_range(lambda n: rng.normal(mean, std, size=n), count, 1, domain)


def exponential_items(
    count: int, *, domain: int = 1000, scale: float | None = None, seed: int | None = None
) -> np.ndarray:
    """HG-LDP synthetic Exponential stream on ``1..domain``: ``1 + round(Exp(scale))`` (default scale domain/20)."""
    count = check_int("count", count, minimum=0, allow_numpy=True)
    domain = check_int("domain", domain, minimum=1, allow_numpy=True)
    scale = _check_positive("scale", domain / 20 if scale is None else scale)
    rng = _rng(seed)
    return _rounded_in_range(lambda n: 1.0 + rng.exponential(scale, size=n), count, 1, domain)


@dataclass(frozen=True)
class EventColumns:
    """A stream as columns: items (int64 or object), user ids (int64, or None), event times (int64 ms)."""

    items: np.ndarray
    user_ids: np.ndarray | None
    event_time_ms: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.items)
        if len(self.event_time_ms) != n or (self.user_ids is not None and len(self.user_ids) != n):
            raise ValueError("columns: items, user_ids and event_time_ms must have the same length")

    def __len__(self) -> int:
        return len(self.items)


def generate_events(
    generator: str,
    count: int,
    *,
    seed: int | None = None,
    num_users: int | None = None,
    rate: float | None = None,
    start_time_ms: int = 0,
    **params: float,
) -> EventColumns:
    """``count`` events from ``generator`` (one of :data:`GENERATORS`), with user ids and event times.

    User ids are uniform on ``0..num_users-1`` (none if ``num_users`` is None). Event times start at
    ``start_time_ms`` and advance by ``1000/rate`` ms per event (all equal if ``rate`` is None).
    ``params`` go to the generator (e.g. ``universe``, ``s``, ``domain``, ``mean``, ``std``, ``scale``).
    """
    functions: dict[str, Callable[..., np.ndarray]] = {
        "zipf": zipf_items,
        "gaussian": gaussian_items,
        "normal": normal_items,
        "exponential": exponential_items,
    }
    if generator not in functions:
        raise ValueError(f"generator: expected one of {GENERATORS}, got {generator!r}")
    count = check_int("count", count, minimum=0, allow_numpy=True)
    start_time_ms = check_int("start_time_ms", start_time_ms, minimum=0, allow_numpy=True)
    function = functions[generator]
    accepted = set(inspect.signature(function).parameters) - {"count", "seed"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise TypeError(f"params: {generator} does not take {unknown}; it takes {sorted(accepted)}")
    items = function(count, seed=seed, **params)
    rng = np.random.default_rng(None if seed is None else seed + 1)
    users = None
    if num_users is not None:
        num_users = check_int("num_users", num_users, minimum=1, allow_numpy=True)
        users = rng.integers(0, num_users, size=count, dtype=np.int64)
    if rate is None:
        times = np.full(count, start_time_ms, dtype=np.int64)
    else:
        rate = _check_positive("rate", rate)
        times = start_time_ms + np.floor(np.arange(count) * (1000.0 / rate)).astype(np.int64)
    return EventColumns(items, users, times)
