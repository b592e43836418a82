"""Hadamard response (HR; Acharya, Sun, Zhang AISTATS 2019; HG-LDP paper App. A.1, Eq. 5–7).

``K = 2^⌈log₂(d+1)⌉``; item v owns row ``v + 1`` of the Sylvester Hadamard matrix H_K and
``C_v = {j : popcount((v+1) & j) even}`` (the columns where that row is +1, |C_v| = K/2). The
client outputs a uniform column of C_v with probability ``r/(r+1)`` (r = e^ε rounded down to a/2^40,
as for GRR) and a uniform column of the complement otherwise: one uniform ``j`` in [0, K), then
XOR with the lowest set bit of v+1 if its parity is on the wrong side — exact, no floats.
The server counts columns (a K-sized vector, memory linear in d) and estimates, by a fast
Walsh–Hadamard transform T = H_K·counts, ``ĉ(v) = (r+1)/(r−1)·T[v+1]`` (= Eq. 6, since
``Ĉ_v = (n + T[v+1])/2``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privstream.ldp.grr import OutputCountAggregator
from privstream.ldp.int_domain import IntDomainOracle, check_value
from privstream.ldp.randomiser import LdpReport
from privstream.noise.rng import RandomSource


def fwht(values: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh–Hadamard transform (Sylvester order) of a length-2^m vector."""
    out = np.array(values, dtype=np.float64)
    h = 1
    n = out.size
    while h < n:
        view = out.reshape(-1, 2 * h)
        left = view[:, :h].copy()
        view[:, :h] += view[:, h:]
        view[:, h:] = left - view[:, h:]
        h *= 2
    return out


class HadamardResponse(IntDomainOracle):
    """HR on the domain ``0..d−1`` (see the module docstring); the inner GRR on 2 values is the
    side choice: "in C_v" with probability r/(r+1)."""

    scheme = "hr"

    def __init__(
        self, epsilon: float | int | Fraction, domain_size: int, *, rng: RandomSource | None = None
    ) -> None:
        super().__init__(epsilon, domain_size, 2, below=1 << 31, rng=rng)
        self.K = 1 << self.d.bit_length()  # smallest power of two > d, i.e. >= d + 1
        self._width = (self.K.bit_length() + 7) // 8

    def randomise(self, value: int) -> int:
        """The output column for item ``value``."""
        row = check_value(value, self.d) + 1
        inside = self._grr.randomise_index(1) == 1
        j = self._rng.randbelow(self.K)
        if ((row & j).bit_count() % 2 == 0) != inside:
            j ^= row & -row
        return j

    def encode(self, value: int) -> LdpReport:
        return LdpReport(self.scheme, self._canonical, self.randomise(value).to_bytes(self._width, "big"))

    def new_aggregator(self) -> HrAggregator:
        return HrAggregator(self)


class HrAggregator(OutputCountAggregator):
    """Column counts; :meth:`estimate` by one fast Walsh–Hadamard transform."""

    def __init__(self, randomiser: HadamardResponse) -> None:
        super().__init__(randomiser.K)
        self.randomiser = randomiser

    def add(self, report: LdpReport) -> None:
        if not self.randomiser.accepts(report):
            raise ValueError("report: not produced by this randomiser")
        column = int.from_bytes(report.payload, "big")
        if column >= self.randomiser.K:
            raise ValueError(f"report: column {column} outside 0..{self.randomiser.K - 1}")
        self.add_output(column)

    def estimate(self) -> np.ndarray:
        r = float(self.randomiser.ratio)
        transform = fwht(self.counts)
        return (r + 1) / (r - 1) * transform[1 : self.randomiser.d + 1]

    def size_bytes(self) -> int:
        return 8 * self.randomiser.K
