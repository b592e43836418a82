"""HeavyGuardian with one bucket and exponential decay (Yang et al. KDD 2018; HG-LDP paper §2.4).

HG-LDP uses w = 1 bucket whose heavy part holds λ_h = k cells ⟨ID, count⟩ and, for CNR only, a
light part of λ_l cells ⟨ID, count⟩ that nominates cold candidates (§4.4). Insertion (ED_Insert):

* Case 1 — the item is in the heavy part: its count += 1;
* Case 2 — a heavy cell is free: the item enters with count 1;
* Case 3 — heavy part full: the weakest cell (smallest count C) decays by 1 with probability
  ``b^−C`` (b = 1.08); if its count reaches 0 the item replaces it with count 1, otherwise the
  report is dropped (λ_l = 0) or goes to the light part (CNR, handled by the server).

The decay is an *exact* Bernoulli(b^−C) (:func:`decays`; paper §A.7.2 asks for exact sampling):
with the rational ``b = B/A`` (1.08 = 27/25), ``b^−C = (A/B)^C`` for an integer C is the
probability that C independent exact Bernoulli(A/B) trials all succeed, drawn from
:mod:`privstream.noise.bernoulli`'s integer kernel with early exit (expected at most ``B/(B−A)``
draws, 13.5 for b = 1.08); a fractional C (the HG-LDP server's debiased counts) adds one lazily
compared, still exact, Bernoulli of the irrational ``(A/B)^frac``. This module's HeavyGuardian
holds raw integer counts (the non-private baseline; CNR's light part); the HG-LDP server's heavy
part is :class:`privstream.ldp.hg_debias.DebiasedHeavyPart`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from enum import Enum
from fractions import Fraction

from privstream.noise.bernoulli import _bernoulli_rational
from privstream.noise.rng import RandomSource, resolve
from privstream.validation import check_int


def _power_interval(base: Fraction, frac: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """A certified interval around ``(1/base)^frac`` (0 < frac < 1) from :mod:`decimal` at ``digits``
    significant digits (``ln`` and ``exp`` are correctly rounded; the slack covers every rounding)."""
    with localcontext() as ctx:
        ctx.prec = digits
        exponent = Decimal(frac.numerator) / Decimal(frac.denominator)
        value = (exponent * (Decimal(base.denominator) / Decimal(base.numerator)).ln()).exp()
    x = Fraction(value)
    slack = Fraction(1, 10 ** (digits - 5))
    return x * (1 - slack), x * (1 + slack)


def _bernoulli_fractional_power(base: Fraction, frac: Fraction, rng: RandomSource) -> bool:
    """True with probability exactly ``(1/base)^frac`` for a rational 0 < frac < 1.

    The probability is irrational, so it is compared *lazily* with a uniform U drawn bit by bit:
    U's interval [u/2^j, (u+1)/2^j) is compared with a certified interval around the probability;
    the answer is decided as soon as the two are disjoint, else 64 more bits of U and a tighter
    interval are drawn (probability < 2^−30 per round). A float interval (relative slack 2^−36,
    far above the < 2^−45 error of ``math.exp``/``math.log`` here) decides almost every draw."""
    u, bits = rng.randbits(53), 53
    x = math.exp(-float(frac) * math.log(float(base)))
    if (u + 1) / 2.0**53 <= x * (1 - 2.0**-36):
        return True
    if u / 2.0**53 >= x * (1 + 2.0**-36):
        return False
    while True:
        u, bits = (u << 64) | rng.randbits(64), bits + 64
        low, high = _power_interval(base, frac, int(bits * 0.302) + 25)
        if Fraction(u + 1, 1 << bits) <= low:
            return True
        if Fraction(u, 1 << bits) >= high:
            return False


def decays(count: int | Fraction, base: Fraction, rng: RandomSource) -> bool:
    """True with probability exactly ``base^−count`` (1 for ``count <= 0``; ``base`` a rational > 1).

    The integer part is ⌊count⌋ exact Bernoulli(1/b) trials with early exit; a fractional part
    (debiased counts, paper App. A.7.1) adds one exact Bernoulli((1/b)^frac)."""
    if count <= 0:
        return True
    whole = math.floor(count)
    keep_num, keep_den = base.denominator, base.numerator  # one trial succeeds w.p. 1/b
    for _ in range(whole):
        if not _bernoulli_rational(keep_num, keep_den, rng):
            return False
    frac = Fraction(count) - whole
    return frac == 0 or _bernoulli_fractional_power(base, frac, rng)


class Outcome(Enum):
    """What one :meth:`HeavyGuardian.insert` did to the heavy part."""

    HIT = "hit"  #: Case 1
    NEW = "new"  #: Case 2
    REPLACED = "replaced"  #: Case 3, the weakest decayed to 0 and was replaced
    DECAYED = "decayed"  #: Case 3, the weakest decayed but survived (the item was not recorded)
    HELD = "held"  #: Case 3, no decay (the item was not recorded)


@dataclass(frozen=True)
class InsertResult:
    outcome: Outcome
    evicted: int | None = None  #: the item replaced (REPLACED only)
    weakest: int | None = None  #: the weakest cell (DECAYED / REPLACED / HELD)


class CellPart:
    """A part of the bucket: at most ``capacity`` cells ⟨ID, count⟩ with the ED rule."""

    __slots__ = ("capacity", "base", "cells", "_rng")

    def __init__(self, capacity: int, base: Fraction, rng: RandomSource) -> None:
        self.capacity = capacity
        self.base = base
        self.cells: dict[int, int] = {}
        self._rng = rng

    def weakest(self) -> tuple[int, int]:
        """(item, count) of the weakest cell; ties go to the smallest item ID (deterministic)."""
        return min(self.cells.items(), key=lambda cell: (cell[1], cell[0]))

    def decay(self, item: int) -> bool:
        """Decay ``item``'s cell by 1 with probability ``b^−C``; True if it decayed."""
        count = self.cells[item]
        if count > 0 and decays(count, self.base, self._rng):
            self.cells[item] = count - 1
            return True
        return False

    def insert(self, item: int) -> InsertResult:
        """ED_Insert (the three cases of the module docstring)."""
        cells = self.cells
        if item in cells:
            cells[item] += 1
            return InsertResult(Outcome.HIT)
        if len(cells) < self.capacity:
            cells[item] = 1
            return InsertResult(Outcome.NEW)
        weak, _ = self.weakest()
        decayed = self.decay(weak)
        if cells[weak] <= 0:
            del cells[weak]
            cells[item] = 1
            return InsertResult(Outcome.REPLACED, evicted=weak, weakest=weak)
        return InsertResult(Outcome.DECAYED if decayed else Outcome.HELD, weakest=weak)


class HeavyGuardian:
    """One HeavyGuardian bucket (w = 1): heavy part of ``heavy_cells`` cells, light part of
    ``light_cells`` cells (0 = no light part, the plain HG of HG-LDP's BGR/DSR/BDR)."""

    def __init__(
        self,
        heavy_cells: int,
        light_cells: int = 0,
        *,
        base: Fraction = Fraction(27, 25),
        rng: RandomSource | None = None,
    ) -> None:
        heavy_cells = check_int("heavy_cells", heavy_cells, minimum=1)
        light_cells = check_int("light_cells", light_cells, minimum=0)
        if not isinstance(base, Fraction) or base <= 1:
            raise ValueError(f"base: must be a Fraction > 1, got {base!r}")
        source = resolve(rng)
        self.heavy = CellPart(heavy_cells, base, source)
        self.light = CellPart(light_cells, base, source)

    @property
    def counts(self) -> dict[int, int]:
        """The heavy part's cells (item → raw count); the returned dict is a copy."""
        return dict(self.heavy.cells)

    @property
    def full(self) -> bool:
        return len(self.heavy.cells) == self.heavy.capacity

    def weakest_count(self) -> int:
        """The smallest heavy count (0 while the heavy part has a free cell)."""
        return self.heavy.weakest()[1] if self.full else 0

    def insert(self, item: int) -> InsertResult:
        """ED_Insert into the heavy part (a dropped item is not recorded: λ_l = 0)."""
        return self.heavy.insert(item)

    def decay_weakest(self) -> int | None:
        """A ⊥ report (DSR shrunk mode, BDR's ⊥ branch): decay the weakest cell with probability
        ``b^−C`` and never replace it. Returns the weakest item if it decayed."""
        if not self.full:
            return None
        weak, _ = self.heavy.weakest()
        return weak if self.heavy.decay(weak) else None

    def warm_up(self, items: Iterable[int]) -> int:
        """Insert raw items with plain ED (paper §6.1 warm-up); returns how many were inserted."""
        n = 0
        for item in items:
            self.insert(item)
            n += 1
        return n

    def warm_start(self, counts: Mapping[int, int]) -> None:
        """Fill the heavy part directly from an a-priori histogram of at most λ_h items (§6.1)."""
        if len(counts) > self.heavy.capacity:
            raise ValueError(
                f"counts: at most {self.heavy.capacity} items fit the heavy part, got {len(counts)}"
            )
        for item, count in counts.items():
            self.heavy.cells[check_int("item", item, minimum=0)] = check_int("count", count, minimum=1)

    def size_bytes(self) -> int:
        """Server memory model: 4-byte ID + 4-byte count per heavy cell, 4-byte ID + 1-byte count per
        light cell (4-bit counters in the paper, rounded up), independent of the domain size."""
        return 8 * self.heavy.capacity + 5 * self.light.capacity
