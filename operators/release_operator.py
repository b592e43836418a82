"""The release operator: ledger in Flink state, one noisy release per epoch.

:class:`ReleaseFunction` runs on a single key. Its keyed state is the serialised
:class:`~privstream.accounting.PrivacyLedger` (O(1): identity, writer, head entry); on first use it
starts from ``initial_ledger`` (the state the launcher established from the ``ledger`` topic by
:func:`~privstream.connectors.ledger_topic.read_ledger`, read to its end, so a new job never forgets
budget spent by an earlier one); a job restored from a savepoint or checkpoint takes the more
advanced of its restored ledger and the topic's, so restoring an older savepoint never forgets
charges recorded after it. Main output: typed objects, one per epoch
(:class:`~privstream.mechanisms.Release`, or a :class:`~privstream.operators.release_logic.ReleaseRefusal`
for an epoch the exhausted budget refuses), for the public operators of :mod:`privstream.flink`
and the heavy-hitters job alike (the job encodes them at its edge, before the releases sink:
:func:`encode_releases`); side output ``LEDGER``: ``Row(ledger_id, LedgerEntry)``, one per charge,
for the compacted topic (while it runs, the operator also heartbeats on that topic as the
ledger's writer: :mod:`~privstream.connectors.ledger_lease`); side output ``SKETCHES``
(only with ``hooks.expose_sketches_topic``, TESTS/AUDIT ONLY: it is *not* private) the pre-noise
sketches. ``hooks`` (:class:`~privstream.operators.test_hooks.TestHooks`, TESTS ONLY, None in
production) also carries the seed of deterministic noise.
Both sinks are transactional, so a restore never publishes a release or a charge twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.ledger_lease import Heartbeat, LedgerLease
from privstream.operators.epochs import EpochPolicy
from privstream.operators.kafka_io import BYTES, KEYED_BYTES
from privstream.operators.metrics import OperatorMetrics, micros
from privstream.operators.release_logic import EpochReleaser, ReleaseConfig, encode_outcome, reconcile_ledgers
from privstream.operators.shard_logic import EpochReleaseInput
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks
from pyflink.common import Row
from pyflink.datastream import OutputTag
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from privstream.noise.rng import new_noise_key

LEDGER = OutputTag("ledger", KEYED_BYTES)
SKETCHES = OutputTag("merged-sketches", BYTES)


class ReleaseFunction(KeyedProcessFunction):
    def __init__(
        self,
        config: ReleaseConfig,
        spec: SketchSpec,
        policy: EpochPolicy,
        initial_ledger: bytes | None = None,
        hooks: TestHooks | None = None,
        lease: LedgerLease | None = None,
        submission_key: bytes | None = None,
    ) -> None:
        self.config = config
        self.spec = spec
        self.policy = policy
        self.initial_ledger = initial_ledger
        self.hooks = hooks  #: TESTS ONLY (None in production)
        self.expose_sketches = hooks is not None and bool(hooks.expose_sketches_topic)
        self.lease = lease
        #: the launcher's per-submission secret (in the job graph): the noise key until the first
        #: checkpoint holds one, so a failure before it redraws the same noise for a replayed epoch
        self.submission_key = submission_key
        self._spent_micros = self._state_size = 0
        self.metrics = OperatorMetrics.disabled()  # open() registers the real ones

    def open(self, runtime_context: RuntimeContext) -> None:
        self.ledger = runtime_context.get_state(ValueStateDescriptor("privacy-ledger", BYTES))
        self.noise_key = runtime_context.get_state(ValueStateDescriptor("noise-key", BYTES))
        # Reconciled with the restored ledger once per open(); open() runs again after every restore.
        self._pending_initial: bytes | None = self.initial_ledger
        self._heartbeat = None if self.lease is None else Heartbeat(self.lease).start()
        #: the ledger's spent ε (the start-up's ledger until the first release) and the state's
        #: bytes as last written: the epsilonSpentMicros and stateBytes gauges
        self._spent_micros = 0 if self.initial_ledger is None else _spent_micros(self.initial_ledger)
        self._state_size = 0
        self.metrics = OperatorMetrics.register(
            runtime_context,
            ("releases", "refusals"),
            {"epsilonSpentMicros": lambda: self._spent_micros, "stateBytes": lambda: self._state_size},
        )

    def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _noise_key(self) -> bytes:
        """The secret key of this job's replay-stable noise: the checkpointed one, else the
        submission's (drawn once by the launcher from the CSPRNG and carried in the job graph, so a
        restore before the first checkpoint draws the same noise), stored in state on first use."""
        key = self.noise_key.value()
        if key is None:
            key = self.submission_key or new_noise_key()
            self.noise_key.update(key)
        return bytes(key)

    def _ledger(self) -> bytes | None:
        """The stored ledger, reconciled with ``initial_ledger`` on the first release after open()."""
        value = self.ledger.value()
        stored = None if value is None else bytes(value)
        if self._pending_initial is None:
            return stored
        reconciled = reconcile_ledgers(stored, self._pending_initial)
        self._pending_initial = None
        return reconciled

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        merged = EpochReleaseInput(*value)
        releaser = EpochReleaser(
            self.config, self.spec, self.policy, self._ledger(), noise_key=self._noise_key(), hooks=self.hooks
        )
        if self.expose_sketches:
            yield from ((SKETCHES, snapshot) for snapshot in self._snapshots(merged))
        outcome, ledger_entry = releaser.decide(merged)
        ledger = releaser.ledger.to_bytes()
        self.ledger.update(ledger)
        # a charge (its ledger entry) is a release; an epoch without one was refused (budget
        # exhausted: a ReleaseRefused in its place; or a refused input: nothing published)
        self.metrics.inc("releases" if ledger_entry is not None else "refusals")
        self._spent_micros = micros(_spent(releaser.ledger))
        self._state_size = len(ledger) + len(self._noise_key())
        if ledger_entry is not None:
            yield LEDGER, Row(releaser.ledger.ledger_id.encode(), ledger_entry)
        if outcome is not None:
            yield outcome

    def _snapshots(self, merged: EpochReleaseInput) -> list[bytes]:
        """TESTS/AUDIT ONLY: the pre-noise sketches as Avro ``SketchSnapshot`` records (not private):
        every shard's (per-shard release) or the merged one (shard -1)."""
        loaded = self.spec.load_release_input(merged.data)
        sketches = list(enumerate(loaded)) if isinstance(loaded, list) else [(-1, loaded)]
        return [
            encode(
                "SketchSnapshot",
                {
                    "sketch_type": type(sketch).__name__,
                    "build": sketch.build.name,
                    "shard": shard,
                    "epoch": merged.epoch,
                    "n": sketch.n,
                    "data": sketch.to_bytes(),
                    "created_time": int(time.time() * 1000),
                },
            )
            for shard, sketch in sketches
        ]


def encode_releases(releases: Any, policy: EpochPolicy) -> Any:
    """The heavy-hitters job's edge: ``releases`` (the typed outcomes of :class:`ReleaseFunction`) as
    Avro ``Release``/``ReleaseRefused`` bytes for the releases topic
    (:func:`~privstream.operators.release_logic.encode_outcome`). Not chained to the release
    operator: PyFlink hands a chained Python function its upstream's side outputs too
    (:data:`privstream.flink.streams.SIDE_OUTPUT_LEAK`), and the ledger entries must not reach it."""
    return (
        releases.map(partial(encode_outcome, policy=policy), output_type=BYTES)
        .uid("release-encode")
        .name("encode releases (Avro)")
        .set_parallelism(1)
        .disable_chaining()
    )


def _spent(ledger: Any) -> float:
    """The ε a ledger has spent (its composition's total so far)."""
    return float(getattr(ledger.spent(), "epsilon", 0.0))


def _spent_micros(ledger_bytes: bytes) -> int:
    from privstream.accounting import PrivacyLedger

    return micros(_spent(PrivacyLedger.from_bytes(ledger_bytes)))
