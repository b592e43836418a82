"""Accuracy, coverage and cost metrics of one private release against the true counts.

Every metric compares a release's values f̂(x) (0 for unreleased x, as in Lebeda–Tětek §1: "keys
not in T have an implicit estimate of 0") with the true frequencies f(x) of the stream:

* top-k (``top``, default 10) and γ-heavy-hitter (f(x) >= γ·n) precision / recall / F1: the
  released top-``top`` (by value) and the released items with f̂(x) >= γ·n against the true ones;
* MAE and MRE (|f̂ − f| / f) over the high-frequency items (the true top-``top``) and the
  low-frequency items (the other items with f > 0, or a fixed sample of at most 10,000 of them);
* ``max_error``: max over the universe of |f̂(x) − f(x)| (the paper's goal, §1), and
  ``max_error_vs_sketch``: max |f̂(x) − c(x)| against the non-private sketch's counters c, i.e. the
  error the *mechanism* adds (§1: "the biggest error, as compared to the values from the MG sketch"),
  and ``mean_noise_released``: the mean |f̂(x) − c(x)| over the released items (the noise magnitude);
* ``covered``: whether the release's stated :class:`~privstream.mechanisms.ErrorBound` holds for
  every x: f(x) − below − S <= f̂(x) <= f(x) + above, with the symbolic sketch term S evaluated on the
  true stream length (:func:`sketch_term_value`, e.g. n/(k+1), Fact 1). The bound promises this
  with probability >= 1 − β, so the fraction of covered runs is compared with 1 − β;
* cost: the build's throughput (events/s) and the sketch's memory (:func:`sketch_memory`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privstream.mechanisms import ErrorBound
from privstream.validation import check_int

#: Low-frequency items beyond this many are sampled (fixed seed) for MAE/MRE.
LOW_SAMPLE = 10_000

#: Sketch terms (:attr:`ErrorBound.sketch_term`) this module evaluates: the leading symbol of the
#: term -> its value from (total items, k).
_SKETCH_TERMS: dict[str, Callable[[int, int], float]] = {
    "n/(k+1)": lambda n, k: n / (k + 1),  # Fact 1
    "N/(k+1)": lambda n, k: n / (k + 1),  # Agarwal et al. merge, N = total length
    "M/(k+1)": lambda n, k: n / (k + 1),  # Lemma 8.8 / 8.11, M = total items over all users
    "0": lambda n, k: 0.0,  # exact counts
}


def sketch_term_value(term: str, n: int, k: int) -> float:
    """The value of a release's symbolic sketch term (its leading symbol, e.g. ``"n/(k+1) (Fact 1)"``)
    for ``n`` total items and sketch size ``k``. ValueError for a term this module cannot evaluate."""
    n = check_int("n", n, minimum=0)
    k = check_int("k", k)
    symbol = term.split(" ", 1)[0]
    try:
        return _SKETCH_TERMS[symbol](n, k)
    except KeyError:
        raise ValueError(
            f"sketch_term: cannot evaluate {term!r}; known leading symbols: {sorted(_SKETCH_TERMS)}"
        ) from None


@dataclass(frozen=True)
class Histogram:
    """A sparse vector over int items: sorted unique ``keys`` and their ``values`` (absent = 0)."""

    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, int | float]]) -> Histogram:
        """From (int item, value) pairs with unique items (release items, sketch counters)."""
        pairs = list(pairs)
        if any(type(x) is not int for x, _ in pairs):
            raise TypeError("pairs: the evaluation maps every item to an int (workloads.factorize)")
        keys = np.fromiter((x for x, _ in pairs), dtype=np.int64, count=len(pairs))
        values = np.fromiter((v for _, v in pairs), dtype=np.float64, count=len(pairs))
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], values[order])

    @classmethod
    def from_mapping(cls, mapping: dict[Any, int]) -> Histogram:
        """From a sketch's ``counters()`` (dummy keys of Alg. 1 and zero counts dropped)."""
        return cls.from_pairs((x, c) for x, c in mapping.items() if type(x) is int and c != 0)

    def lookup(self, query: np.ndarray) -> np.ndarray:
        """The values at ``query`` (sorted or not), 0 where a key is absent."""
        if self.keys.size == 0:
            return np.zeros(query.size, dtype=np.float64)
        pos = np.searchsorted(self.keys, query)
        pos = np.minimum(pos, self.keys.size - 1)
        hit = self.keys[pos] == query
        return np.where(hit, self.values[pos], 0.0)


def _top(keys: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` keys with the largest values (ties: smaller key first), as a sorted array."""
    order = np.lexsort((keys, -values))[:count]
    return np.sort(keys[order])


def _prf(truth: np.ndarray, found: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall, F1 of the ``found`` set against ``truth`` (sorted unique arrays). An empty
    ``found`` has undefined (NaN) precision and an empty ``truth`` undefined recall; F1 is NaN only
    if both are empty."""
    hits = float(np.intersect1d(truth, found, assume_unique=True).size)
    precision = hits / found.size if found.size else float("nan")
    recall = hits / truth.size if truth.size else float("nan")
    if not found.size and not truth.size:
        return precision, recall, float("nan")
    p, r = (0.0 if np.isnan(precision) else precision), (0.0 if np.isnan(recall) else recall)
    return precision, recall, (2 * p * r / (p + r) if p + r else 0.0)


class GroundTruth:
    """The true frequencies of a stream of int64 items and the item sets the metrics use: the true
    top-``top`` items, the γ-heavy hitters (f >= γ·n) and the low-frequency items (all other items
    with f > 0, or a fixed sample of :data:`LOW_SAMPLE` of them)."""

    def __init__(self, items: np.ndarray, *, top: int = 10, gamma: float = 0.001) -> None:
        if not isinstance(items, np.ndarray) or items.dtype != np.int64:
            raise TypeError("items: must be an int64 numpy array")
        self.top = check_int("top", top)
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not 0 < gamma < 1:
            raise ValueError(f"gamma: must be a number in (0, 1), got {gamma!r}")
        self.gamma = float(gamma)
        keys, counts = np.unique(items, return_counts=True)
        self.hist = Histogram(keys.astype(np.int64), counts.astype(np.float64))
        self.n = int(items.size)
        self.top_keys = _top(self.hist.keys, self.hist.values, self.top)
        self.heavy_keys = self.hist.keys[self.hist.values >= self.gamma * self.n]
        rest = np.setdiff1d(self.hist.keys, self.top_keys, assume_unique=True)
        if rest.size > LOW_SAMPLE:
            rest = np.sort(np.random.default_rng(0).choice(rest, LOW_SAMPLE, replace=False))
        self.low_keys = rest

    @property
    def distinct(self) -> int:
        return int(self.hist.keys.size)


def _mean_errors(truth: GroundTruth, released: Histogram, keys: np.ndarray) -> tuple[float, float]:
    if keys.size == 0:
        return float("nan"), float("nan")
    f = truth.hist.lookup(keys)
    err = np.abs(released.lookup(keys) - f)
    return float(err.mean()), float((err / f).mean())


def _max_abs_difference(a: Histogram, b: Histogram) -> float:
    """max over all items of |a(x) − b(x)| (items absent from both contribute 0)."""
    keys = np.union1d(a.keys, b.keys)
    if keys.size == 0:
        return 0.0
    return float(np.abs(a.lookup(keys) - b.lookup(keys)).max())


#: The sketch term S of a bound: one value, or per item (e.g. n_p/(k+1) of the item's partition p).
SketchTerm = float | Callable[[np.ndarray], np.ndarray]


def covers(truth: GroundTruth, released: Histogram, bound: ErrorBound, sketch_term: SketchTerm) -> bool:
    """Whether f(x) − below − S <= f̂(x) <= f(x) + above for every x (the stated interval,
    :class:`~privstream.mechanisms.ErrorBound`); items in neither the stream nor the release have
    f = f̂ = 0 and always satisfy it. ``sketch_term``: S, or a function of the items giving each
    item's S."""
    keys = np.union1d(truth.hist.keys, released.keys)
    f, est = truth.hist.lookup(keys), released.lookup(keys)
    s = sketch_term(keys) if callable(sketch_term) else sketch_term
    tolerance = 1e-9 * max(1.0, float(truth.n))  # float rounding of S only
    low_ok = est >= f - bound.below - s - tolerance
    high_ok = est <= f + bound.above + tolerance
    return bool(np.all(low_ok & high_ok))


def release_metrics(
    truth: GroundTruth,
    items: Sequence[tuple[Any, int]],
    *,
    bound: ErrorBound | None = None,
    sketch_term: SketchTerm | None = None,
    reference: Histogram | None = None,
) -> dict[str, float]:
    """The accuracy metrics of one release (``items``: its (item, value) pairs) against ``truth``
    (module docstring). With ``bound`` and its ``sketch_term`` evaluated on the true stream
    (:func:`sketch_term_value`), also ``covered`` (1.0 or 0.0) and the bound's parts; with the
    sketch's counters as ``reference``, also ``max_error_vs_sketch``."""
    released = Histogram.from_pairs(items)
    in_stream = truth.hist.lookup(released.keys) > 0
    top_found = _top(released.keys, released.values, truth.top)
    heavy_found = released.keys[released.values >= truth.gamma * truth.n]
    out: dict[str, float] = {"released": float(released.keys.size), "false_keys": float((~in_stream).sum())}
    for prefix, true_set, found in (
        ("topk", truth.top_keys, top_found),
        ("hh", truth.heavy_keys, heavy_found),
    ):
        p, r, f1 = _prf(true_set, found)
        out.update({f"{prefix}_precision": p, f"{prefix}_recall": r, f"{prefix}_f1": f1})
    out["mae_high"], out["mre_high"] = _mean_errors(truth, released, truth.top_keys)
    out["mae_low"], out["mre_low"] = _mean_errors(truth, released, truth.low_keys)
    out["max_error"] = _max_abs_difference(truth.hist, released)
    if reference is not None:
        out["max_error_vs_sketch"] = _max_abs_difference(reference, released)
        noise = np.abs(released.values - reference.lookup(released.keys))
        out["mean_noise_released"] = float(noise.mean()) if noise.size else float("nan")
    if bound is not None:
        if sketch_term is None:
            raise ValueError("sketch_term: needed with bound= (the bound's S on the true stream)")
        out.update(
            covered=float(covers(truth, released, bound, sketch_term)),
            bound_below=float(bound.below),
            bound_above=float(bound.above),
            noise_bound=float(bound.noise_error),
            beta=float(bound.beta),
        )
    return out


def sketch_errors(truth: GroundTruth, sketch: Any) -> dict[str, float]:
    """The non-private sketch's own error (Fact 1 / Lemma 8.8 / Agarwal et al.: every estimate in
    [f(x) − S, f(x)]): ``sketch_under`` = max (f − c), ``sketch_over`` = max (c − f) over the
    universe, and ``sketch_term`` S = n/(k+1) for the sketch's n and k."""
    counters = Histogram.from_mapping(sketch.counters())
    keys = np.union1d(truth.hist.keys, counters.keys)
    diff = counters.lookup(keys) - truth.hist.lookup(keys)
    return {
        "sketch_under": float(max(0.0, -diff.min())) if keys.size else 0.0,
        "sketch_over": float(max(0.0, diff.max())) if keys.size else 0.0,
        "sketch_term": sketch_term_value(sketch.build.guarantees.sketch_term, sketch.n, sketch.k),
    }


def sketch_memory(sketch: Any) -> dict[str, float]:
    """Memory of a sketch: its stored counters and the size of its binary form (``to_bytes``)."""
    return {"counters": float(len(sketch.counters())), "bytes": float(len(sketch.to_bytes()))}


def timed(action: Callable[[], object]) -> float:
    """Wall-clock seconds of ``action()`` (perf_counter)."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start
