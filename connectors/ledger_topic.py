"""The ledger topic: Avro ``LedgerEntry`` records of the hash-chained ledger, and the fail-closed
read a job does before it starts.

Records (keys are UTF-8): ``LedgerEntry`` keyed by the ledger id (so a compacted topic keeps the
latest entry of each ledger, which holds the whole state), and ``LedgerFence`` keyed
``<ledger id>/fence`` (kept apart from the entries by compaction).

:func:`read_ledger` is the start-up read (:class:`~privstream.jobs.job.HeavyHittersJob` calls it):

1. write a ``LedgerFence`` with a fresh random nonce to every partition of the topic;
2. read the topic from its beginning with ``read_committed`` until every one of those fences has
   come back, within ``timeout_s``. Offsets are never asked for (the embedded broker answers
   ListOffsets(latest) wrongly): the returned fence is the proof that every entry committed before
   it was read. A ``read_committed`` reader also cannot pass an open transaction, so a transaction
   still open on the topic holds the read until it ends;
3. verify the ledger's chain on the way (:meth:`privstream.accounting.PrivacyLedger.apply`): the
   first entry seen starts the state (on a compacted topic, the only one left: O(1) records),
   every later one must be the next link (O(entries) without compaction, constant work each);
4. if another writer of the ledger (a fence or heartbeat of another nonce) was alive less than
   ``lease_s`` ago, keep reading until that record is ``lease_s`` old: a newer record of that
   writer means a second live job, and the start is refused
   (:mod:`~privstream.connectors.ledger_lease`).

Anything else refuses the start with :class:`LedgerUnavailable`, whose message says what to check:
a broker or topic that cannot be read, a fence that does not come back in time, an undecodable or
unexpected record, a broken chain (gap, reorder, edit, or a fork: two jobs charged the same ledger
from the same state), entries of the ledger on two partitions, or a ledger whose total or
composition differs from the job's, or another live job with the same ledger id. The returned state carries the nonce as its ``writer``, so
every entry the job writes names the start-up that wrote it (a fork's message names both).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privstream.connectors.avro_codec import AvroDecodeError, encode
from privstream.connectors.clients import kafka_producer
from privstream.connectors.consume import DecodedRecord, TopicNotFound, committed_reader
from privstream.connectors.ledger_lease import (
    FENCE_SUFFIX,
    HEARTBEAT_PARTITION,
    LeaseWatch,
    LiveWriter,
    fence_record,
)

from privstream.accounting import AnyBudget, LedgerEntry, LedgerFormatError, PrivacyLedger, most_advanced

logger = logging.getLogger(__name__)


class LedgerUnavailable(RuntimeError):
    """The ledger's state could not be established: the job must not start (it could forget spent
    budget). The message says what went wrong and what to check."""


def entry_record(entry: LedgerEntry, time_ms: int | None = None) -> bytes:
    """The Avro ``LedgerEntry`` message of a chained entry (display fields plus the entry itself);
    ``entry_time``: ``time_ms``, or now."""
    spent, total = entry.spent, entry.total
    spent_values = (*spent.exact, 0)[:2]  # (ε, δ), or (ρ, 0) for a zCDP ledger
    total_values = (*total.exact, 0)[:2]
    return encode(
        "LedgerEntry",
        {
            "ledger_id": entry.ledger_id,
            "sequence": entry.sequence,
            "epsilon_spent": float(spent_values[0]),
            "delta_spent": float(spent_values[1]),
            "epsilon_total": float(total_values[0]),
            "delta_total": float(total_values[1]),
            "last_charge": f"{entry.mechanism} epoch {entry.epoch}",
            "entry": entry.to_bytes(),
            "state": None,
            "entry_time": int(time.time() * 1000) if time_ms is None else time_ms,
        },
    )


def record_state(value: dict[str, Any]) -> LedgerEntry | PrivacyLedger:
    """What a decoded ``LedgerEntry`` message holds: the chained entry (its display fields must agree
    with it), or for a message written with ``LedgerEntry.v1`` the migrated whole-ledger state.
    Raises :class:`~privstream.accounting.LedgerFormatError`."""
    if value.get("entry"):
        entry = LedgerEntry.from_bytes(value["entry"])
        if (entry.ledger_id, entry.sequence) != (value["ledger_id"], value["sequence"]):
            raise LedgerFormatError(
                f"LedgerEntry record says ledger {value['ledger_id']!r} #{value['sequence']}, "
                f"its entry ledger {entry.ledger_id!r} #{entry.sequence} (edited)"
            )
        return entry
    if value.get("state"):
        return PrivacyLedger.from_bytes(value["state"])
    raise LedgerFormatError("LedgerEntry record without an entry or a state")


@dataclass(frozen=True)
class LedgerRead:
    """The outcome of :func:`read_ledger`."""

    state: bytes  #: the ledger state (``PrivacyLedger.to_bytes``) to start from, writer = ``nonce``
    nonce: str  #: this start-up's fence nonce, the writer of its entries
    records: int  #: records read up to the fences
    entries: int  #: this ledger's entries among them (including a migrated version-1 state)
    seconds: float  #: time from the fence write to the end of the read


def write_fences(
    bootstrap: str,
    topic: str,
    ledger_id: str,
    nonce: str,
    job_name: str,
    partitions: list[int],
    timeout_s: float,
) -> None:
    """Write this start-up's fence to every partition and wait for the broker's acknowledgement."""
    producer = kafka_producer(bootstrap, acks="all")
    try:
        value, key = fence_record(ledger_id, nonce, job_name), (ledger_id + FENCE_SUFFIX).encode()
        futures = [producer.send(topic, key=key, value=value, partition=p) for p in partitions]
        producer.flush(timeout=timeout_s)
        for future in futures:
            future.get(timeout=timeout_s)
    finally:
        producer.close(timeout=timeout_s)


class ChainReader:
    """Folds the records of one ledger, in topic order, into its state, verifying the chain (the
    start-up read here, and ``privstream ledger show``)."""

    def __init__(self, ledger_id: str) -> None:
        self.ledger_id = ledger_id
        self.state: PrivacyLedger | None = None
        self.partition: int | None = None
        self.entries = 0
        self.writer = ""  #: the writer of the last entry added

    def add(self, record: DecodedRecord) -> None:
        where = f"partition {record.partition} offset {record.offset}"
        if self.partition is not None and record.partition != self.partition:
            raise LedgerUnavailable(
                f"entries of ledger {self.ledger_id!r} on partitions {self.partition} and "
                f"{record.partition}: their order is lost (was the topic repartitioned?)"
            )
        self.partition = record.partition
        try:
            found = record_state(record.value)
            self.writer = "" if isinstance(found, PrivacyLedger) else found.writer
            if isinstance(found, PrivacyLedger):  # a migrated version-1 state
                self.state = found if self.state is None else most_advanced(self.state, found)
            elif self.state is None:  # the first entry kept (the only one, after compaction)
                self.state = PrivacyLedger.from_entry(found)
            else:
                self.state.apply(found)
        except LedgerFormatError as exc:
            raise LedgerUnavailable(f"the ledger chain is broken at {where}: {exc}") from exc
        self.entries += 1

    def result(self, expected: PrivacyLedger, writer: str) -> PrivacyLedger:
        """The state to start from: ``expected`` (the job's empty ledger) if none was read, else the
        one read, which must have ``expected``'s total and composition; its writer becomes ``writer``."""
        if self.state is None:
            expected.writer = writer
            return expected
        state = self.state
        if (state.total, state.composition) != (expected.total, expected.composition):
            raise LedgerUnavailable(
                f"ledger {expected.ledger_id!r} on the topic has total {state.total} and composition "
                f"{state.composition}; this job has {expected.total} and {expected.composition}. Give the "
                "same --total-epsilon/--total-delta, or a new --ledger-id for a new budget"
            )
        state.writer = writer
        return state


def read_ledger(
    bootstrap: str,
    topic: str,
    expected: PrivacyLedger,
    *,
    job_name: str = "privstream",
    timeout_s: float = 60.0,
    lease_s: float = 30.0,
) -> LedgerRead:
    """Establish the state of ledger ``expected.ledger_id`` on ``topic`` (``expected``: the empty
    ledger the job would start with: id, total, composition) by the fence protocol (module doc),
    then make sure no other writer of the ledger is live (:mod:`~privstream.connectors.ledger_lease`:
    a writer alive less than ``lease_s`` ago is watched for up to ``lease_s``). Raises
    :class:`LedgerUnavailable` if the state cannot be established or another writer is live; never
    returns a partial read. ``timeout_s`` bounds the read to the fences."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s: must be > 0, got {timeout_s!r}")
    if not lease_s > 0:
        raise ValueError(f"lease_s: must be > 0, got {lease_s!r}")
    ledger_id = expected.ledger_id
    advice = f"check --bootstrap {bootstrap} and --ledger-topic {topic}"
    nonce = secrets.token_hex(16)
    start = time.monotonic()
    chain = ChainReader(ledger_id)
    watch = LeaseWatch(ledger_id, nonce, lease_s)
    records = 0

    watching = False

    def fold(record: DecodedRecord) -> None:
        # a record behind this start-up's fence on its partition was written after the fence (the
        # rest of a poll batch, or the watch phase): a fence there is a later start-up's (it will see
        # this one's fence and watch it), an entry there comes from a live writer
        behind = record.partition not in pending
        if record.schema == "LedgerFence":
            if record.value["nonce"] == nonce:
                pending.discard(record.partition)
                reader.pause(record.partition)
            elif record.partition == HEARTBEAT_PARTITION and (watching or not behind):
                watch.seen(record.value, record.partition)  # liveness is decided on partition 0 alone
        elif record.schema == "LedgerEntry":
            if record.value["ledger_id"] == ledger_id:
                chain.add(record)
                if watching or behind:
                    watch.entry_seen(chain.writer)
        else:
            raise LedgerUnavailable(
                f"unexpected {record.schema} record on the ledger topic at partition "
                f"{record.partition} offset {record.offset}; {advice} (is it another topic?)"
            )

    try:
        with committed_reader(bootstrap, topic) as reader:
            partitions = list(reader.partitions)
            write_fences(bootstrap, topic, ledger_id, nonce, job_name, partitions, timeout_s)
            pending = set(partitions)
            remaining = max(timeout_s - (time.monotonic() - start), 0.001)
            for record in reader.records(until=lambda: not pending, timeout_s=remaining):
                records += 1
                fold(record)
            watch_until = watch.start_watch()
            watching = True
            if watch_until:  # another writer was alive within the lease: is it still?
                for partition in partitions:
                    reader.resume(partition)
                for record in reader.records(until=lambda: time.time() >= watch_until):
                    records += 1
                    fold(record)
        state = chain.result(expected, nonce)
    except LiveWriter as exc:
        raise LedgerUnavailable(
            f"refusing to start: another job with ledger id {ledger_id!r} is running: {exc}. Two live "
            "jobs would charge the same budget twice; stop the other job first (if it was just stopped "
            f"or killed, retry after {lease_s:g} s: --ledger-lease)"
        ) from exc
    except LedgerUnavailable as exc:
        raise LedgerUnavailable(f"refusing to start: {exc}") from exc.__cause__
    except TopicNotFound as exc:
        raise LedgerUnavailable(f"refusing to start: {exc}; {advice}") from exc
    except AvroDecodeError as exc:
        raise LedgerUnavailable(
            f"refusing to start: an undecodable record on ledger topic {topic!r} ({exc}): a record of "
            f"an unknown format, truncated or corrupt; {advice}"
        ) from exc
    except TimeoutError as exc:
        raise LedgerUnavailable(
            f"refusing to start: ledger topic {topic!r} was not read to its end within {timeout_s:g} s "
            f"(this start-up's fence did not come back: {exc}). The broker is slow or unreachable, or "
            f"an open transaction holds the topic (a running job with ledger id {ledger_id!r}, or one "
            "killed less than its transaction timeout ago); check the broker, stop other jobs with this "
            "ledger id, or raise --ledger-timeout"
        ) from exc
    except (ConnectionError, OSError) as exc:
        raise LedgerUnavailable(
            f"refusing to start: ledger topic {topic!r} cannot be read: {exc}; {advice}"
        ) from exc
    except Exception as exc:  # kafka-python's errors (KafkaError subclasses) and anything unforeseen
        raise LedgerUnavailable(
            f"refusing to start: reading ledger topic {topic!r} failed: {type(exc).__name__}: {exc}; {advice}"
        ) from exc
    seconds = time.monotonic() - start
    logger.info(
        "ledger %r read from %r: %d records, %d entries, state #%d, spent %s of %s (%.2f s)",
        ledger_id, topic, records, chain.entries, state.sequence, state.spent(), state.total, seconds,
    )  # fmt: skip
    return LedgerRead(state.to_bytes(), nonce, records, chain.entries, seconds)


def charge_on_topic(
    bootstrap: str,
    topic: str,
    expected: PrivacyLedger,
    budget: AnyBudget,
    *,
    mechanism: str,
    label: Callable[[str], str],
    job_name: str = "privstream",
    timeout_s: float = 60.0,
) -> LedgerEntry:
    """Charge ``budget`` once on the ledger of ``topic`` before a run starts: read the ledger to its
    end (:func:`read_ledger`, fail closed), charge (``label(nonce)``: the entry's label, given this
    start-up's fence nonce) and write the entry, acknowledged, before returning it. Raises
    :class:`LedgerUnavailable` or :class:`~privstream.accounting.BudgetExceeded`; nothing is
    written then."""
    read = read_ledger(bootstrap, topic, expected, job_name=job_name, timeout_s=timeout_s)
    entry = PrivacyLedger.from_bytes(read.state).charge(budget, mechanism=mechanism, label=label(read.nonce))
    producer = kafka_producer(bootstrap, acks="all")
    try:
        producer.send(topic, key=expected.ledger_id.encode(), value=entry_record(entry)).get(
            timeout=timeout_s
        )
    finally:
        producer.close()
    return entry
