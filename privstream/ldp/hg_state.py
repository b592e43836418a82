"""The HG-LDP server's public state ("bulletin board", paper §2/§3) and its version history.

Clients randomise against the latest :class:`PublicState` they read; every report carries that
state's ``version`` and ``digest``. The state is a function of earlier privatised reports and
warm-up data only, so publishing it is post-processing and costs no privacy budget. The server
keeps the last ``max_lag + 1`` versions (:class:`StateHistory`) and debiases each report with the
state the client used; a report against an unknown or too-old version is refused with the reason
(:class:`StaleStateError`), never silently mixed.

A version number alone does not name a state: a server started afresh on the same topics counts
from 0 again, and a replay after a failure may publish a version with other contents than the
aborted attempt did (docs/ldp.md, "Versions of the public state"). Every state therefore carries a
*digest* that binds its contents to the server run that published it: SHA-256, truncated to 16
bytes, over a per-run random id (``run_id``, kept in the checkpointed history), the version and the
state's canonical bytes (:func:`state_digest`). The server refuses a report whose (version, digest)
is not a state it published in this run (:class:`StateDigestError`).
"""

from __future__ import annotations

import hashlib
import pickle
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from privstream.validation import check_int

DsrMode = Literal["full", "shrunk"]

#: Bytes of a run id (random, per server run) and of a state digest (SHA-256, truncated).
RUN_ID_BYTES = 16
DIGEST_BYTES = 16
_DIGEST_DOMAIN = b"privstream/hg-ldp-state/v1\x00"


class StaleStateError(ValueError):
    """A report names a state version the server does not hold; ``reason`` says which case."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class StateDigestError(ValueError):
    """A report's (version, digest) is not a state this server run published: the state of another
    run with the same version number, an aborted attempt's state, or no digest at all."""

    reason = "state digest mismatch"


def new_run_id() -> bytes:
    """A fresh random id for one server run (public: it only makes the digests of runs differ)."""
    return secrets.token_bytes(RUN_ID_BYTES)


def state_digest(run_id: bytes, version: int, hot_items: tuple[int, ...], weakest_low: bool) -> bytes:
    """SHA-256 (truncated to :data:`DIGEST_BYTES`) over a domain tag, the run id, the version and the
    state's canonical bytes (the flag, then the sorted hot items as 8-byte big-endian ints)."""
    canonical = b"".join(
        (
            _DIGEST_DOMAIN,
            len(run_id).to_bytes(2, "big"),
            run_id,
            version.to_bytes(8, "big"),
            b"\x01" if weakest_low else b"\x00",
            len(hot_items).to_bytes(4, "big"),
            *(int(item).to_bytes(8, "big") for item in hot_items),
        )
    )
    return hashlib.sha256(canonical).digest()[:DIGEST_BYTES]


@dataclass(frozen=True)
class PublicState:
    """What clients see: the heavy part's items (sorted IDs), whether the weakest heavy count is
    at most τ = 1 (an item is about to be evicted), a version number and the id of the server run
    that published it (:attr:`digest` binds all four)."""

    version: int
    hot_items: tuple[int, ...]
    weakest_low: bool
    run_id: bytes = b""

    def __post_init__(self) -> None:
        check_int("version", self.version, minimum=0)
        if list(self.hot_items) != sorted(set(self.hot_items)):
            raise ValueError("hot_items: must be sorted and distinct")
        if not isinstance(self.run_id, bytes):
            raise TypeError(f"run_id: expected bytes, got {type(self.run_id).__name__}")

    @property
    def dsr_mode(self) -> DsrMode:
        """DSR randomises over the whole domain while the weakest cell is low (§4.2), else over H ∪ {⊥}."""
        return "full" if self.weakest_low else "shrunk"

    @cached_property
    def digest(self) -> bytes:
        """:func:`state_digest` of this state (computed on first use and kept on the object: a
        kept version costs no checkpoint bytes, and the server checks every report against it)."""
        return state_digest(self.run_id, self.version, self.hot_items, self.weakest_low)


class StateHistory:
    """The published states the server still accepts reports against (newest last), all of one
    server run (``run_id``: random unless given, e.g. by a launcher that publishes version 0)."""

    def __init__(self, max_lag: int = 1024, run_id: bytes | None = None) -> None:
        self.max_lag = check_int("max_lag", max_lag, minimum=0)
        self.run_id = new_run_id() if run_id is None else run_id
        if not isinstance(self.run_id, bytes) or not self.run_id:
            raise ValueError("run_id: must be non-empty bytes")
        self._states: OrderedDict[int, PublicState] = OrderedDict()

    @property
    def latest(self) -> PublicState | None:
        return next(reversed(self._states.values())) if self._states else None

    def publish(self, hot_items: tuple[int, ...], weakest_low: bool) -> PublicState:
        """The current state, as a new version if it differs from the latest."""
        latest = self.latest
        if latest is not None and latest.hot_items == hot_items and latest.weakest_low == weakest_low:
            return latest
        version = 0 if latest is None else latest.version + 1
        state = PublicState(version, hot_items, weakest_low, self.run_id)
        self._states[state.version] = state
        while len(self._states) > self.max_lag + 1:
            self._states.popitem(last=False)
        return state

    def get(self, version: int, digest: bytes | None = None) -> PublicState:
        """The state of ``version``, or :class:`StaleStateError` (reason ``unknown`` / ``too-old``);
        with ``digest``, :class:`StateDigestError` unless it is that state's digest."""
        state = self._states.get(version)
        if state is not None:
            if digest is not None and digest != state.digest:
                what = (
                    "the report carries no state digest (refused: it cannot name a state of this run)"
                    if not digest
                    else f"the report's digest {digest.hex()} is not {state.digest.hex()}, the digest "
                    "of the state this server run published as that version (a state of another "
                    "server run, or of an aborted attempt)"
                )
                raise StateDigestError(f"state_version {version}: {what}")
            return state
        latest = self.latest
        if latest is None or version > latest.version or version < 0:
            raise StaleStateError("unknown", f"state_version: {version} was never published")
        raise StaleStateError(
            "too-old",
            f"state_version: {version} is older than the oldest kept ({latest.version - self.max_lag})",
        )

    def to_bytes(self) -> bytes:
        """Compact encoding: the run id, then per version (version, flag, items removed, items added)
        against the previous kept version (a version usually replaces one hot item: ≈ 10 bytes, not
        k IDs)."""
        rows, previous = [], frozenset[int]()
        for state in self._states.values():
            hot = frozenset(state.hot_items)
            rows.append((state.version, state.weakest_low, tuple(previous - hot), tuple(hot - previous)))
            previous = hot
        return pickle.dumps((self.max_lag, self.run_id, rows), protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> StateHistory:
        """The history :meth:`to_bytes` encoded (from a checkpoint the job wrote itself)."""
        fields = pickle.loads(data)
        if len(fields) != 3:
            raise ValueError(
                "versions: a checkpoint written before state digests (no run id); restore is not "
                "possible, start the deployment afresh"
            )
        max_lag, run_id, rows = fields
        history, hot = cls(max_lag, run_id), frozenset[int]()
        for version, weakest_low, removed, added in rows:
            hot = (hot - frozenset(removed)) | frozenset(added)
            history._states[version] = PublicState(version, tuple(sorted(hot)), weakest_low, run_id)
        return history
