"""A persistent privacy ledger that refuses releases beyond the total budget.

Every release is *charged* before its noise is drawn and before it is published: ``charge`` checks
the budget, appends an entry, and (if an ``on_charge`` persistence hook is given) hands the
serialised ledger to the hook before returning. If the hook fails the entry is rolled back and the
error propagates, so a release can never be published without its charge being durable.

Composition (see :mod:`privstream.accounting.budget`):

* ``"sequential"`` (default; e.g. user-level budgets across epochs): spent = Σ over all entries.
* ``"parallel_epochs"`` (event-level DP over disjoint epochs): entries with the same epoch compose
  sequentially, distinct epochs in parallel; an entry with ``epoch=None`` covers all data and is
  added to every epoch. spent = Σ(None entries) + max over epochs of Σ(that epoch's entries).

Serialisation: JSON with a format name, a version, the ledger id, the entries with consecutive
sequence numbers, and a SHA-256 checksum over the canonical JSON; ``to_bytes`` wraps the same JSON
after a magic header. Loading verifies all of it (:class:`LedgerFormatError` otherwise), re-attaches
an ``on_charge`` persistence hook if given (a reloaded ledger must keep persisting its charges) and,
given the ``previous`` in-memory copy, refuses a snapshot that does not extend it (a stale snapshot
would forget spent budget). Amounts are composed exactly as Fractions.

Stale snapshots: a ledger's history only grows, so of two snapshots of the same ledger the newer
one's entries extend the older one's. :func:`most_advanced` picks it (e.g. to reconcile a restored
checkpoint's ledger with the latest ledger record persisted elsewhere, so that restoring an older
checkpoint never forgets charges recorded after it) and raises :class:`LedgerFormatError` if the two
diverge (neither extends the other) or belong to different ledgers.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from privstream.accounting.budget import AnyBudget, Budget, ZCDPBudget, budget_from_dict
from privstream.validation import check_int

_FORMAT = "privstream-ledger"
_VERSION = 1
_MAGIC = b"PSLEDGER"
_COMPOSITIONS = ("sequential", "parallel_epochs")


class BudgetExceeded(RuntimeError):
    """A charge would take the ledger beyond its total budget; nothing was recorded."""


class LedgerFormatError(ValueError):
    """Serialised ledger is corrupt, truncated, of an unknown version, or stale."""


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release."""

    seq: int
    budget: AnyBudget
    mechanism: str
    epoch: int | None
    label: str

    def to_dict(self) -> dict:
        return {
            "seq": self.seq,
            "budget": self.budget.to_dict(),
            "mechanism": self.mechanism,
            "epoch": self.epoch,
            "label": self.label,
        }

    @classmethod
    def from_dict(cls, data: dict) -> LedgerEntry:
        epoch = data["epoch"]
        if epoch is not None:
            check_int("entry epoch", epoch, minimum=None, type_error=LedgerFormatError)
        return cls(
            int(data["seq"]),
            budget_from_dict(data["budget"]),
            str(data["mechanism"]),
            epoch,
            str(data["label"]),
        )


def _add(a: tuple[Fraction, ...], b: tuple[Fraction, ...]) -> tuple[Fraction, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


class PrivacyLedger:
    """Records every release against a total (ε, δ) or ρ-zCDP budget and refuses overspending."""

    def __init__(
        self,
        total: AnyBudget,
        *,
        composition: str = "sequential",
        on_charge: Callable[[bytes], None] | None = None,
        ledger_id: str | None = None,
    ) -> None:
        if not isinstance(total, Budget | ZCDPBudget):
            raise TypeError(f"total must be a Budget or ZCDPBudget, not {type(total).__name__}")
        if composition not in _COMPOSITIONS:
            raise ValueError(f"composition must be one of {_COMPOSITIONS}, got {composition!r}")
        self._total = total
        self._composition = composition
        self._entries: list[LedgerEntry] = []
        self._on_charge = on_charge
        self._id = ledger_id if ledger_id is not None else secrets.token_hex(8)

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
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries)

    def _spent_exact(self, entries: list[LedgerEntry]) -> tuple[Fraction, ...]:
        zero = tuple(Fraction(0) for _ in self._total.exact)
        if self._composition == "sequential":
            acc = zero
            for e in entries:
                acc = _add(acc, e.budget.exact)
            return acc
        everywhere = zero
        per_epoch: dict[int, tuple[Fraction, ...]] = {}
        for e in entries:
            if e.epoch is None:
                everywhere = _add(everywhere, e.budget.exact)
            else:
                per_epoch[e.epoch] = _add(per_epoch.get(e.epoch, zero), e.budget.exact)
        worst = tuple(max(col) for col in zip(zero, *per_epoch.values(), strict=True))
        return _add(everywhere, worst)

    def spent(self) -> AnyBudget:
        """Budget spent so far under the ledger's composition rule."""
        return type(self._total)(*(float(v) for v in self._spent_exact(self._entries)))

    def remaining(self) -> AnyBudget:
        """Total minus spent, componentwise (never negative)."""
        spent = self._spent_exact(self._entries)
        return type(self._total)(
            *(float(max(t - s, Fraction(0))) for t, s in zip(self._total.exact, spent, strict=True))
        )

    def _check_charge(self, budget: AnyBudget, epoch: int | None) -> LedgerEntry:
        if type(budget) is not type(self._total):
            raise TypeError(
                f"budget must be a {type(self._total).__name__} like the ledger total, not {type(budget).__name__}"
            )
        if epoch is not None:
            check_int("epoch", epoch, minimum=None)
        entry = LedgerEntry(len(self._entries), budget, "", epoch, "")
        after = self._spent_exact([*self._entries, entry])
        if any(s > t for s, t in zip(after, self._total.exact, strict=True)):
            raise BudgetExceeded(
                f"charging {budget} (epoch {epoch}) would spend {tuple(float(v) for v in after)} "
                f"> total {self._total}; already spent {self.spent()}"
            )
        return entry

    def can_charge(self, budget: AnyBudget, epoch: int | None = None) -> bool:
        """Whether :meth:`charge` would accept ``budget`` now."""
        try:
            self._check_charge(budget, epoch)
        except BudgetExceeded:
            return False
        return True

    def charge(
        self, budget: AnyBudget, *, mechanism: str, epoch: int | None = None, label: str = ""
    ) -> LedgerEntry:
        """Record a release of cost ``budget``; raise :class:`BudgetExceeded` (recording nothing)
        if it would exceed the total. The persistence hook runs before this returns."""
        probe = self._check_charge(budget, epoch)
        entry = LedgerEntry(probe.seq, budget, str(mechanism), epoch, str(label))
        self._entries.append(entry)
        if self._on_charge is not None:
            try:
                self._on_charge(self.to_bytes())
            except BaseException:
                self._entries.pop()
                raise
        return entry

    # ---- serialisation -----------------------------------------------------------------------
    def _body(self) -> dict:
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "ledger_id": self._id,
            "total": self._total.to_dict(),
            "composition": self._composition,
            "entries": [e.to_dict() for e in self._entries],
        }

    @staticmethod
    def _canonical(body: dict) -> bytes:
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def to_json(self) -> str:
        body = self._body()
        body["checksum"] = hashlib.sha256(self._canonical(body)).hexdigest()
        return json.dumps(body, sort_keys=True)

    def to_bytes(self) -> bytes:
        return _MAGIC + self.to_json().encode()

    def extends(self, other: PrivacyLedger) -> bool:
        """Whether this ledger is ``other`` or a later state of it: same ledger (id, total,
        composition) and ``other``'s entries are a prefix of this one's."""
        if not isinstance(other, PrivacyLedger):
            raise TypeError(f"other must be a PrivacyLedger, not {type(other).__name__}")
        _check_same_ledger(self, other)
        return self._entries[: len(other._entries)] == other._entries

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        previous: PrivacyLedger | None = None,
        on_charge: Callable[[bytes], None] | None = None,
    ) -> PrivacyLedger:
        """Load and verify a ledger; ``on_charge``: the persistence hook of the loaded ledger (as
        in the constructor); with ``previous``, refuse a snapshot that does not extend it."""
        try:
            body = json.loads(text)
            if not isinstance(body, dict):
                raise LedgerFormatError("ledger JSON must be an object")
            checksum = body.pop("checksum")
            if hashlib.sha256(cls._canonical(body)).hexdigest() != checksum:
                raise LedgerFormatError("ledger checksum mismatch (corrupt or edited)")
            if body.get("format") != _FORMAT or body.get("version") != _VERSION:
                raise LedgerFormatError(
                    f"unsupported ledger format/version {body.get('format')!r}/{body.get('version')!r}"
                )
            ledger = cls(
                budget_from_dict(body["total"]),
                composition=body["composition"],
                ledger_id=body["ledger_id"],
                on_charge=on_charge,
            )
            entries = [LedgerEntry.from_dict(e) for e in body["entries"]]
        except LedgerFormatError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LedgerFormatError(f"malformed ledger: {exc}") from exc
        if [e.seq for e in entries] != list(range(len(entries))):
            raise LedgerFormatError("ledger entries are not consecutively numbered")
        if any(type(e.budget) is not type(ledger.total) for e in entries):
            raise LedgerFormatError("ledger entry budget kind differs from the total's")
        ledger._entries = entries
        if previous is not None and not ledger.extends(previous):
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
        try:
            text = bytes(data[len(_MAGIC) :]).decode()
        except UnicodeDecodeError as exc:
            raise LedgerFormatError("ledger payload is not UTF-8") from exc
        return cls.from_json(text, previous=previous, on_charge=on_charge)

    def __repr__(self) -> str:
        return f"PrivacyLedger(total={self._total}, spent={self.spent()}, entries={len(self._entries)})"


def _check_same_ledger(a: PrivacyLedger, b: PrivacyLedger) -> None:
    if a.ledger_id != b.ledger_id:
        raise LedgerFormatError(f"snapshots belong to different ledgers ({a.ledger_id!r} vs {b.ledger_id!r})")
    if a.total != b.total or a.composition != b.composition:
        raise LedgerFormatError(
            f"snapshots of ledger {a.ledger_id!r} disagree on total/composition: "
            f"{a.total}/{a.composition} vs {b.total}/{b.composition}"
        )


def most_advanced(a: PrivacyLedger, b: PrivacyLedger) -> PrivacyLedger:
    """The later of two snapshots of the same ledger: the one whose entries extend the other's
    (``a`` if they are equal). Raises :class:`LedgerFormatError` if they belong to different
    ledgers or diverge (neither extends the other: some charge would be forgotten either way).

    The returned object is one of the arguments, with its own ``on_charge`` hook."""
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, PrivacyLedger):
            raise TypeError(f"{name} must be a PrivacyLedger, not {type(value).__name__}")
    if a.extends(b):
        return a
    if b.extends(a):
        return b
    raise LedgerFormatError(
        f"divergent snapshots of ledger {a.ledger_id!r}: neither extends the other "
        f"({len(a.entries)} vs {len(b.entries)} entries)"
    )
