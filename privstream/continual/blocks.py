"""The dyadic block structure of PCC (Chan, Li, Shi, Xu, "Differentially Private Continual Monitoring
of Heavy Hitters from Distributed Streams", §3.3), shared by PCC, PDCH-LU and PDCH-BF.

Parameters (all public and data-independent, :func:`pcc_params`):

* λ is rounded to a power of 1/2 first: if 1/λ is not a power of 2, λ′ := max{1/2^k : 1/2^k < λ}
  (the paper's strict rule, applied only when 1/λ is not already a power of 2);
* W_0 := ⌈λW/4⌉ steps per leaf block, ℓ := log2(4/λ), levels i = 0..ℓ, W_i := 2^i·W_0;
* per level, PMG(ε_i, λ_i) with ε_i := ε/2^(ℓ−i+1) (the scheme's definition; the privacy paragraph's
  "ε/2^(i−1)" is a typo: it would sum to about 4ε) and λ_i := 1/(2^i(ℓ+1)), so β_i = ⌈2/λ_i⌉ =
  2^(i+1)(ℓ+1) counters; Σ_i ε_i = ε(1 − 2^−(ℓ+1)) < ε.

Block j >= 1 of level i covers time steps [(j−1)W_i + 1, jW_i] (time starts at 1). It completes at
t = jW_i, is *expired* once its first step has left the window ((j−1)W_i + 1 < t − W + 1), and the
window estimate at t sums a cover of the active level-0 range with at most two blocks per level
(:func:`window_cover`). Since W_0·2^ℓ >= W (with equality iff λW/4 is an integer; the paper's
"W/2 <= W_0·2^ℓ <= W" does not hold in general), the active level-0 range has at most 2^ℓ blocks and
levels 0..ℓ suffice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from privstream.accounting.budget import exact_value
from privstream.validation import check_int

#: Type bytes of the continual protocols' checkpointed state records in the core's binary envelope
#: (:mod:`privstream.sketches.binary_format`; part of its reserved state-record range 200..255, not
#: registered as sketches). 230: PCC, 231: a PDCH-LU node, 232: a PDCH-LU aggregator; 233..239 are
#: reserved for the other continual protocols (PDCH-BF).
CONTINUAL_STATE_CODES = range(230, 240)
PCC_STATE_CODE = 230
LU_NODE_STATE_CODE = 231
LU_AGGREGATOR_STATE_CODE = 232


def _positive(name: str, value: object) -> Fraction:
    """``value`` as the exact rational it stands for (floats via their shortest repr, like the
    ledger), failing fast with an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ValueError(f"{name}: must be a real number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: must be finite, got {value}")
    exact = exact_value(value)
    if exact <= 0:
        raise ValueError(f"{name}: must be > 0, got {value}")
    return exact


def check_lambda(lam: object) -> Fraction:
    """λ as an exact rational; ValueError naming ``lam`` unless 0 < λ < 1."""
    exact = _positive("lam", lam)
    if exact >= 1:
        raise ValueError(f"lam: must lie in (0, 1), got {lam}")
    return exact


def round_lambda(lam: object) -> Fraction:
    """λ as PCC runs it: λ itself if 1/λ is a power of 2, else max{1/2^k : 1/2^k < λ} (strict).

    ValueError naming ``lam`` unless 0 < λ < 1."""
    exact = check_lambda(lam)
    k = 1
    while Fraction(1, 2**k) > exact:
        k += 1
    return Fraction(1, 2**k)  # == λ if 1/λ = 2^k, else the largest power of 1/2 strictly below λ


@dataclass(frozen=True)
class PccParams:
    """PCC's public parameters (:func:`pcc_params`); every field and method is data-independent."""

    epsilon: Fraction
    lam: Fraction  #: already rounded to a power of 1/2
    window: int  #: W
    w0: int  #: W_0 = ⌈λW/4⌉
    levels: int  #: ℓ = log2(4/λ); the levels are 0..ℓ

    def _level(self, i: int) -> int:
        if type(i) is int and 0 <= i <= self.levels:  # the hot path of every step
            return i
        return check_int("level", i, minimum=0, below=self.levels + 1, type_error=ValueError)

    def level_epsilon(self, i: int) -> Fraction:
        """ε_i = ε/2^(ℓ−i+1)."""
        return self.epsilon / 2 ** (self.levels - self._level(i) + 1)

    def level_lambda(self, i: int) -> Fraction:
        """λ_i = 1/(2^i(ℓ+1))."""
        return Fraction(1, 2 ** self._level(i) * (self.levels + 1))

    def level_beta(self, i: int) -> int:
        """β_i = ⌈2/λ_i⌉ = 2^(i+1)(ℓ+1): the MG counters of a level-i block (PMG, Alg. 1 line 2)."""
        return math.ceil(2 / self.level_lambda(i))

    def level_size(self, i: int) -> int:
        """W_i = 2^i·W_0 time steps."""
        return 2 ** self._level(i) * self.w0

    def level_scale(self, i: int) -> Fraction:
        """(β_i + 1)/ε_i: the level's noise is Geom(exp(ε_i/(β_i+1))) = discrete Laplace of this
        scale (Def. 7, Fact 1 with Lemma 2's sensitivity β_i + 1)."""
        return (self.level_beta(i) + 1) / self.level_epsilon(i)

    @property
    def total_epsilon(self) -> Fraction:
        """Σ_i ε_i = ε(1 − 2^−(ℓ+1)) < ε: the whole transcript's event-level ε (Lemma 3)."""
        return sum((self.level_epsilon(i) for i in range(self.levels + 1)), Fraction(0))


def pcc_params(epsilon: object, lam: object, window: object) -> PccParams:
    """PCC(ε, λ) over windows of W steps; ValueError naming the bad parameter (``epsilon``, ``lam``,
    ``window``). λ is rounded down to a power of 1/2 (:func:`round_lambda`)."""
    eps = _positive("epsilon", epsilon)
    rounded = round_lambda(lam)
    w = check_int("window", window, type_error=ValueError)
    w0 = math.ceil(rounded * w / 4)
    levels = (4 / rounded).numerator.bit_length() - 1  # 4/λ is a power of 2
    return PccParams(epsilon=eps, lam=rounded, window=w, w0=w0, levels=levels)


@dataclass(frozen=True, order=True)
class BlockId:
    """Block ``index`` (j >= 1) of ``level`` i: time steps [(j−1)W_i + 1, jW_i]."""

    level: int
    index: int

    def start(self, p: PccParams) -> int:
        return (self.index - 1) * p.level_size(self.level) + 1

    def end(self, p: PccParams) -> int:
        return self.index * p.level_size(self.level)


def block_containing(p: PccParams, level: int, t: int) -> BlockId:
    """The level-``level`` block that time step ``t`` (>= 1) falls in."""
    return BlockId(level, (t - 1) // p.level_size(level) + 1)


def completed_at(p: PccParams, t: int) -> list[BlockId]:
    """The blocks whose last step is ``t`` (t mod W_i = 0), lowest level first: released at t."""
    return [BlockId(i, t // p.level_size(i)) for i in range(p.levels + 1) if t % p.level_size(i) == 0]


def is_expired(p: PccParams, block: BlockId, t: int) -> bool:
    """Whether ``block``'s first step has left the window at ``t``: (j−1)W_i + 1 < t − W + 1."""
    return block.start(p) < t - p.window + 1


def active_leaves(p: PccParams, t: int) -> range:
    """The indices a..b of the active level-0 blocks at ``t``: complete (jW_0 <= t) and entirely in
    the window ((j−1)W_0 + 1 >= t − W + 1). Empty before the first leaf completes."""
    first = max(1, -(-(t - p.window) // p.w0) + 1)  # smallest j with (j−1)W_0 >= t − W
    return range(first, t // p.w0 + 1)


def window_cover(p: PccParams, t: int) -> list[BlockId]:
    """𝒞_t: disjoint active blocks, at most two per level, whose union is exactly the active level-0
    range (greedy dyadic cover, left to right, in units of leaves; levels capped at ℓ)."""
    leaves = active_leaves(p, t)
    a, b = leaves.start, leaves.stop - 1
    cover = []
    while a <= b:
        i = 0
        while i < p.levels and (a - 1) % 2 ** (i + 1) == 0 and a - 1 + 2 ** (i + 1) <= b:
            i += 1
        cover.append(BlockId(i, (a - 1) // 2**i + 1))
        a += 2**i
    return cover
