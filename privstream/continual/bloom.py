"""Bloom-filter count tables for secure aggregation of PMG outputs (Chan, Li, Shi, Xu, "Differentially
Private Continual Monitoring of Heavy Hitters from Distributed Streams", §4.2, Theorem 2).

Each node turns its PMG output f̂_v (a non-negative vector with at most β non-zero entries) into a
P × Q count table A_v with

* ``P = ⌈ln(n/δ_0)⌉`` rows (:func:`bloom_rows`) and ``Q = ⌈e·k·β⌉`` columns (:func:`bloom_columns`),
* ``A_v[p][H_p(x)] += f̂_v(x)`` for every x with f̂_v(x) ≠ 0 and every row p,

where ``{H_p}`` is a *public* hash family whose rows are mutually independent and each row is pairwise
independent and uniform over ``[Q]``. The aggregator learns only the cell-wise sum ``A = Σ_v A_v``
(see :mod:`privstream.continual.masking`) and reads item x as ``min_p A[p][H_p(x)]``. Theorem 2: with
probability ≥ 1 − δ_0 over the hash family, this min-rule returns ``Σ_v f̂_v(x)`` exactly for *every*
x ∈ U simultaneously. The proof needs the table entries to be non-negative (collisions can only raise
a cell), which PMG's clamping at 0 guarantees; :meth:`BloomTable.insert` refuses negative values.

Hash family (:class:`BloomHashFamily`). Row p is ``H_p(x) = ((a_p·x' + b_p) mod M) mod Q`` with the
Mersenne prime ``M = 2^127 − 1`` and ``x' = encode_item(x)``:

* ``(a_p, b_p)`` are derived from a public seed by SHA-256 in counter mode with domain separation,
  ``SHA-256("privstream/pdch-bf/bloom-hash/v1" ‖ len(seed) ‖ seed ‖ p ‖ counter)``, reading 127-bit
  candidates and rejecting the single value ``M`` itself (so each coefficient is exactly uniform on
  ``Z_M`` when SHA-256 is modelled as a random oracle). Different rows use different inputs, so the
  rows are mutually independent in the same model.
* Before the final ``mod Q``, ``x' ↦ (a·x' + b) mod M`` with ``a, b`` uniform on ``Z_M`` is exactly
  pairwise independent and uniform on ``Z_M`` (for distinct ``x', y' ∈ Z_M`` the pair of outputs is
  uniform on ``Z_M²``). Reducing mod Q makes each bucket's probability ``⌊M/Q⌋/M`` or ``⌈M/Q⌉/M``,
  i.e. within ``1/M < 2^-126`` of ``1/Q`` (relative error ``Q/M``); the collision probability of two
  distinct items is at most ``(1/Q)(1 + Q/M)^2``. Theorem 2's per-row bound ``kβ/Q ≤ 1/e`` therefore
  holds up to a factor ``(1 + Q/M)^2 < 1 + 2^-90`` for any ``Q < 2^32``: uniformity is approximate,
  but the deviation is far below anything measurable.
* The seed must be drawn at random (:func:`new_hash_seed`) independently of the streams. Theorem 2's
  probability is over that draw; a stream chosen *after* seeing the seed could force collisions. That
  would hurt accuracy only, never privacy: the tables are post-processing of the DP PMG outputs.

Item encoding (:func:`encode_item`). Integers in ``[0, 2^120)`` encode to themselves, which is exactly
injective. Every other item (negative or larger integers, ``str``, ``bytes``) encodes to
``2^120 + (first 120 bits of SHA-256(type tag ‖ canonical bytes))``: distinct items collide only on a
SHA-256 collision (probability ≤ n²/2^121 for n items). All encodings are ``< 2^121 < M``.
"""

from __future__ import annotations

import decimal
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TypeVar

import numpy as np

from privstream.accounting.budget import exact_value
from privstream.validation import check_int

Item = int | str | bytes
_K = TypeVar("_K", bound=Item)

MERSENNE_127 = 2**127 - 1
"""The prime modulus M of the hash family."""

EXACT_INT_BITS = 120
"""Integers in ``[0, 2**EXACT_INT_BITS)`` are encoded as themselves."""

MAX_COLUMNS = 2**32
"""Largest supported Q (keeps the mod-Q bias below 2^-90 relative)."""

INT64_MAX = 2**63 - 1

_HASH_DOMAIN = b"privstream/pdch-bf/bloom-hash/v1"
_ITEM_DOMAIN = b"privstream/pdch-bf/item/v1"
_DIGITS = 60  # decimal digits for ln and e; the ceilings below are exact unless a value is within 1e-55 of an integer


def bloom_rows(n: int, delta0: Fraction | int | float | str) -> int:
    """``P = ⌈ln(n/δ_0)⌉``, the number of rows (hash functions) of Theorem 2 (§4.2).

    ``ln`` is evaluated with 60 significant decimal digits on the exact rational ``n/δ_0``. Since e is
    transcendental, ``ln(n/δ_0)`` is never an integer for a rational ``n/δ_0 > 1``, so the ceiling is
    exact unless the logarithm lies within about 1e-55 of an integer.
    """
    n = check_int("n", n, type_error=ValueError)
    if isinstance(delta0, bool) or not isinstance(delta0, Fraction | int | float | str):
        raise ValueError(f"delta0: must be a real number, got {type(delta0).__name__}")
    d0 = Fraction(delta0) if isinstance(delta0, str) else exact_value(delta0)
    if not 0 < d0 < 1:
        raise ValueError(f"delta0: must lie in (0, 1), got {delta0}")
    ratio = Fraction(n) / d0
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        log = (decimal.Decimal(ratio.numerator) / decimal.Decimal(ratio.denominator)).ln()
        return int(log.to_integral_value(rounding=decimal.ROUND_CEILING))


def bloom_columns(k: int, beta: int) -> int:
    """``Q = ⌈e·k·β⌉``, the number of columns per row (§4.2; in PDCH-BF ``β = β_i`` per level, §4.3).

    ``e·k·β`` is irrational for ``kβ ≥ 1``, so the 60-digit ceiling is exact.
    """
    k = check_int("k", k, type_error=ValueError)
    beta = check_int("beta", beta, type_error=ValueError)
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        q = int((decimal.Decimal(1).exp() * k * beta).to_integral_value(rounding=decimal.ROUND_CEILING))
    if q >= MAX_COLUMNS:
        raise ValueError(f"Q = ⌈e·k·β⌉ = {q} exceeds the supported maximum {MAX_COLUMNS - 1}")
    return q


def new_hash_seed() -> bytes:
    """A fresh 256-bit public hash seed from the OS CSPRNG (drawn once at setup and published)."""
    return secrets.token_bytes(32)


def encode_item(x: Item) -> int:
    """The integer ``x'`` hashed for item ``x`` (see the module docstring); always ``< 2^121``."""
    if isinstance(x, bool):
        raise TypeError("items must be int, str or bytes, not bool")
    if isinstance(x, int):
        if 0 <= x < 2**EXACT_INT_BITS:
            return x
        payload = b"i" + x.to_bytes((x.bit_length() + 8) // 8, "big", signed=True)
    elif isinstance(x, str):
        payload = b"s" + x.encode("utf-8", "surrogatepass")
    elif isinstance(x, bytes | bytearray):
        payload = b"b" + bytes(x)
    else:
        raise TypeError(f"items must be int, str or bytes, not {type(x).__name__}")
    digest = hashlib.sha256(_ITEM_DOMAIN + payload).digest()
    return 2**EXACT_INT_BITS + (int.from_bytes(digest[:15], "big"))


def _row_coefficients(seed: bytes, row: int) -> tuple[int, int]:
    """``(a_p, b_p)``, each exactly uniform on ``Z_M`` in the random-oracle model (rejection sampling)."""
    out: list[int] = []
    counter = 0
    prefix = _HASH_DOMAIN + len(seed).to_bytes(4, "big") + seed + row.to_bytes(4, "big")
    while len(out) < 2:
        block = hashlib.sha256(prefix + counter.to_bytes(8, "big")).digest()
        counter += 1
        for half in (block[:16], block[16:]):
            candidate = int.from_bytes(half, "big") >> 1  # 127 bits
            if candidate < MERSENNE_127 and len(out) < 2:
                out.append(candidate)
    return out[0], out[1]


@dataclass(frozen=True)
class BloomHashFamily:
    """The public hash family ``{H_p : U → [Q]}_{p ∈ [P]}`` of §4.2, derived from a public seed.

    All nodes and the aggregator must build the family from the same ``(seed, rows, columns)``.
    """

    seed: bytes
    rows: int
    columns: int
    coefficients: tuple[tuple[int, int], ...] = field(repr=False)

    @classmethod
    def from_seed(cls, seed: bytes, rows: int, columns: int) -> BloomHashFamily:
        """Derive ``(a_p, b_p)`` for ``p = 0 .. rows−1`` from ``seed`` (documented in the module)."""
        if not isinstance(seed, bytes | bytearray):
            raise TypeError("seed must be bytes")
        rows = check_int("rows", rows, type_error=ValueError)
        columns = check_int("columns", columns, below=MAX_COLUMNS, type_error=ValueError)
        seed = bytes(seed)
        coeffs = tuple(_row_coefficients(seed, p) for p in range(rows))
        return cls(seed=seed, rows=rows, columns=columns, coefficients=coeffs)

    @property
    def shape(self) -> tuple[int, int]:
        """``(P, Q)``."""
        return (self.rows, self.columns)

    def index(self, row: int, x: Item) -> int:
        """``H_row(x) ∈ [0, Q)``."""
        a, b = self.coefficients[row]
        return ((a * encode_item(x) + b) % MERSENNE_127) % self.columns

    def indices(self, x: Item) -> tuple[int, ...]:
        """``(H_0(x), …, H_{P−1}(x))``."""
        xe = encode_item(x)
        q = self.columns
        return tuple(((a * xe + b) % MERSENNE_127) % q for a, b in self.coefficients)


class BloomTable:
    """A P × Q table of non-negative int64 counts over a :class:`BloomHashFamily` (§4.2).

    A node builds one with :meth:`from_counts` (its PMG output); the aggregator wraps the decoded sum of
    all nodes' tables with :meth:`from_cells` and reads items with :meth:`estimate` (the min-rule of
    Theorem 2).
    """

    __slots__ = ("family", "cells")

    def __init__(self, family: BloomHashFamily) -> None:
        self.family = family
        self.cells = np.zeros(family.shape, dtype=np.int64)

    @classmethod
    def from_counts(cls, family: BloomHashFamily, counts: Mapping[_K, int]) -> BloomTable:
        """The table ``A_v`` of a node whose PMG output is ``counts`` (zeros may be omitted)."""
        table = cls(family)
        table.insert(counts)
        return table

    @classmethod
    def from_cells(cls, family: BloomHashFamily, cells: np.ndarray | Iterable[Iterable[int]]) -> BloomTable:
        """Wrap existing cell values (e.g. the aggregator's decoded sum). Refuses negative cells, since
        the min-rule is only correct for non-negative tables."""
        arr = np.array(cells, dtype=np.int64)
        if arr.shape != family.shape:
            raise ValueError(f"cells have shape {arr.shape}, expected {family.shape}")
        if arr.size and int(arr.min()) < 0:
            raise ValueError("Bloom cells must be >= 0 (the min-rule of Theorem 2 needs non-negative tables)")
        table = cls(family)
        table.cells = arr
        return table

    def insert(self, counts: Mapping[_K, int]) -> None:
        """``A[p][H_p(x)] += c`` for every ``(x, c)`` with ``c ≠ 0``, all rows p. Refuses ``c < 0`` (PMG
        outputs are clamped at 0) and any cell leaving the int64 range."""
        updates: list[tuple[tuple[int, ...], int]] = []
        for x, c in counts.items():
            if isinstance(c, bool) or not isinstance(c, int | np.integer):
                raise TypeError(f"count for {x!r} must be an int, got {type(c).__name__}")
            c = int(c)
            if c < 0:
                raise ValueError(f"count for {x!r} is {c} < 0; Bloom tables take non-negative PMG outputs")
            if c:
                updates.append((self.family.indices(x), c))
        rows = range(self.family.rows)
        for idx, c in updates:
            for p, q in zip(rows, idx, strict=True):
                new = int(self.cells[p, q]) + c
                if new > INT64_MAX:
                    raise OverflowError(f"Bloom cell ({p}, {q}) would exceed the int64 range")
                self.cells[p, q] = new

    def estimate(self, x: Item) -> int:
        """``min_p A[p][H_p(x)]``: the retrieval rule of §4.2 (exact for all x w.p. ≥ 1 − δ_0, Theorem 2)."""
        return min(int(self.cells[p, q]) for p, q in enumerate(self.family.indices(x)))

    def estimates(self, universe: Iterable[Item]) -> dict[Item, int]:
        """:meth:`estimate` for every item of ``universe``."""
        return {x: self.estimate(x) for x in universe}

    def flat(self) -> np.ndarray:
        """The cells in row-major order (cell ``p·Q + q``), as a new int64 vector of length ``P·Q``."""
        return self.cells.reshape(-1).copy()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomTable):
            return NotImplemented
        return self.family == other.family and bool(np.array_equal(self.cells, other.cells))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BloomTable(P={self.family.rows}, Q={self.family.columns}, total={int(self.cells.sum())})"
