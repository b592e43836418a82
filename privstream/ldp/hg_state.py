"""The HG-LDP server's public state ("bulletin board", paper §2/§3) and its version history.

Clients randomise against the latest :class:`PublicState` they read; every report carries that
state's ``version``. The state is a function of earlier privatised reports and warm-up data only,
so publishing it is post-processing and costs no privacy budget. The server keeps the last
``max_lag + 1`` versions (:class:`StateHistory`) and debiases each report with the state the
client used; a report against an unknown or too-old version is refused with the reason
(:class:`StaleStateError`), never silently mixed.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from privstream.validation import check_int

DsrMode = Literal["full", "shrunk"]


class StaleStateError(ValueError):
    """A report names a state version the server does not hold; ``reason`` says which case."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PublicState:
    """What clients see: the heavy part's items (sorted IDs), whether the weakest heavy count is
    at most τ = 1 (an item is about to be evicted), and a version number."""

    version: int
    hot_items: tuple[int, ...]
    weakest_low: bool

    def __post_init__(self) -> None:
        check_int("version", self.version, minimum=0)
        if list(self.hot_items) != sorted(set(self.hot_items)):
            raise ValueError("hot_items: must be sorted and distinct")

    @property
    def dsr_mode(self) -> DsrMode:
        """DSR randomises over the whole domain while the weakest cell is low (§4.2), else over H ∪ {⊥}."""
        return "full" if self.weakest_low else "shrunk"


class StateHistory:
    """The published states the server still accepts reports against (newest last)."""

    def __init__(self, max_lag: int = 1024) -> None:
        self.max_lag = check_int("max_lag", max_lag, minimum=0)
        self._states: OrderedDict[int, PublicState] = OrderedDict()

    @property
    def latest(self) -> PublicState | None:
        return next(reversed(self._states.values())) if self._states else None

    def publish(self, hot_items: tuple[int, ...], weakest_low: bool) -> PublicState:
        """The current state, as a new version if it differs from the latest."""
        latest = self.latest
        if latest is not None and latest.hot_items == hot_items and latest.weakest_low == weakest_low:
            return latest
        state = PublicState(0 if latest is None else latest.version + 1, hot_items, weakest_low)
        self._states[state.version] = state
        while len(self._states) > self.max_lag + 1:
            self._states.popitem(last=False)
        return state

    def get(self, version: int) -> PublicState:
        """The state of ``version``, or :class:`StaleStateError` (reason ``unknown`` / ``too-old``)."""
        state = self._states.get(version)
        if state is not None:
            return state
        latest = self.latest
        if latest is None or version > latest.version or version < 0:
            raise StaleStateError("unknown", f"state_version: {version} was never published")
        raise StaleStateError(
            "too-old",
            f"state_version: {version} is older than the oldest kept ({latest.version - self.max_lag})",
        )

    def to_bytes(self) -> bytes:
        """Compact encoding: per version (version, flag, items removed, items added) against the
        previous kept version (a version usually replaces one hot item: ≈ 10 bytes, not k IDs)."""
        rows, previous = [], frozenset[int]()
        for state in self._states.values():
            hot = frozenset(state.hot_items)
            rows.append((state.version, state.weakest_low, tuple(previous - hot), tuple(hot - previous)))
            previous = hot
        return pickle.dumps((self.max_lag, rows), protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> StateHistory:
        """The history :meth:`to_bytes` encoded (from a checkpoint the job wrote itself)."""
        max_lag, rows = pickle.loads(data)
        history, hot = cls(max_lag), frozenset[int]()
        for version, weakest_low, removed, added in rows:
            hot = (hot - frozenset(removed)) | frozenset(added)
            history._states[version] = PublicState(version, tuple(sorted(hot)), weakest_low)
        return history
