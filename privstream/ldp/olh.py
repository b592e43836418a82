"""Optimised local hashing (OLH; Wang et al., USENIX Security 2017; HG-LDP paper App. A.1, Eq. 3–4).

Each report draws a fresh public hash ``H(x) = ((a·x + c) mod P) mod g`` (P = 2^31 − 1, a ∈ [1, P),
c ∈ [0, P) from the CSPRNG) and applies exact GRR (:class:`GeneralizedRandomizedResponse`) with
``g = round(e^ε) + 1`` on ``H(v)``; the report is (a, c, y). The server's support count is
``Ĉ_v = #{reports with H(v) = y}`` and ``ĉ(v) = (Ĉ_v − n/g)/(p − 1/g)`` (p is GRR's exact p on [g]).
The estimator assumes Pr[H(u) = H(v)] = 1/g for u ≠ v; this family is within g/P < 2^−25 of that.
The aggregator stores a d-sized count vector: memory grows linearly in d (the paper's baseline).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from privstream.ldp.grr import rational_exp_lower
from privstream.ldp.int_domain import IntDomainOracle, check_value
from privstream.ldp.randomiser import FrequencyAggregator, LdpReport
from privstream.noise.rng import RandomSource

PRIME = (1 << 31) - 1


class OptimisedLocalHashing(IntDomainOracle):
    """OLH on the domain ``0..d−1`` (see the module docstring)."""

    scheme = "olh"

    def __init__(
        self, epsilon: float | int | Fraction, domain_size: int, *, rng: RandomSource | None = None
    ) -> None:
        self.g = max(2, round(float(rational_exp_lower(epsilon))) + 1)
        if self.g >= PRIME:  # the hash family reaches only [P); y must also fit its 4 report bytes
            raise ValueError(f"epsilon: OLH needs g = round(e^ε) + 1 < 2^31 − 1 (ε < 21.4), got g = {self.g}")
        super().__init__(epsilon, domain_size, self.g, below=PRIME, rng=rng, extra={"g": str(self.g)})

    @property
    def p(self) -> Fraction:
        return self._grr.p

    def randomise(self, value: int) -> tuple[int, int, int]:
        """(a, c, y) for item ``value``."""
        check_value(value, self.d)
        a = 1 + self._rng.randbelow(PRIME - 1)
        c = self._rng.randbelow(PRIME)
        return a, c, self._grr.randomise_index(((a * value + c) % PRIME) % self.g)

    def encode(self, value: int) -> LdpReport:
        a, c, y = self.randomise(value)
        return LdpReport(
            self.scheme, self._canonical, a.to_bytes(4, "big") + c.to_bytes(4, "big") + y.to_bytes(4, "big")
        )

    def new_aggregator(self) -> OlhAggregator:
        return OlhAggregator(self)


class OlhAggregator(FrequencyAggregator):
    """Support counts of every item (d-sized), updated per report in O(d) numpy work."""

    def __init__(self, randomiser: OptimisedLocalHashing) -> None:
        self.randomiser = randomiser
        self.support = np.zeros(randomiser.d, dtype=np.int64)
        self._items = np.arange(randomiser.d, dtype=np.int64)
        self._n = 0

    @property
    def n(self) -> int:
        return self._n

    def add_output(self, a: int, c: int, y: int) -> None:
        self.support += ((a * self._items + c) % PRIME) % self.randomiser.g == y
        self._n += 1

    def add(self, report: LdpReport) -> None:
        if not self.randomiser.accepts(report) or len(report.payload) != 12:
            raise ValueError("report: not produced by this randomiser")
        raw = report.payload
        self.add_output(
            int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")
        )

    def estimate(self) -> np.ndarray:
        g = self.randomiser.g
        p = float(self.randomiser.p)
        return (self.support - self._n / g) / (p - 1 / g)

    def size_bytes(self) -> int:
        return 8 * self.randomiser.d


def olh_variance(epsilon: float, n: int) -> float:
    """Eq. (4) with g = e^ε + 1: Var ≈ n·4e^ε/(e^ε − 1)²."""
    e = math.exp(epsilon)
    return n * 4 * e / (e - 1) ** 2
