"""HG-LDP client randomisers: BGR, DSR, BDR, CNR (Li et al., arXiv 2311.16062, §4).

Each client holds the latest :class:`~privstream.ldp.hg_state.PublicState` it read and
randomises an item ``v ∈ {0..d−1}`` against it; the report carries the state's version and digest. Every
random choice is an exact GRR draw (:class:`~privstream.ldp.grr.GeneralizedRandomizedResponse`,
one CSPRNG ``randbelow``) or a uniform ``randbelow``; no probability is a float.

The report's output is an item index in ``0..d−1`` or ⊥ (encoded as ``d``):

* BGR (Algorithm 1): GRR on D, ε.
* DSR (Algorithms 2–4): while the weakest heavy count is ≤ 1, GRR on D; otherwise GRR on
  H ∪ {⊥} with the cold items mapped to ⊥ (the shrunk domain of size λ_h + 1), ε.
* BDR (Algorithms 5–8): M1 randomises the bit [v ∈ H] (ε₁); on "hot" M2 (GRR within H, a cold v
  mapped to Uniform(H)); on "cold" M3 (GRR within D∖H, a hot v mapped to Uniform(D∖H)) if the
  weakest cell is about to be evicted, else ⊥ (ε₂ not spent). ε₁ + ε₂ = ε.
* CNR (Algorithm 10): as BDR but always M3 on "cold".

:meth:`HgLdpClient.encode_many` randomises many items against ONE state into an
:class:`~privstream.ldp.randomiser.LdpReportBatch`: :meth:`HgLdpClient.randomise_indices` runs
the same mechanism per report, vectorised — every GRR step is
:meth:`~privstream.ldp.grr.GeneralizedRandomizedResponse.randomise_indices` (one independent
uniform per report, exact), every uniform map one exact bulk uniform per report
(:func:`~privstream.noise.vectorised.uniform_below`), and the branch of each report is chosen as in
:meth:`randomise` (state and M1's flag only); so each report has exactly the distribution of
:meth:`output_distribution` and the reports are independent.

Which branch runs depends on the public state and M1's randomised flag only (:meth:`branch`),
never on ``v`` itself (docs/ldp.md, "Checks"). :meth:`output_distribution` gives the exact
distribution of the output for an input, composed from the same exact sub-mechanisms.
"""

from __future__ import annotations

from abc import abstractmethod
from bisect import bisect_left
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from privstream.ldp.grr import GeneralizedRandomizedResponse, int_indices
from privstream.ldp.hg_params import HgLdpParams
from privstream.ldp.hg_state import PublicState
from privstream.ldp.int_domain import check_value
from privstream.ldp.randomiser import (
    FrequencyAggregator,
    LdpReport,
    LdpReportBatch,
    LocalRandomiser,
    pack_outputs,
)
from privstream.noise.rng import RandomSource, resolve
from privstream.noise.vectorised import uniform_below


def cold_rank(item: int, hot: Sequence[int]) -> int:
    """Index of a cold ``item`` within D∖H (``hot`` sorted)."""
    return item - bisect_left(hot, item)


def cold_item(rank: int, hot: Sequence[int]) -> int:
    """The ``rank``-th item of D∖H (``hot`` sorted)."""
    item = rank
    for h in hot:
        if h <= item:
            item += 1
        else:
            break
    return item


def cold_items(ranks: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """:func:`cold_item` of every rank: the r-th item of D∖H is r plus the number of hot items h_j
    (sorted) with h_j − j ≤ r."""
    return ranks + np.searchsorted(hot - np.arange(hot.size), ranks, side="right")


def hot_positions(indices: np.ndarray, hot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of each index in the sorted ``hot`` — bisect_left —, whether it is hot)."""
    pos = np.searchsorted(hot, indices, side="left")
    return pos, hot[np.minimum(pos, hot.size - 1)] == indices


class HgLdpClient(LocalRandomiser):
    """Base of the four HG-LDP clients (see the module docstring)."""

    scheme: ClassVar[str]
    scheme_key: ClassVar[str]

    def __init__(self, params: HgLdpParams, *, rng: RandomSource | None = None) -> None:
        if not isinstance(params, HgLdpParams):
            raise TypeError(f"params: expected HgLdpParams, got {type(params).__name__}")
        if params.scheme != self.scheme_key:
            raise ValueError(f"params: scheme {params.scheme!r} does not match {self.scheme_key!r}")
        self.params = params
        self.d = params.domain_size
        self.bottom = params.domain_size  #: ⊥'s encoding
        self._rng = resolve(rng)
        self._width = max(1, (self.d.bit_length() + 7) // 8)
        self._canonical = LdpReport.canonical_parameters(params.public)
        self.state: PublicState | None = None

    @property
    def parameters(self) -> dict[str, str]:
        return dict(self._canonical)

    @property
    def effective_epsilon(self) -> float:
        return self.params.effective_epsilon

    def _grr(self, epsilon: Fraction, size: int) -> GeneralizedRandomizedResponse:
        return GeneralizedRandomizedResponse(epsilon, size, rng=self._rng)

    def update_state(self, state: PublicState) -> None:
        """Adopt the server's latest public state (reading it is free: it is public)."""
        if not isinstance(state, PublicState):
            raise TypeError(f"state: expected PublicState, got {type(state).__name__}")
        hot = state.hot_items
        if len(hot) != self.params.k:
            raise ValueError(f"state: needs exactly k = {self.params.k} hot items, got {len(hot)}")
        outside = [h for h in hot if not 0 <= h < self.d]  # sorted: only the ends can be outside
        if outside:
            raise ValueError(
                f"state: hot items must be item indices 0..{self.d - 1}; version {state.version} has {outside}"
            )
        self.state = state

    def _require_state(self) -> PublicState:
        if self.state is None:
            raise RuntimeError("state: no public state read yet (call update_state first)")
        return self.state

    def index_of(self, value: object) -> int:
        """The item's index; ValueError without echoing the (private) value."""
        return check_value(value, self.d)

    def encode(self, value: object) -> LdpReport:
        """Randomise ``value`` against the latest public state; the report carries its version and
        digest (without a state read, version 0 and no digest: an HG-LDP server refuses it)."""
        state = self.state
        output = self.randomise(self.index_of(value), state)
        return LdpReport(
            self.scheme,
            self._canonical,
            output.to_bytes(self._width, "big"),
            state_version=0 if state is None else state.version,
            state_digest=b"" if state is None else state.digest,
        )

    def encode_many(self, values: Sequence[Any] | np.ndarray) -> LdpReportBatch:
        """Randomise every value independently against the latest public state (:meth:`encode`'s
        mechanism, vectorised: :meth:`randomise_indices`), into one batch naming that state."""
        state = self.state
        indices = int_indices(values, self.d)
        if not indices.size:
            raise ValueError("values: a batch needs at least one value")
        outputs = self.randomise_indices(indices, state)
        return LdpReportBatch(
            self.scheme,
            self._canonical,
            pack_outputs(outputs, self._width),
            indices.size,
            state_version=0 if state is None else state.version,
            state_digest=b"" if state is None else state.digest,
        )

    @abstractmethod
    def randomise(self, index: int, state: PublicState | None) -> int:
        """The randomised output (an index, or ``d`` for ⊥) of item ``index``."""

    @abstractmethod
    def randomise_indices(self, indices: np.ndarray, state: PublicState | None) -> np.ndarray:
        """:meth:`randomise` of every entry (int64 array), independently (module docstring)."""

    @abstractmethod
    def output_distribution(self, index: int, state: PublicState | None) -> dict[int, Fraction]:
        """The exact output distribution for input ``index`` (outputs with probability > 0)."""

    def new_aggregator(self) -> FrequencyAggregator:
        from privstream.ldp.hg_server import HgLdpServer

        return HgLdpServer(self.params, rng=self._rng)


def _grr_distribution(index: int, size: int, p: Fraction, q: Fraction) -> dict[int, Fraction]:
    return {j: (p if j == index else q) for j in range(size)}


class BgrClient(HgLdpClient):
    """BGR: GRR on the whole domain (paper §4.1, Algorithm 1); ignores the public state."""

    scheme = "hg-bgr"
    scheme_key = "bgr"

    def __init__(self, params: HgLdpParams, *, rng: RandomSource | None = None) -> None:
        super().__init__(params, rng=rng)
        self._full = self._grr(params.ratio_epsilon, self.d)

    def randomise(self, index: int, state: PublicState | None) -> int:
        return self._full.randomise_index(index)

    def randomise_indices(self, indices: np.ndarray, state: PublicState | None) -> np.ndarray:
        return self._full.randomise_indices(indices)

    def output_distribution(self, index: int, state: PublicState | None) -> dict[int, Fraction]:
        return _grr_distribution(index, self.d, self._full.p, self._full.q)


class DsrClient(HgLdpClient):
    """DSR: domain shrinkage (paper §4.2, Algorithms 2–4)."""

    scheme = "hg-dsr"
    scheme_key = "dsr"

    def __init__(self, params: HgLdpParams, *, rng: RandomSource | None = None) -> None:
        super().__init__(params, rng=rng)
        self._full = self._grr(params.ratio_epsilon, self.d)
        self._shrunk = self._grr(params.ratio_epsilon, params.k + 1)

    @staticmethod
    def branch(state: PublicState) -> str:
        """The mechanism used: a function of the public state only."""
        return state.dsr_mode

    def _shrunk_input(self, index: int, hot: tuple[int, ...]) -> int:
        pos = bisect_left(hot, index)
        return pos if pos < len(hot) and hot[pos] == index else len(hot)

    def randomise(self, index: int, state: PublicState | None) -> int:
        state = self._require_state() if state is None else state
        if self.branch(state) == "full":
            return self._full.randomise_index(index)
        out = self._shrunk.randomise_index(self._shrunk_input(index, state.hot_items))
        return state.hot_items[out] if out < self.params.k else self.bottom

    def randomise_indices(self, indices: np.ndarray, state: PublicState | None) -> np.ndarray:
        state = self._require_state() if state is None else state
        if self.branch(state) == "full":
            return self._full.randomise_indices(indices)
        hot = np.array(state.hot_items, dtype=np.int64)
        pos, is_hot = hot_positions(indices, hot)
        out = self._shrunk.randomise_indices(np.where(is_hot, pos, hot.size))
        return np.where(out < hot.size, hot[np.minimum(out, hot.size - 1)], self.bottom)

    def output_distribution(self, index: int, state: PublicState | None) -> dict[int, Fraction]:
        state = self._require_state() if state is None else state
        if self.branch(state) == "full":
            return _grr_distribution(index, self.d, self._full.p, self._full.q)
        x = self._shrunk_input(index, state.hot_items)
        outputs = [*state.hot_items, self.bottom]
        return {
            outputs[j]: pr
            for j, pr in _grr_distribution(x, self.params.k + 1, self._shrunk.p, self._shrunk.q).items()
        }


class _SplitClient(HgLdpClient):
    """BDR and CNR: M1 (ε₁) on [v ∈ H], then M2 or M3 (ε₂), or ⊥ (BDR)."""

    def __init__(self, params: HgLdpParams, *, rng: RandomSource | None = None) -> None:
        super().__init__(params, rng=rng)
        self._m1 = self._grr(params.ratio1_epsilon, 2)
        self._m2 = self._grr(params.ratio2_epsilon, params.k)
        self._m3 = self._grr(params.ratio2_epsilon, self.d - params.k)

    @abstractmethod
    def branch(self, state: PublicState, flag_hot: bool) -> str:
        """ "m2", "m3" or "bottom" from the public state and M1's randomised flag only."""

    def m1(self, is_hot: bool) -> bool:
        """M1: the bit [v ∈ H] kept with probability p1 (binary RR)."""
        return self._m1.randomise_index(int(is_hot)) == 1

    def m2(self, index: int, hot: tuple[int, ...]) -> int:
        pos = bisect_left(hot, index)
        if pos < len(hot) and hot[pos] == index:
            return hot[self._m2.randomise_index(pos)]
        return hot[self._rng.randbelow(len(hot))]

    def m3(self, index: int, hot: tuple[int, ...]) -> int:
        pos = bisect_left(hot, index)
        if pos < len(hot) and hot[pos] == index:
            return cold_item(self._rng.randbelow(self.d - len(hot)), hot)
        return cold_item(self._m3.randomise_index(cold_rank(index, hot)), hot)

    def randomise(self, index: int, state: PublicState | None) -> int:
        state = self._require_state() if state is None else state
        hot = state.hot_items
        pos = bisect_left(hot, index)
        branch = self.branch(state, self.m1(pos < len(hot) and hot[pos] == index))
        if branch == "m2":
            return self.m2(index, hot)
        if branch == "m3":
            return self.m3(index, hot)
        return self.bottom

    def randomise_indices(self, indices: np.ndarray, state: PublicState | None) -> np.ndarray:
        state = self._require_state() if state is None else state
        hot = np.array(state.hot_items, dtype=np.int64)
        pos, is_hot = hot_positions(indices, hot)
        flags = self._m1.randomise_indices(is_hot.astype(np.int64)) == 1
        out = np.full(indices.size, self.bottom, dtype=np.int64)
        for flag in (True, False):
            lanes = np.flatnonzero(flags == flag)
            branch = self.branch(state, flag)
            if not lanes.size or branch == "bottom":
                continue
            lane_hot, lane_pos = is_hot[lanes], pos[lanes]
            hot_lanes, cold_lanes = lanes[lane_hot], lanes[~lane_hot]
            if branch == "m2":  # GRR within H for a hot v, Uniform(H) for a cold one
                out[hot_lanes] = hot[self._m2.randomise_indices(lane_pos[lane_hot])]
                out[cold_lanes] = hot[uniform_below(hot.size, cold_lanes.size, self._rng)]
            else:  # GRR within D∖H for a cold v (by its rank), Uniform(D∖H) for a hot one
                ranks = self._m3.randomise_indices(indices[cold_lanes] - lane_pos[~lane_hot])
                out[cold_lanes] = cold_items(ranks, hot)
                out[hot_lanes] = cold_items(uniform_below(self.d - hot.size, hot_lanes.size, self._rng), hot)
        return out

    def _branch_distribution(self, branch: str, index: int, hot: tuple[int, ...]) -> dict[int, Fraction]:
        if branch == "bottom":
            return {self.bottom: Fraction(1)}
        is_hot = index in hot
        if branch == "m2":
            if not is_hot:
                return {h: Fraction(1, len(hot)) for h in hot}
            dist = _grr_distribution(hot.index(index), len(hot), self._m2.p, self._m2.q)
            return {hot[j]: pr for j, pr in dist.items()}
        cold = [cold_item(j, hot) for j in range(self.d - len(hot))]
        if is_hot:
            return {c: Fraction(1, len(cold)) for c in cold}
        dist = _grr_distribution(cold_rank(index, hot), len(cold), self._m3.p, self._m3.q)
        return {cold[j]: pr for j, pr in dist.items()}

    def output_distribution(self, index: int, state: PublicState | None) -> dict[int, Fraction]:
        state = self._require_state() if state is None else state
        hot = state.hot_items
        p1, q1 = self._m1.p, self._m1.q
        keep_hot = p1 if index in hot else q1  # Pr[M1 says "hot"]
        out: dict[int, Fraction] = {}
        for flag, weight in ((True, keep_hot), (False, 1 - keep_hot)):
            for y, pr in self._branch_distribution(self.branch(state, flag), index, hot).items():
                out[y] = out.get(y, Fraction(0)) + weight * pr
        return out


class BdrClient(_SplitClient):
    """BDR: budget division with the ⊥ branch (paper §4.3, Algorithm 5)."""

    scheme = "hg-bdr"
    scheme_key = "bdr"

    def branch(self, state: PublicState, flag_hot: bool) -> str:
        if flag_hot:
            return "m2"
        return "m3" if state.weakest_low else "bottom"


class CnrClient(_SplitClient):
    """CNR: cold nomination, always M3 on the cold branch (paper §4.4, Algorithm 10)."""

    scheme = "hg-cnr"
    scheme_key = "cnr"

    def branch(self, state: PublicState, flag_hot: bool) -> str:
        return "m2" if flag_hot else "m3"


CLIENTS: dict[str, type[HgLdpClient]] = {
    "bgr": BgrClient,
    "dsr": DsrClient,
    "bdr": BdrClient,
    "cnr": CnrClient,
}


def make_client(params: HgLdpParams, *, rng: RandomSource | None = None) -> HgLdpClient:
    """The client randomiser of ``params.scheme``."""
    return CLIENTS[params.scheme](params, rng=rng)
