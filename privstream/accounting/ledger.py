"""A persistent privacy ledger that refuses releases beyond the total budget, as a hash chain of
constant-size entries.

Every release is *charged* before its noise is drawn and before it is published: ``charge`` checks
the budget, appends an entry, and (if an ``on_charge`` persistence hook is given) hands the
serialised ledger state to the hook before returning. If the hook fails the entry is rolled back and
the error propagates, so a release can never be published without its charge being durable.

Composition (see :mod:`privstream.accounting.budget`):

* ``"sequential"`` (default; e.g. user-level budgets across epochs): spent = Σ over all entries.
* ``"parallel_epochs"`` (event-level DP over disjoint epochs): entries with the same epoch compose
  sequentially, distinct epochs in parallel; an entry with ``epoch=None`` covers all data and is
  added to every epoch. spent = Σ(None entries) + max over epochs of Σ(that epoch's entries).
  The ledger keeps that exactly for epochs charged in non-decreasing order (the job's order): the
  running max over the earlier epochs plus the sum of the latest. A charge to an *earlier* epoch
  is composed conservatively, as if it fell on the most-charged epoch so far (never less than the
  exact rule: refusing too much is safe, forgetting spend is not).

Entries (:class:`LedgerEntry`): each holds its own release (charge as exact fractions, mechanism,
epoch, label, writer), the ledger's identity (id, total, composition), the exact running
totals *after* it (:class:`RunningTotals`), its sequence number (1, 2, …), the SHA-256 hash of its
predecessor (the first entry's predecessor is the ledger's genesis hash, over its identity) and its
own hash over a canonical JSON encoding of all of that. Nothing in it depends on when it was
written (a wall-clock time is for the record carrying it), so an epoch replayed after a failure
from the same state charges a byte-identical entry. An entry's size and the work per charge are
therefore O(1) in the number of past releases, and the latest entry alone is the ledger's state.
:meth:`PrivacyLedger.apply` extends a ledger by one entry only if it is the next one
(sequence + 1), links to the current head and its totals add up; a gap, a reorder, an edit or a
fork by a second writer raises :class:`LedgerFormatError`. An exact copy of the head entry (same
hash: a redelivered record) changes nothing and is accepted. The hashes detect corruption, gaps,
reorders and accidental edits; they are not a signature (a writer with access to the topic can
forge a consistent chain: protect it with ACLs).

Serialisation of the state (``to_bytes``/``to_json``): JSON with a format name, version 2, the
ledger's identity, the writer and the head entry, with a SHA-256 checksum; O(1) in size. Loading
verifies all of it (:class:`LedgerFormatError` otherwise), re-attaches an ``on_charge`` hook if
given and, given the ``previous`` in-memory copy, refuses a snapshot behind it (a stale snapshot
would forget spent budget). Version-1 states (the whole history, written by earlier releases) are
migrated on load into an equivalent state whose head is a ``migrated`` entry carrying the totals.

Stale snapshots: :func:`most_advanced` picks the later of two states of one ledger (e.g. a restored
checkpoint's and the latest one on the ledger topic) by sequence number; equal sequence numbers must
have the same head, and the later state's totals must not be below the earlier one's
(:class:`LedgerFormatError` otherwise: a fork).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from privstream.accounting.budget import AnyBudget, Budget, ZCDPBudget, budget_from_dict
from privstream.validation import check_int

_STATE_FORMAT = "privstream-ledger"
_ENTRY_FORMAT = "privstream-ledger-entry"
_VERSION = 2
_MAGIC = b"PSLEDGER"
_COMPOSITIONS = ("sequential", "parallel_epochs")
PARALLEL = "parallel_epochs"


def parallel_epochs(partition: str) -> str:
    """The composition of a ledger whose epochs are cut by ``partition`` (a public description of
    the epoch boundaries, e.g. ``"time:60000ms"`` or ``"count:1000"``): ``parallel_epochs/<partition>``.

    Epoch numbers only name disjoint data under one partition: epoch 3 of 1-minute epochs and
    epoch 3 of 10-minute epochs are different time slices, so a ledger that took charges from both
    would compose overlapping data in parallel and under-count. The partition is part of the
    ledger's identity (its genesis hash and every entry), so a graph with another partition cannot
    charge an existing ledger: :func:`~privstream.connectors.ledger_topic.read_ledger` refuses it
    (fail closed) and names both."""
    if not isinstance(partition, str) or not partition or not partition.isprintable():
        raise ValueError(f"partition must be a non-empty printable string, got {partition!r}")
    return f"{PARALLEL}/{partition}"


def is_parallel(composition: str) -> bool:
    """Whether ``composition`` composes disjoint epochs in parallel (with or without a partition)."""
    return composition == PARALLEL or composition.startswith(PARALLEL + "/")


def valid_composition(composition: object) -> bool:
    """One of :data:`_COMPOSITIONS`, or ``parallel_epochs/<partition>`` with a printable partition."""
    if not isinstance(composition, str):
        return False
    rule, slash, partition = composition.partition("/")
    return composition in _COMPOSITIONS or (
        rule == PARALLEL and bool(partition) and composition.isprintable()
    )


_KINDS: dict[str, type[Budget] | type[ZCDPBudget]] = {"dp": Budget, "zcdp": ZCDPBudget}
MIGRATED = "migrated"  #: mechanism of the entry a version-1 state is migrated into

Amounts = tuple[Fraction, ...]


class BudgetExceeded(RuntimeError):
    """A charge would take the ledger beyond its total budget; nothing was recorded."""


class LedgerFormatError(ValueError):
    """Serialised ledger or entry is corrupt, truncated, of an unknown version, out of chain order,
    or stale."""


# ---- exact amounts --------------------------------------------------------------------------------


def _add(a: Amounts, b: Amounts) -> Amounts:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _max(a: Amounts, b: Amounts) -> Amounts:
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def _text(values: Amounts) -> list[str]:
    return [f"{v.numerator}/{v.denominator}" for v in values]


def _amounts(values: object, width: int, what: str) -> Amounts:
    """Exact non-negative fractions ``"p/q"`` of the given count."""
    if not isinstance(values, list) or len(values) != width or not all(isinstance(v, str) for v in values):
        raise LedgerFormatError(f"{what}: expected {width} fractions 'p/q', got {values!r}")
    try:
        out = tuple(Fraction(v) for v in values)
    except (ValueError, ZeroDivisionError) as exc:
        raise LedgerFormatError(f"{what}: not an exact fraction: {exc}") from None
    if any(v < 0 for v in out):
        raise LedgerFormatError(f"{what}: negative amount {values!r}")
    return out


def _budget_dict(budget: AnyBudget) -> dict[str, Any]:
    return {"kind": budget.to_dict()["kind"], "exact": _text(budget.exact)}


def _budget_of(data: object, what: str) -> AnyBudget:
    """Inverse of :func:`_budget_dict`; the fractions must be exactly the budget's (floats' decimals)."""
    if not isinstance(data, dict) or data.get("kind") not in _KINDS:
        raise LedgerFormatError(f"{what}: unknown budget {data!r}")
    kind = _KINDS[data["kind"]]
    width = 2 if kind is Budget else 1
    exact = _amounts(data.get("exact"), width, what)
    try:
        budget = kind(*(float(v) for v in exact))
    except (TypeError, ValueError) as exc:
        raise LedgerFormatError(f"{what}: invalid budget: {exc}") from None
    if budget.exact != exact:
        raise LedgerFormatError(f"{what}: {_text(exact)} is not the exact value of a budget")
    return budget


@dataclass(frozen=True)
class RunningTotals:
    """Exact running totals of a ledger, enough to compose the next charge in O(1).

    ``everywhere``: the charges without an epoch (every charge under sequential composition);
    ``closed_max``: per component, the largest sum of one epoch before ``current_epoch``;
    ``current``: the sum of ``current_epoch``'s charges (parallel_epochs only)."""

    everywhere: Amounts
    closed_max: Amounts
    current_epoch: int | None
    current: Amounts

    @classmethod
    def zero(cls, width: int) -> RunningTotals:
        nothing = tuple(Fraction(0) for _ in range(width))
        return cls(nothing, nothing, None, nothing)

    def spent(self) -> Amounts:
        """Σ(charges on all data) + max over epochs of that epoch's sum (componentwise)."""
        return _add(self.everywhere, _max(self.closed_max, self.current))

    def after(self, charge: Amounts, epoch: int | None, composition: str) -> RunningTotals:
        """The totals once ``charge`` (for ``epoch``) is added under ``composition``."""
        if not is_parallel(composition) or epoch is None:
            return RunningTotals(
                _add(self.everywhere, charge), self.closed_max, self.current_epoch, self.current
            )
        if self.current_epoch is None or epoch > self.current_epoch:  # a new epoch starts
            return RunningTotals(self.everywhere, _max(self.closed_max, self.current), epoch, charge)
        if epoch == self.current_epoch:
            return RunningTotals(self.everywhere, self.closed_max, epoch, _add(self.current, charge))
        # an earlier epoch: its own sum is not kept; it is at most the largest epoch sum so far
        worst = _add(_max(self.closed_max, self.current), charge)
        return RunningTotals(self.everywhere, worst, self.current_epoch, self.current)

    def covers(self, other: RunningTotals) -> bool:
        """Whether these totals are at or above ``other``'s (a later state of the same ledger)."""
        pairs = zip((*self.everywhere, *self.spent()), (*other.everywhere, *other.spent()), strict=True)
        return all(a >= b for a, b in pairs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "everywhere": _text(self.everywhere),
            "closed_max": _text(self.closed_max),
            "current_epoch": self.current_epoch,
            "current": _text(self.current),
        }

    @classmethod
    def from_dict(cls, data: object, width: int) -> RunningTotals:
        if not isinstance(data, dict):
            raise LedgerFormatError(f"totals: expected an object, got {data!r}")
        epoch = data.get("current_epoch")
        if epoch is not None:
            check_int("totals current_epoch", epoch, minimum=None, type_error=LedgerFormatError)
        return cls(
            _amounts(data.get("everywhere"), width, "totals everywhere"),
            _amounts(data.get("closed_max"), width, "totals closed_max"),
            epoch,
            _amounts(data.get("current"), width, "totals current"),
        )


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sha256(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body)).hexdigest()


def genesis_hash(ledger_id: str, total: AnyBudget, composition: str) -> str:
    """The chain's root: the hash the first entry links to, over the ledger's identity."""
    return _sha256(
        {
            "format": _ENTRY_FORMAT,
            "ledger_id": ledger_id,
            "total": _budget_dict(total),
            "composition": composition,
        }
    )


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release, chained to its predecessor; ``totals`` are the ledger's after it."""

    ledger_id: str
    sequence: int
    prev_hash: str
    budget: AnyBudget
    mechanism: str
    epoch: int | None
    label: str
    writer: str
    totals: RunningTotals
    total: AnyBudget
    composition: str
    entry_hash: str

    @classmethod
    def create(
        cls,
        ledger_id: str,
        sequence: int,
        prev_hash: str,
        budget: AnyBudget,
        totals: RunningTotals,
        *,
        total: AnyBudget,
        composition: str,
        mechanism: str = "",
        epoch: int | None = None,
        label: str = "",
        writer: str = "",
    ) -> LedgerEntry:
        """A new entry with its hash computed."""
        draft = cls(
            ledger_id, sequence, prev_hash, budget, mechanism, epoch, label, writer, totals,
            total, composition, "",
        )  # fmt: skip
        return replace(draft, entry_hash=_sha256(draft._body()))

    def _body(self) -> dict[str, Any]:
        return {
            "format": _ENTRY_FORMAT,
            "version": _VERSION,
            "ledger_id": self.ledger_id,
            "sequence": self.sequence,
            "prev_hash": self.prev_hash,
            "charge": _budget_dict(self.budget),
            "mechanism": self.mechanism,
            "epoch": self.epoch,
            "label": self.label,
            "writer": self.writer,
            "totals": self.totals.to_dict(),
            "total": _budget_dict(self.total),
            "composition": self.composition,
        }

    @property
    def spent(self) -> AnyBudget:
        """The ledger's spent budget after this entry (floats; the exact values are in ``totals``)."""
        return type(self.total)(*(float(v) for v in self.totals.spent()))

    def to_dict(self) -> dict[str, Any]:
        return {**self._body(), "hash": self.entry_hash}

    def to_bytes(self) -> bytes:
        """Canonical JSON (what the hash is over, plus the hash)."""
        return _canonical(self.to_dict())

    @classmethod
    def from_dict(cls, data: object) -> LedgerEntry:
        """Parse and verify an entry's own hash (not its place in a chain: :meth:`PrivacyLedger.apply`)."""
        if not isinstance(data, dict):
            raise LedgerFormatError(f"ledger entry: expected an object, got {type(data).__name__}")
        if data.get("format") != _ENTRY_FORMAT or data.get("version") != _VERSION:
            raise LedgerFormatError(
                f"unsupported ledger entry format/version {data.get('format')!r}/{data.get('version')!r}"
            )
        try:
            total = _budget_of(data["total"], "entry total")
            epoch = data["epoch"]
            if epoch is not None:
                check_int("entry epoch", epoch, minimum=None, type_error=LedgerFormatError)
            strings = {
                name: data[name] for name in ("ledger_id", "prev_hash", "mechanism", "label", "writer")
            }
            if (
                not all(isinstance(v, str) for v in strings.values())
                or not strings["ledger_id"]
                or not isinstance(data["hash"], str)
                or not valid_composition(data["composition"])
            ):
                raise LedgerFormatError("malformed text fields or composition")  # prefixed below
            budget = _budget_of(data["charge"], "entry charge")
            if type(budget) is not type(total):
                raise LedgerFormatError("charge kind differs from the total's")  # prefixed below
            entry = cls(
                strings["ledger_id"],
                check_int("entry sequence", data["sequence"], minimum=1, type_error=LedgerFormatError),
                strings["prev_hash"],
                budget,
                strings["mechanism"],
                epoch,
                strings["label"],
                strings["writer"],
                RunningTotals.from_dict(data["totals"], len(total.exact)),
                total,
                data["composition"],
                data["hash"],
            )
        except KeyError as exc:
            raise LedgerFormatError(f"ledger entry: missing field {exc}") from None
        except ValueError as exc:  # check_int's range errors
            raise LedgerFormatError(f"ledger entry: {exc}") from None
        if _sha256(entry._body()) != entry.entry_hash:
            raise LedgerFormatError(f"ledger entry #{entry.sequence}: hash mismatch (corrupt or edited)")
        return entry

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerEntry:
        """:meth:`to_bytes` counterpart; raises :class:`LedgerFormatError`."""
        try:
            return cls.from_dict(json.loads(bytes(data)))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LedgerFormatError(f"ledger entry is not JSON (truncated or corrupt): {exc}") from None


# ---- the ledger -------------------------------------------------------------------------------------


class PrivacyLedger:
    """Records every release against a total (ε, δ) or ρ-zCDP budget and refuses overspending.

    Holds O(1) state: its identity, the ``writer`` stamped into new entries (e.g. the job instance)
    and the head entry (``None`` while empty)."""

    def __init__(
        self,
        total: AnyBudget,
        *,
        composition: str = "sequential",
        on_charge: Callable[[bytes], None] | None = None,
        ledger_id: str | None = None,
        writer: str = "",
    ) -> None:
        if not isinstance(total, Budget | ZCDPBudget):
            raise TypeError(f"total must be a Budget or ZCDPBudget, not {type(total).__name__}")
        if not valid_composition(composition):
            raise ValueError(
                f"composition must be one of {_COMPOSITIONS} or parallel_epochs('<partition>'), "
                f"got {composition!r}"
            )
        if ledger_id is not None and (not isinstance(ledger_id, str) or not ledger_id):
            raise ValueError(f"ledger_id must be a non-empty string, got {ledger_id!r}")
        if not isinstance(writer, str):
            raise TypeError(f"writer must be a str, not {type(writer).__name__}")
        self._total = total
        self._composition = composition
        self._on_charge = on_charge
        self._id = ledger_id if ledger_id is not None else secrets.token_hex(8)
        self._writer = writer
        self._head: LedgerEntry | None = None
        self._genesis = genesis_hash(self._id, total, composition)

    # ---- state -------------------------------------------------------------------------------
    @property
    def total(self) -> AnyBudget:
        return self._total

    @property
    def composition(self) -> str:
        return self._composition

    @property
    def ledger_id(self) -> str:
        return self._id

    @property
    def writer(self) -> str:
        """Stamped into the entries this object charges (the job instance that wrote them)."""
        return self._writer

    @writer.setter
    def writer(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"writer must be a str, not {type(value).__name__}")
        self._writer = value

    @property
    def head(self) -> LedgerEntry | None:
        """The latest entry (``None`` for an empty ledger)."""
        return self._head

    @property
    def sequence(self) -> int:
        """How many entries the ledger has (the head's sequence number)."""
        return 0 if self._head is None else self._head.sequence

    @property
    def head_hash(self) -> str:
        """The hash the next entry links to (the genesis hash while empty)."""
        return self._genesis if self._head is None else self._head.entry_hash

    @property
    def totals(self) -> RunningTotals:
        return RunningTotals.zero(len(self._total.exact)) if self._head is None else self._head.totals

    def _budget(self, amounts: Amounts, *, floor: bool = False) -> AnyBudget:
        return type(self._total)(*(float(max(v, Fraction(0)) if floor else v) for v in amounts))

    def spent(self) -> AnyBudget:
        """Budget spent so far under the ledger's composition rule."""
        return self._budget(self.totals.spent())

    def remaining(self) -> AnyBudget:
        """Total minus spent, componentwise (never negative)."""
        spent = self.totals.spent()
        return self._budget(tuple(t - s for t, s in zip(self._total.exact, spent, strict=True)), floor=True)

    def _over(self, totals: RunningTotals) -> bool:
        return any(s > t for s, t in zip(totals.spent(), self._total.exact, strict=True))

    def _next_entry(self, budget: AnyBudget, epoch: int | None, mechanism: str, label: str) -> LedgerEntry:
        if type(budget) is not type(self._total):
            raise TypeError(
                f"budget must be a {type(self._total).__name__} like the ledger total, not {type(budget).__name__}"
            )
        if epoch is not None:
            check_int("epoch", epoch, minimum=None)
        after = self.totals.after(budget.exact, epoch, self._composition)
        if self._over(after):
            raise BudgetExceeded(
                f"charging {budget} (epoch {epoch}) would spend {tuple(float(v) for v in after.spent())} "
                f"> total {self._total}; already spent {self.spent()}"
            )
        return LedgerEntry.create(
            self._id,
            self.sequence + 1,
            self.head_hash,
            budget,
            after,
            total=self._total,
            composition=self._composition,
            mechanism=str(mechanism),
            epoch=epoch,
            label=str(label),
            writer=self._writer,
        )

    def can_charge(self, budget: AnyBudget, epoch: int | None = None) -> bool:
        """Whether :meth:`charge` would accept ``budget`` now."""
        try:
            self._next_entry(budget, epoch, "", "")
        except BudgetExceeded:
            return False
        return True

    def charge(
        self, budget: AnyBudget, *, mechanism: str, epoch: int | None = None, label: str = ""
    ) -> LedgerEntry:
        """Record a release of cost ``budget``; raise :class:`BudgetExceeded` (recording nothing)
        if it would exceed the total. The persistence hook runs before this returns. O(1)."""
        entry = self._next_entry(budget, epoch, mechanism, label)
        previous, self._head = self._head, entry
        if self._on_charge is not None:
            try:
                self._on_charge(self.to_bytes())
            except BaseException:
                self._head = previous
                raise
        return entry

    def apply(self, entry: LedgerEntry) -> bool:
        """Extend the ledger by ``entry`` read back from storage, checking that it is the next link
        of the chain: same ledger, sequence + 1, links to the head, totals that add up, within the
        total. An exact copy of the head (a redelivered record) changes nothing: returns False.
        Anything else raises :class:`LedgerFormatError` saying what is wrong. O(1)."""
        self._check_identity(entry)
        if self._head is not None and entry.entry_hash == self._head.entry_hash:
            return False
        where = f"ledger {self._id!r}: entry #{entry.sequence} (writer {entry.writer or '?'})"
        if entry.sequence <= self.sequence:
            raise LedgerFormatError(
                f"{where} after #{self.sequence}: reordered, replayed, or a second writer forked the ledger"
                + self._fork_hint(entry)
            )
        if entry.sequence > self.sequence + 1:
            raise LedgerFormatError(f"{where} after #{self.sequence}: entries are missing (a gap)")
        if entry.prev_hash != self.head_hash:
            raise LedgerFormatError(
                f"{where} does not link to #{self.sequence}: edited, or a second writer forked the ledger"
                + self._fork_hint(entry)
            )
        if entry.totals != self.totals.after(entry.budget.exact, entry.epoch, self._composition):
            raise LedgerFormatError(f"{where}: its running totals do not add up (edited)")
        if self._over(entry.totals):
            raise LedgerFormatError(f"{where}: spends beyond the total {self._total}")
        self._head = entry
        return True

    def _fork_hint(self, entry: LedgerEntry) -> str:
        head = self._head
        if head is None or head.writer == entry.writer:
            return ""
        return f" (head #{head.sequence} was written by {head.writer or '?'}, this entry by {entry.writer or '?'})"

    def _check_identity(self, entry: LedgerEntry) -> None:
        if not isinstance(entry, LedgerEntry):
            raise TypeError(f"entry must be a LedgerEntry, not {type(entry).__name__}")
        if entry.ledger_id != self._id:
            raise LedgerFormatError(f"entry of ledger {entry.ledger_id!r} applied to ledger {self._id!r}")
        if entry.total != self._total or entry.composition != self._composition:
            raise LedgerFormatError(
                f"ledger {self._id!r}: entry #{entry.sequence} states total/composition "
                f"{entry.total}/{entry.composition}, the ledger {self._total}/{self._composition}"
            )

    @classmethod
    def from_entry(
        cls, entry: LedgerEntry, *, writer: str = "", on_charge: Callable[[bytes], None] | None = None
    ) -> PrivacyLedger:
        """The ledger whose head is ``entry`` (its hash already verified): the latest entry is the
        whole state, so a compacted topic's one surviving entry is enough to resume."""
        ledger = cls(entry.total, composition=entry.composition, ledger_id=entry.ledger_id, writer=writer)
        ledger._on_charge = on_charge
        if ledger._over(entry.totals):
            raise LedgerFormatError(
                f"ledger {entry.ledger_id!r}: entry #{entry.sequence} spends beyond the total"
            )
        ledger._head = entry
        return ledger

    # ---- serialisation -----------------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        return {
            "format": _STATE_FORMAT,
            "version": _VERSION,
            "ledger_id": self._id,
            "total": _budget_dict(self._total),
            "composition": self._composition,
            "writer": self._writer,
            "head": None if self._head is None else self._head.to_dict(),
        }

    def to_json(self) -> str:
        body = self._body()
        body["checksum"] = _sha256(body)
        return json.dumps(body, sort_keys=True)

    def to_bytes(self) -> bytes:
        return _MAGIC + self.to_json().encode()

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        previous: PrivacyLedger | None = None,
        on_charge: Callable[[bytes], None] | None = None,
    ) -> PrivacyLedger:
        """Load and verify a ledger state (version 2, or a version-1 history, migrated);
        ``on_charge``: the persistence hook of the loaded ledger (as in the constructor); with
        ``previous``, refuse a snapshot behind it."""
        try:
            body = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LedgerFormatError(f"ledger is not JSON (truncated or corrupt): {exc}") from None
        if not isinstance(body, dict) or "checksum" not in body:
            raise LedgerFormatError("ledger JSON must be an object with a checksum")
        checksum = body.pop("checksum")
        if body.get("format") != _STATE_FORMAT or body.get("version") not in (1, _VERSION):
            raise LedgerFormatError(
                f"unsupported ledger format/version {body.get('format')!r}/{body.get('version')!r}"
            )
        legacy = body["version"] == 1
        if _sha256(body) != checksum:
            raise LedgerFormatError("ledger checksum mismatch (corrupt or edited)")
        try:
            ledger = _migrate(body, checksum) if legacy else _load(body)
        except LedgerFormatError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LedgerFormatError(f"malformed ledger: {exc!r}") from exc
        ledger._on_charge = on_charge
        if previous is not None:
            try:
                later = most_advanced(ledger, previous)
            except LedgerFormatError as exc:
                raise LedgerFormatError(f"stale or divergent ledger snapshot: {exc}") from None
            if later is not ledger:
                raise LedgerFormatError("stale or divergent ledger snapshot: it would forget spent budget")
        return ledger

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        previous: PrivacyLedger | None = None,
        on_charge: Callable[[bytes], None] | None = None,
    ) -> PrivacyLedger:
        """:meth:`to_bytes` counterpart; ``previous`` and ``on_charge`` as in :meth:`from_json`."""
        if not isinstance(data, bytes | bytearray) or not bytes(data).startswith(_MAGIC):
            raise LedgerFormatError("not a privstream ledger (bad magic)")
        return cls.from_json(bytes(data[len(_MAGIC) :]), previous=previous, on_charge=on_charge)

    def __repr__(self) -> str:
        return f"PrivacyLedger(id={self._id!r}, total={self._total}, spent={self.spent()}, entries={self.sequence})"


def _load(body: dict[str, Any]) -> PrivacyLedger:
    total = _budget_of(body["total"], "ledger total")
    ledger = PrivacyLedger(
        total, composition=body["composition"], ledger_id=body["ledger_id"], writer=body["writer"]
    )
    if body["head"] is not None:
        head = LedgerEntry.from_dict(body["head"])
        ledger._check_identity(head)
        return PrivacyLedger.from_entry(head, writer=ledger.writer)
    return ledger


def _migrate(body: dict[str, Any], checksum: str) -> PrivacyLedger:
    """A version-1 state (every entry kept) as a version-2 ledger: the exact totals of its entries
    in order, held by one ``migrated`` head entry linked to the genesis hash. Deterministic, so two
    copies of the same version-1 state migrate to the same head."""
    total = budget_from_dict(body["total"])
    ledger = PrivacyLedger(total, composition=body["composition"], ledger_id=body["ledger_id"])
    entries: Sequence[dict[str, Any]] = body["entries"]
    if [e["seq"] for e in entries] != list(range(len(entries))):
        raise LedgerFormatError("version-1 ledger entries are not consecutively numbered")
    totals = ledger.totals
    for e in entries:
        budget = budget_from_dict(e["budget"])
        if type(budget) is not type(total):
            raise LedgerFormatError("version-1 ledger entry budget kind differs from the total's")
        epoch = e["epoch"]
        if epoch is not None:
            check_int("entry epoch", epoch, minimum=None, type_error=LedgerFormatError)
        totals = totals.after(budget.exact, epoch, ledger.composition)
    if entries:
        zero = type(total)(*(0.0 for _ in total.exact))
        head = LedgerEntry.create(
            ledger.ledger_id,
            len(entries),
            ledger.head_hash,
            zero,
            totals,
            total=total,
            composition=ledger.composition,
            mechanism=MIGRATED,
            label=f"version-1 ledger of {len(entries)} entries, checksum {checksum}",
        )
        return PrivacyLedger.from_entry(head)
    return ledger


def _check_same_ledger(a: PrivacyLedger, b: PrivacyLedger) -> None:
    if a.ledger_id != b.ledger_id:
        raise LedgerFormatError(f"snapshots belong to different ledgers ({a.ledger_id!r} vs {b.ledger_id!r})")
    if a.total != b.total or a.composition != b.composition:
        raise LedgerFormatError(
            f"snapshots of ledger {a.ledger_id!r} disagree on total/composition: "
            f"{a.total}/{a.composition} vs {b.total}/{b.composition}"
        )


def most_advanced(a: PrivacyLedger, b: PrivacyLedger) -> PrivacyLedger:
    """The later of two states of the same ledger: the higher sequence number (``a`` if they are
    equal). Raises :class:`LedgerFormatError` if they belong to different ledgers, or diverge: the
    same sequence number with different heads, or a later state with lower totals.

    The returned object is one of the arguments, with its own ``on_charge`` hook and writer."""
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, PrivacyLedger):
            raise TypeError(f"{name} must be a PrivacyLedger, not {type(value).__name__}")
    _check_same_ledger(a, b)
    later, earlier = (b, a) if b.sequence > a.sequence else (a, b)
    if later.sequence == earlier.sequence and later.head_hash != earlier.head_hash:
        raise LedgerFormatError(
            f"divergent snapshots of ledger {a.ledger_id!r}: two different entries #{a.sequence}"
        )
    if not later.totals.covers(earlier.totals):
        raise LedgerFormatError(
            f"divergent snapshots of ledger {a.ledger_id!r}: entry #{later.sequence} has spent less "
            f"than entry #{earlier.sequence}"
        )
    return later
