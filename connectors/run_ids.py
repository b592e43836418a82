"""What identifies the run (submission) a record belongs to: ``privstream tail --run RUN``.

Every record a job writes to its releases and dead-letter topics carries the ``run_id`` its launcher
drew for the submission (one per ``privstream run``; :func:`new_run_id`): ``Release``,
``ReleaseRefused``, ``WindowRelease``, ``LdpRelease``, ``DeadLetter`` and ``SketchSnapshot`` have a
``run_id`` field (null in messages written before it existed), set by :func:`stamp` on the way to
the job's Kafka sinks. Besides it, a record's run is what it names:

- ``WindowRelease``: the ledger entry that charged its submission (``ledger_entry_hash``, or
  ``<ledger id>#<sequence>``), and its ledger id;
- ``LedgerEntry``: its entry hash, ``<ledger id>#<sequence>``, the start-up (fence nonce) that wrote
  it, and its ledger id; ``LedgerFence``: the start-up's nonce and the ledger id;
- ``ReleaseRefused``: its ledger id; ``LdpRelease``/``HgLdpState``: the deployment (``HgLdpState``'s
  ``run_id`` is the HG-LDP server run's, hex);
- ``ContinualUpdate``: the run's session (the continual-monitor job's run id).

A ledger id or a deployment selects every run charged to that budget. Messages written before run
ids, events and punctuation name no run: under ``--run`` they are left out (and counted). ``RUN``
matches an identifier exactly, or as a prefix of at least 8 characters (entry hashes and nonces are
long).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIN_PREFIX = 8
RUN_ID_FIELD = "run_id"


def new_run_id() -> str:
    """A fresh run id for one submission (32 hex digits of ``uuid4``): drawn by the launcher, once,
    and carried into the job graph, so a Flink replay of the run writes the same bytes."""
    import uuid

    return uuid.uuid4().hex


def stamp(message: bytes, run_id: str) -> bytes:
    """``message`` (an Avro single-object message) with its ``run_id`` field set to ``run_id``,
    re-encoded with the current schema; unchanged if its schema has no ``run_id`` field or it
    already names a run. Deterministic: the same message and run id give the same bytes."""
    from privstream.connectors.avro_codec import decode, default_registry, encode

    name, value = decode(message)
    fields = default_registry().current(name).schema["fields"]
    if value.get(RUN_ID_FIELD) is not None or not any(f["name"] == RUN_ID_FIELD for f in fields):
        return bytes(message)
    return encode(name, {**value, RUN_ID_FIELD: run_id})


def run_ids(schema: str, value: Mapping[str, Any]) -> set[str]:
    """The identifiers of the run(s) the record belongs to (empty: it names none)."""
    out: set[str] = set()
    run_id = value.get("run_id")
    if isinstance(run_id, bytes | bytearray):
        out.add(bytes(run_id).hex())
    elif run_id:
        out.add(str(run_id))
    for field in ("ledger_id", "deployment", "session", "ledger_entry_hash", "nonce"):
        if value.get(field):
            out.add(str(value[field]))
    if schema == "WindowRelease":
        out.add(f"{value['ledger_id']}#{value['ledger_sequence']}")
    if schema == "LedgerEntry":
        out.add(f"{value['ledger_id']}#{value['sequence']}")
        out |= _entry_ids(value)
    return out


def _entry_ids(value: Mapping[str, Any]) -> set[str]:
    """A chained ledger entry's hash and writer (nothing for a version-1 state or a corrupt entry)."""
    from privstream.connectors.ledger_topic import record_state

    from privstream.accounting import LedgerEntry, LedgerFormatError

    try:
        found = record_state(dict(value))
    except LedgerFormatError:
        return set()
    if not isinstance(found, LedgerEntry):
        return set()
    return {found.entry_hash} | ({found.writer} if found.writer else set())


def matches(run: str, ids: set[str]) -> bool:
    """Whether ``run`` names one of ``ids``: equal, or a prefix of >= :data:`MIN_PREFIX` characters."""
    return run in ids or (len(run) >= MIN_PREFIX and any(i.startswith(run) for i in ids))
