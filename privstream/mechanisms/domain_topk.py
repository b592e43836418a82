"""Noisy top-k over a known universe (Chan et al.; Lebeda–Tětek §6), without d noise draws.

The mechanism: every element x of the declared domain gets value v_x (0 if not stored) plus an
independent discrete Laplace(scale) noise; the k largest noisy values are kept (optionally only
those >= ``min_value``, for Chan et al.'s clamp-at-0 PMG); ties at the boundary value are broken
uniformly at random; the kept (item, noisy value) pairs are returned sorted by item order.

:func:`noisy_top_k_naive` does exactly that with d draws. :func:`noisy_top_k` has the *same output
distribution* but draws exact noise only for the stored keys; for the N = d − |stored| noise-only
elements it generates only the largest noise values, in decreasing order, with the exact order-
statistics sampler of :mod:`privstream.mechanisms.order_statistics`, until every value that can
still reach the top k is known. Why the law is the same: (1) the multiset of noise-only values
above any level is the top of N i.i.d. draws (Rényi representation, exact); (2) noise-only
elements are exchangeable, so their identities can be assigned after selection as a uniform random
subset of the noise-only elements; (3) the boundary tie-break is a uniform random choice in both.
For small N (<= ``naive_limit``) it simply samples every value.

The release is over the declared domain only. Stored keys outside it are *dropped* before any
noise is drawn (:meth:`DeclaredDomain.restrict`): restricting the sketch's counter vector to a fixed,
data-independent set of coordinates is post-processing of the sketch that cannot increase the
ℓ1/ℓ2 distance of neighbouring sketches and keeps their differences one-signed with support <= k
(Lemma 2, Cor. 7.2, Lemma 6.2 for Alg. 3), so every guarantee of the mechanism still holds. It is
never an error: whether a release succeeds must not depend on the data (a failure after the ledger
was charged would also leak), and no error message may echo a stored item. The declared domain
itself is public and is validated (:func:`declared_domain`) before the ledger is charged.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TypeVar

from privstream.mechanisms.order_statistics import TopNoiseLevels
from privstream.noise.discrete import _discrete_laplace
from privstream.noise.rng import RandomSource
from privstream.sketches import Item, item_order_key, normalize_item
from privstream.sketches.order import INT64_MAX, INT64_MIN
from privstream.validation import check_int

Domain = range | Sequence[Item]
_W = TypeVar("_W")  # what a candidate value stands for: its item, or None for a noise-only value


class DeclaredDomain:
    """A validated declared domain: a ``range`` (O(1) lookups) or a sequence of distinct items.

    Validation depends only on the domain (a public parameter), so callers run it before charging
    a ledger; :func:`noisy_top_k` accepts an instance to avoid validating twice.
    """

    def __init__(self, domain: Domain) -> None:
        if isinstance(domain, range):
            self._range: range | None = domain
            self._items: Sequence[Item] = domain
            self._index: dict[Item, int] | None = None
        elif isinstance(domain, Sequence) and not isinstance(domain, str | bytes):
            items = [normalize_item(x) for x in domain]
            index = {x: i for i, x in enumerate(items)}
            if len(index) != len(items):
                raise ValueError("domain must not contain duplicate items")
            self._range, self._items, self._index = None, items, index
        else:
            raise TypeError(f"domain must be a range or a sequence of items, not {type(domain).__name__}")
        if not self._items:
            raise ValueError("domain must not be empty")
        # d as a Python int: len() overflows for ranges wider than 2**63 (e.g. all int64 ids)
        r = self._range
        self._size = len(self._items) if r is None else (r[-1] - r[0]) // r.step + 1
        if r is not None and not INT64_MIN <= min(r[0], r[-1]) <= max(r[0], r[-1]) <= INT64_MAX:
            raise ValueError("domain: a range domain must lie in the signed 64-bit item range")

    @property
    def size(self) -> int:
        """d, the number of domain elements."""
        return self._size

    def position(self, item: Item) -> int | None:
        """Index of ``item`` in the domain, or None if it is not a member."""
        if self._range is not None:
            if type(item) is int and item in self._range:
                return self._range.index(item)
            return None
        assert self._index is not None  # a sequence domain always has its index (__init__)
        return self._index.get(item)

    def item(self, position: int) -> Item:
        return self._items[position]

    def restrict(self, values: Mapping[Item, int]) -> dict[int, int]:
        """``values`` restricted to the domain, keyed by position: stored keys outside the domain are
        dropped (a data-independent post-filter of the sketch; see the module docstring)."""
        out = {}
        for x, v in values.items():
            pos = self.position(x)
            if pos is not None:
                out[pos] = v
        return out


def declared_domain(domain: Domain | DeclaredDomain) -> DeclaredDomain:
    """``domain`` validated (TypeError/ValueError naming ``domain``); instances pass through."""
    return domain if isinstance(domain, DeclaredDomain) else DeclaredDomain(domain)


def _select(candidates: list[tuple[int, _W]], k: int, rng: RandomSource) -> list[tuple[int, _W]]:
    """The k largest values; among those tied at the boundary value, a uniformly random subset."""
    if len(candidates) <= k:
        return candidates
    ordered = sorted(candidates, key=lambda c: -c[0])
    boundary = ordered[k - 1][0]
    chosen = [c for c in ordered if c[0] > boundary]
    tied = [c for c in ordered if c[0] == boundary]
    need = k - len(chosen)
    for i in range(need):  # partial Fisher–Yates
        j = i + rng.randbelow(len(tied) - i)
        tied[i], tied[j] = tied[j], tied[i]
    return chosen + tied[:need]


def _finish(selected: list[tuple[int, Item]]) -> list[tuple[Item, int]]:
    return sorted(((item, value) for value, item in selected), key=lambda p: item_order_key(p[0]))


def _check(values: Mapping[Item, int], universe: DeclaredDomain, k: int) -> dict[int, int]:
    check_int("k", k, type_error=ValueError)
    return universe.restrict(values)


def noisy_top_k_naive(
    values: Mapping[Item, int],
    domain: Domain | DeclaredDomain,
    k: int,
    scale: Fraction,
    rng: RandomSource,
    *,
    min_value: int | None = None,
) -> list[tuple[Item, int]]:
    """Reference implementation: one exact noise draw per domain element (O(d)); stored keys
    outside ``domain`` are dropped (the release is over the declared domain only)."""
    universe = declared_domain(domain)
    stored = _check(values, universe, k)
    t, s = scale.numerator, scale.denominator
    candidates = []
    for pos in range(universe.size):
        v = stored.get(pos, 0) + _discrete_laplace(t, s, rng)
        if min_value is None or v >= min_value:
            candidates.append((v, universe.item(pos)))
    return _finish(_select(candidates, k, rng))


def noisy_top_k(
    values: Mapping[Item, int],
    domain: Domain | DeclaredDomain,
    k: int,
    scale: Fraction,
    rng: RandomSource,
    *,
    min_value: int | None = None,
    naive_limit: int = 2048,
) -> list[tuple[Item, int]]:
    """Same output law as :func:`noisy_top_k_naive`; O(|stored| + k) noise values for large d.
    Stored keys outside ``domain`` are dropped before noising (the release is over the declared
    domain only; module docstring)."""
    universe = declared_domain(domain)
    stored = _check(values, universe, k)
    n_noise = universe.size - len(stored)
    if n_noise <= naive_limit:
        return noisy_top_k_naive(values, universe, k, scale, rng, min_value=min_value)
    t, s = scale.numerator, scale.denominator
    stored_noisy = [(v + _discrete_laplace(t, s, rng), universe.item(pos)) for pos, v in stored.items()]
    stored_sorted = sorted(v for v, _ in stored_noisy)

    def stored_at_least(z: int) -> int:
        return len(stored_sorted) - bisect.bisect_left(stored_sorted, z)

    levels: list[int] = []  # noise-only levels, non-increasing
    at_last_level = 0  # how many of ``levels`` equal the last one
    generator = TopNoiseLevels(n_noise, scale, rng)
    while generator.generated < n_noise:
        z = generator.next()
        if min_value is not None and z < min_value:
            break  # every noise-only value >= min_value is known
        above = len(levels) - (at_last_level if levels and levels[-1] == z else 0)
        if stored_at_least(z + 1) + above >= k:
            break  # the k-th largest value is > z, and every value > z is known
        at_last_level = at_last_level + 1 if levels and levels[-1] == z else 1
        levels.append(z)
    floor = min_value
    candidates: list[tuple[int, Item | None]] = [
        (v, x) for v, x in stored_noisy if floor is None or v >= floor
    ]
    candidates += [(z, None) for z in levels]  # None: a noise-only value, its item drawn below
    selected = _select(candidates, k, rng)
    # Identities of the selected noise-only values: a uniform random subset of the noise-only
    # positions (rejection sampling; N > naive_limit keeps the acceptance rate high).
    taken: set[int] = set()
    out: list[tuple[int, Item]] = []
    for value, who in selected:
        if who is None:
            while True:
                pos = rng.randbelow(universe.size)
                if pos not in stored and pos not in taken:
                    break
            taken.add(pos)
            who = universe.item(pos)
        out.append((value, who))
    return _finish(out)
