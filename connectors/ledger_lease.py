"""Liveness of a ledger's writer: heartbeats on the ledger topic, and how a start-up reads them.

A running job must be the only writer of its ledger: two live jobs with the same ledger id would
both charge the same state, and the second one's entries fork the chain (detected, but only at the
next start-up, after both released). So:

* a running job's release operator writes a ``LedgerFence`` record with its writer nonce (the
  start-up nonce stamped into its entries) every ``lease/3`` (:class:`Heartbeat`, a daemon thread,
  non-transactional: a heartbeat is a liveness signal, not state);
* a start-up (:func:`privstream.connectors.ledger_topic.read_ledger`) that finds, on its way to its
  own fence, a fence or heartbeat of another writer younger than ``lease`` keeps reading until that
  record is ``lease`` old (:class:`LeaseWatch`). If the other writer writes again in that time it is
  live and the start-up is refused; if it stays silent it is gone (stopped, cancelled or killed)
  and the start-up proceeds.

A job restarted by Flink from its checkpoint keeps its writer nonce, so its heartbeats simply go
on. Restarting a job right after stopping it waits up to ``lease`` once. Record times are the
writers' wall clocks: hosts whose clocks differ by more than a fraction of the lease make the check
wait longer (clock behind) or decide earlier that a writer is gone (clock ahead); keep clocks
synchronised (NTP).

Liveness is decided on partition 0 alone, where heartbeats go: of two start-ups racing, the one
whose fence comes first there does not watch the other (records behind a start-up's own fence are
later start-ups, which will see it), and the other watches it and refuses once it heartbeats. The
launcher heartbeats from the end of its read for one lease (:class:`Heartbeat` ``duration_s``), so
the job's release operator has about two leases from the fence to take over. A running job does not
heartbeat while Flink fails it over (TaskManager loss, restart delay, slot wait, Python workers):
a failover longer than the lease lets another start-up through, and the chain fork is then found at
the next start-up. Heartbeats are not transactional, but a start-up reads with ``read_committed``
and cannot pass the job's open ledger transaction until its checkpoint commits: hence the lease must
be at least three checkpoint intervals (the job's configuration checks it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.clients import kafka_producer

logger = logging.getLogger(__name__)

FENCE_SUFFIX = "/fence"
#: heartbeats go to partition 0; liveness is decided from its records (one total order)
HEARTBEAT_PARTITION = 0


def fence_record(ledger_id: str, nonce: str, job_name: str, time_ms: int | None = None) -> bytes:
    """An Avro ``LedgerFence`` of writer ``nonce``: a start-up's read barrier or a running job's
    heartbeat (keyed ``<ledger id>/fence``)."""
    return encode(
        "LedgerFence",
        {
            "ledger_id": ledger_id,
            "nonce": nonce,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "job_name": job_name,
            "fence_time": int(time.time() * 1000) if time_ms is None else time_ms,
        },
    )


@dataclass(frozen=True)
class LedgerLease:
    """What a running job needs to keep its ledger lease: where to write, who it is, how often."""

    bootstrap: str
    topic: str
    ledger_id: str
    writer: str  #: the start-up nonce stamped into this job's entries
    job_name: str
    lease_s: float  #: heartbeats every ``lease_s / 3``

    def __post_init__(self) -> None:
        if not self.lease_s > 0:
            raise ValueError(f"lease_s: must be > 0, got {self.lease_s!r}")


class Heartbeat:
    """Writes ``lease``'s heartbeat to partition 0 of the ledger topic every ``lease_s / 3`` from a
    daemon thread until :meth:`stop`. A failed write is logged and retried at the next beat: the job
    never fails because a heartbeat could not be written (a starting job may then miss that this one
    is live only if no beat gets through for a whole lease)."""

    def __init__(self, lease: LedgerLease, duration_s: float | None = None) -> None:
        self.lease = lease
        self.duration_s = duration_s  #: stop by itself after this long (None: until stop())
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        lease = self.lease
        key = (lease.ledger_id + FENCE_SUFFIX).encode()
        producer: Any = None
        deadline = None if self.duration_s is None else time.monotonic() + self.duration_s
        while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                if producer is None:
                    producer = kafka_producer(lease.bootstrap, acks="all")
                value = fence_record(lease.ledger_id, lease.writer, lease.job_name)
                producer.send(lease.topic, key=key, value=value, partition=HEARTBEAT_PARTITION).get(
                    timeout=lease.lease_s
                )
                self.beats += 1
            except Exception as exc:  # broker down or slow: retry at the next beat
                logger.warning("ledger %r: heartbeat not written: %s", lease.ledger_id, exc)
            self._stop.wait(lease.lease_s / 3)
        if producer is not None:
            try:
                producer.close(timeout=2.0)
            except Exception as exc:  # unsent heartbeats are not worth waiting for
                logger.info("ledger %r: heartbeat producer closed with %s", lease.ledger_id, exc)


@dataclass
class _Writer:
    """The newest fence or heartbeat seen of one other writer."""

    time_ms: int
    host: str
    pid: int
    job_name: str
    partition: int


class LeaseWatch:
    """Tracks other writers' fences and heartbeats during a start-up's read (module doc)."""

    def __init__(self, ledger_id: str, own_nonce: str, lease_s: float) -> None:
        self.ledger_id = ledger_id
        self.own_nonce = own_nonce
        self.lease_ms = int(lease_s * 1000)
        self.writers: dict[str, _Writer] = {}
        self._watched: dict[str, int] = {}  # nonce -> time (ms) of its newest record before the watch

    def seen(self, value: dict[str, Any], partition: int) -> None:
        """Record a ``LedgerFence`` of this ledger; raises :class:`LiveWriter` if a watched writer
        wrote a newer one (it is live). A writer first seen while watching started after this
        start-up's fence: it will find this one's fence and heartbeats, and refuse itself."""
        nonce = value["nonce"]
        if nonce == self.own_nonce or value["ledger_id"] != self.ledger_id:
            return
        writer = _Writer(value["fence_time"], value["host"], value["pid"], value["job_name"], partition)
        if nonce in self._watched and writer.time_ms > self._watched[nonce]:
            raise LiveWriter(f"{self._describe(nonce, writer)} is live: it wrote again during this start-up")
        if nonce not in self.writers or writer.time_ms > self.writers[nonce].time_ms:
            self.writers[nonce] = writer

    def entry_seen(self, writer_nonce: str) -> None:
        """A ledger entry arrived after this start-up's fence: its writer is live (unless it is this
        start-up)."""
        if writer_nonce != self.own_nonce:
            raise LiveWriter(f"writer {writer_nonce} charged ledger {self.ledger_id!r} during this start-up")

    def start_watch(self, now_ms: int | None = None) -> float:
        """Begin watching the writers whose newest record is younger than the lease; returns the wall
        time (s) until which to keep reading (0 if there is none)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        recent = {n: w for n, w in self.writers.items() if now_ms - w.time_ms < self.lease_ms}
        self._watched = {n: w.time_ms for n, w in recent.items()}
        if not recent:
            return 0.0
        for nonce, writer in recent.items():
            logger.warning(
                "ledger %r: %s was alive %.1f s ago; waiting up to %.1f s for its next heartbeat",
                self.ledger_id, self._describe(nonce, writer), (now_ms - writer.time_ms) / 1000,
                (writer.time_ms + self.lease_ms - now_ms) / 1000,
            )  # fmt: skip
        return max(w.time_ms for w in recent.values()) / 1000 + self.lease_ms / 1000

    def _describe(self, nonce: str, w: _Writer) -> str:
        return f"writer {nonce} (job {w.job_name!r} on host {w.host} pid {w.pid}, record at {w.time_ms} ms)"


class LiveWriter(RuntimeError):
    """Another job with the same ledger id is live."""
