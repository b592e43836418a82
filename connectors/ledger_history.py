"""One ledger's charges as read back from the ledger topic, its chain verified (``privstream ledger show``).

:func:`read_history` reads the ledger topic from its beginning with ``read_committed`` until it has
been idle for a while (a read-only view: unlike a job's start-up read,
:func:`~privstream.connectors.ledger_topic.read_ledger`, it writes no fence, so an entry committed
after the idle wait may be missed; a job never relies on this view). The entries of the ledger are
folded in topic order by :class:`~privstream.connectors.ledger_topic.ChainReader`, the start-up
read's own verification: a gap, reorder, edit or fork raises
:class:`~privstream.connectors.ledger_topic.LedgerUnavailable` saying where the chain breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from privstream.connectors.ledger_topic import ChainReader, record_state

from privstream.accounting import LedgerEntry, PrivacyLedger


@dataclass(frozen=True)
class Charge:
    """One entry of the ledger: its charge and the running spend after it (exact)."""

    sequence: int
    time_ms: int  #: when the record carrying it was written
    epoch: int | None
    mechanism: str
    amounts: tuple[Fraction, ...]  #: (ε, δ), or (ρ,) for a zCDP ledger
    spent_after: tuple[Fraction, ...]
    writer: str
    entry_hash: str
    label: str


@dataclass
class LedgerHistory:
    """What the topic holds of one ledger: its verified state and its charges in order."""

    ledger_id: str
    topic: str
    state: PrivacyLedger | None = None
    charges: list[Charge] = field(default_factory=list)
    migrated: bool = False  #: the first record held a version-1 whole-ledger state
    other_ledgers: set[str] = field(default_factory=set)  #: ids of the other ledgers on the topic


def _charge(entry: LedgerEntry, time_ms: int) -> Charge:
    return Charge(
        entry.sequence,
        time_ms,
        entry.epoch,
        entry.mechanism,
        entry.budget.exact,
        entry.totals.spent(),
        entry.writer,
        entry.entry_hash,
        entry.label,
    )


def read_history(bootstrap: str, topic: str, ledger_id: str, *, idle_s: float = 2.0) -> LedgerHistory:
    """The history of ledger ``ledger_id`` on ``topic``. Raises ``TopicNotFound``,
    ``BrokerUnreachable``, ``AvroDecodeError`` (a record of an unknown format) or
    :class:`~privstream.connectors.ledger_topic.LedgerUnavailable` (a broken chain)."""
    from privstream.connectors.consume import committed_reader

    history = LedgerHistory(ledger_id, topic)
    chain = ChainReader(ledger_id)
    with committed_reader(bootstrap, topic) as reader:
        for record in reader.records(idle_s=idle_s):
            value: dict[str, Any] = record.value
            if record.schema != "LedgerEntry":
                continue  # start-up fences and heartbeats
            if value["ledger_id"] != ledger_id:
                history.other_ledgers.add(value["ledger_id"])
                continue
            chain.add(record)  # verifies the link before the charge is listed
            found = record_state(value)
            if isinstance(found, PrivacyLedger):
                history.migrated = True
            elif not history.charges or history.charges[-1].entry_hash != found.entry_hash:
                history.charges.append(_charge(found, value["entry_time"]))  # a redelivered copy once
    history.state = chain.state
    return history
