"""Generalised randomised response (GRR; Wang et al., USENIX Security 2017; Wu et al. HG-LDP §2.1, Eq. 1).

On a domain of size d, GRR outputs the true value with probability p and each other value with
probability q, where p/q = e^ε. The standard form ``p = e^ε/(e^ε+d−1)`` is irrational, so it cannot
be sampled exactly with integer randomness. We *rationalise* first:

- ``a/b`` is the largest fraction with ``b = 2^40`` and ``a/b ≤ e^ε`` (:func:`rational_exp_lower`,
  computed with :mod:`decimal` at high precision and rounded down with a safety margin);
- with ``W = a + b·(d−1)`` the mechanism outputs the true index with probability exactly ``p = a/W``
  and each other index with probability exactly ``q = b/W``, using ONE uniform integer
  ``u = rng.randbelow(W)``: ``u < a`` keeps the value, otherwise ``(u − a) // b`` picks one of the
  d − 1 other values. No floating point is involved.
- :meth:`GeneralizedRandomizedResponse.randomise_indices` is the same mechanism for many reports
  at once: one independent uniform ``u < W`` per report, drawn in bulk from the same source by exact
  rejection sampling on 64-bit words (:func:`privstream.noise.vectorised.uniform_below`; for
  ``W > 2^63`` report by report with ``randbelow``), then the same integer comparisons.
- So the realised mechanism is exactly ε'-LDP with ``ε' = ln(a/b) ≤ ε`` (ε' is below ε by less than
  ``2^-40·e^-ε`` relative), reported as ``effective_epsilon``; the privacy guarantee is never weaker
  than requested.

Server side, with n reports of which ``C_v`` equal v, the estimator
``ĉ(v) = (C_v − n·q)/(p − q) = (C_v·W − n·b)/(a − b)`` is exactly unbiased for the realised p, q
(``E[C_v] = c_v·p + (n − c_v)·q``), with ``Var[ĉ(v)] = (c_v·p(1−p) + (n−c_v)·q(1−q))/(p−q)^2``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

from privstream.ldp.randomiser import (
    FrequencyAggregator,
    LdpReport,
    LdpReportBatch,
    LocalRandomiser,
    pack_outputs,
)
from privstream.noise.rng import RandomSource, resolve
from privstream.noise.vectorised import MAX_WORD_BOUND, uniform_below

RATIO_DENOMINATOR_BITS = 40


def rational_exp_lower(
    epsilon: float | int | Fraction | Decimal, denominator_bits: int = RATIO_DENOMINATOR_BITS
) -> Fraction:
    """A guaranteed lower bound ``a / 2^bits`` of ``e^epsilon``: the largest one, unless
    ``e^epsilon · 2^bits`` lies less than a relative 10^-(p-5) above an integer (p = 60 + ⌊ε⌋/2 working
    digits), where it is one unit less. ``e^epsilon`` is computed correctly rounded to p digits and
    lowered by that relative margin, which exceeds the rounding error, before the floor."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, Fraction, Decimal)):
        raise TypeError(f"epsilon: expected a real number, got {type(epsilon).__name__}")
    if not math.isfinite(float(epsilon)) or epsilon <= 0:
        raise ValueError(f"epsilon: must be a finite number > 0, got {epsilon!r}")
    if float(epsilon) > 700:
        raise ValueError(f"epsilon: {epsilon!r} is too large to be meaningful for local DP (> 700)")
    b = 1 << denominator_bits
    precision = 60 + int(float(epsilon)) // 2
    with localcontext() as ctx:
        ctx.prec = precision
        if isinstance(epsilon, Fraction):
            eps = Decimal(epsilon.numerator) / Decimal(epsilon.denominator)
        else:
            eps = Decimal(epsilon)  # exact for int and float
        value = eps.exp()  # correctly rounded to `precision` digits
        value -= value.scaleb(-(precision - 5))  # margin above any rounding error: stays ≤ e^ε
        a = int((value * b).to_integral_value(rounding=ROUND_FLOOR))
    return Fraction(a, b)


def int_indices(values: Sequence[Any] | np.ndarray, d: int) -> np.ndarray:
    """``values`` as int64 item indices of ``0..d−1`` (an integer array is checked at once, other
    sequences value by value); ValueError without echoing a value outside it (values are private)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        indices = values.astype(np.int64, copy=False).ravel()
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= d):
            raise ValueError(f"value: not in the domain 0..{d - 1} (value withheld)")
        return indices
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < d:
            raise ValueError(f"value: not in the domain 0..{d - 1} (value withheld)")
        out.append(int(value))
    return np.array(out, dtype=np.int64)


def _domain_digest(domain: Sequence[int | str]) -> str:
    canonical = "\x1f".join(f"{'i' if isinstance(x, int) else 's'}:{x}" for x in domain)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


class GeneralizedRandomizedResponse(LocalRandomiser):
    """GRR with exactly rational p, q (see the module docstring).

    ``domain`` is either a size ``d`` (values are the ints ``0..d−1``) or a sequence of distinct
    items (ints or strs; values are those items, reported by index). ``rng`` defaults to the CSPRNG.
    """

    scheme = "grr"

    def __init__(
        self,
        epsilon: float | int | Fraction | Decimal,
        domain: int | Sequence[int | str],
        *,
        rng: RandomSource | None = None,
    ) -> None:
        if isinstance(domain, bool):
            raise TypeError("domain: expected an int size or a sequence of items, got bool")
        if isinstance(domain, int):
            if domain < 2:
                raise ValueError(f"domain: size must be >= 2, got {domain}")
            self.d = domain
            self.domain: tuple[int | str, ...] | None = None
            self._index: dict[Any, int] | None = None
        else:
            items = tuple(domain)
            for x in items:
                if isinstance(x, bool) or not isinstance(x, (int, str)):
                    raise TypeError(f"domain: items must be ints or strs, got {type(x).__name__}")
            if len(items) < 2:
                raise ValueError(f"domain: needs at least 2 items, got {len(items)}")
            index = {(type(x), x): i for i, x in enumerate(items)}
            if len(index) != len(items):
                raise ValueError("domain: items must be distinct")
            self.d = len(items)
            self.domain = items
            self._index = index
        ratio = rational_exp_lower(epsilon)
        if ratio <= 1:
            raise ValueError(
                f"epsilon: {epsilon!r} is too small (e^ε rounds to 1 at 2^-{RATIO_DENOMINATOR_BITS})"
            )
        self.epsilon = epsilon
        self.weight_true = ratio.numerator * ((1 << RATIO_DENOMINATOR_BITS) // ratio.denominator)
        self.weight_other = 1 << RATIO_DENOMINATOR_BITS
        self.total_weight = self.weight_true + self.weight_other * (self.d - 1)
        self.effective_epsilon = math.log(self.weight_true) - math.log(self.weight_other)
        self._rng = resolve(rng)
        self._width = max(1, ((self.d - 1).bit_length() + 7) // 8)
        params = {
            "epsilon_ratio": f"{self.weight_true}/{self.weight_other}",
            "effective_epsilon": repr(self.effective_epsilon),
            "domain_size": str(self.d),
        }
        if self.domain is not None:
            params["domain_digest"] = _domain_digest(self.domain)
        self._parameters = params
        self._canonical = LdpReport.canonical_parameters(params)

    @property
    def parameters(self) -> dict[str, str]:
        return dict(self._parameters)

    @property
    def p(self) -> Fraction:
        """Exact probability of reporting the true value."""
        return Fraction(self.weight_true, self.total_weight)

    @property
    def q(self) -> Fraction:
        """Exact probability of reporting one given other value."""
        return Fraction(self.weight_other, self.total_weight)

    def index_of(self, value: int | str) -> int:
        """Domain index of ``value`` (ValueError without echoing the value, which is private)."""
        if self._index is None:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < self.d:
                raise ValueError(f"value: not in the domain 0..{self.d - 1} (value withheld)")
            return int(value)
        key = (int, int(value)) if isinstance(value, np.integer) else (type(value), value)
        index = self._index.get(key)
        if index is None:
            raise ValueError("value: not in the randomiser's domain (value withheld)")
        return index

    def randomise_index(self, index: int) -> int:
        """The randomised output index for true index ``index`` (one ``randbelow`` call)."""
        u = self._rng.randbelow(self.total_weight)
        if u < self.weight_true:
            return index
        other = (u - self.weight_true) // self.weight_other
        return other if other < index else other + 1

    def randomise_indices(self, indices: np.ndarray) -> np.ndarray:
        """:meth:`randomise_index` of every entry of ``indices`` (int64 array of true indices),
        independently: one uniform ``u < W`` per report from this randomiser's source (in bulk,
        exactly: module docstring), the same comparisons; the same output distribution per report."""
        indices = np.asarray(indices, dtype=np.int64)
        if self.total_weight > MAX_WORD_BOUND:  # beyond int64: the scalar path, report by report
            return np.array([self.randomise_index(i) for i in indices.tolist()], dtype=np.int64)
        u = uniform_below(self.total_weight, indices.size, self._rng)
        other = (u - self.weight_true) // self.weight_other  # negative where the value is kept
        return np.where(u < self.weight_true, indices, other + (other >= indices))

    def indices_of(self, values: Sequence[Any] | np.ndarray) -> np.ndarray:
        """:meth:`index_of` of every value (int64 array)."""
        if self._index is None:
            return int_indices(values, self.d)
        return np.array([self.index_of(v) for v in values], dtype=np.int64)

    def encode(self, value: int | str) -> LdpReport:
        output = self.randomise_index(self.index_of(value))
        return LdpReport(self.scheme, self._canonical, output.to_bytes(self._width, "big"))

    def encode_many(self, values: Sequence[Any] | np.ndarray) -> LdpReportBatch:
        """Every value randomised independently (:meth:`randomise_indices`), one batch in order."""
        indices = self.indices_of(values)
        if not indices.size:
            raise ValueError("values: a batch needs at least one value")
        outputs = self.randomise_indices(indices)
        return LdpReportBatch(self.scheme, self._canonical, pack_outputs(outputs, self._width), indices.size)

    def decode_index(self, report: LdpReport) -> int:
        """The reported index (server side); ValueError if the report is not from this randomiser."""
        if not self.accepts(report):
            raise ValueError("report: not produced by this randomiser (scheme or parameters differ)")
        if len(report.payload) != self._width:
            raise ValueError(f"report: payload must be {self._width} bytes, got {len(report.payload)}")
        index = int.from_bytes(report.payload, "big")
        if index >= self.d:
            raise ValueError(f"report: index {index} outside the domain of size {self.d}")
        return index

    def estimate_counts(self, counts: np.ndarray, n: int) -> np.ndarray:
        """``ĉ(v) = (C_v·W − n·b)/(a − b)`` for observed output counts ``C`` of ``n`` reports."""
        counts = np.asarray(counts, dtype=np.float64)
        return (counts * self.total_weight - n * self.weight_other) / (self.weight_true - self.weight_other)

    def estimate_exact(self, count: int, n: int) -> Fraction:
        """The estimator as an exact fraction."""
        return Fraction(
            count * self.total_weight - n * self.weight_other, self.weight_true - self.weight_other
        )

    def variance(self, true_count: int, n: int) -> float:
        """``Var[ĉ(v)]`` for a value held by ``true_count`` of ``n`` reporters."""
        p, q = self.p, self.q
        var = (true_count * p * (1 - p) + (n - true_count) * q * (1 - q)) / (p - q) ** 2
        return float(var)

    def new_aggregator(self) -> GrrAggregator:
        return GrrAggregator(self)


class OutputCountAggregator(FrequencyAggregator):
    """Base for aggregators that count each of ``size`` possible outputs (GRR, HR)."""

    def __init__(self, size: int) -> None:
        self.counts = np.zeros(size, dtype=np.int64)
        self._n = 0

    @property
    def n(self) -> int:
        return self._n

    def add_output(self, output: int) -> None:
        self.counts[output] += 1
        self._n += 1


class GrrAggregator(OutputCountAggregator):
    """Counts GRR outputs; :meth:`estimate` gives the unbiased frequency of every domain index."""

    def __init__(self, randomiser: GeneralizedRandomizedResponse) -> None:
        super().__init__(randomiser.d)
        self.randomiser = randomiser

    def add(self, report: LdpReport) -> None:
        self.add_output(self.randomiser.decode_index(report))

    def estimate(self) -> np.ndarray:
        return self.randomiser.estimate_counts(self.counts, self._n)

    def estimate_items(self) -> dict[int | str, float]:
        """Estimates keyed by domain item (or index when the domain is a size)."""
        domain = self.randomiser.domain or range(self.randomiser.d)
        return dict(zip(domain, self.estimate().tolist(), strict=True))
