"""Private heavy hitters as operators in a user's own PyFlink ``DataStream`` pipeline.

:func:`private_heavy_hitters` takes the user's stream of elements (plain items, or
``(item, user, event_time)`` tuples/Rows; user level: ``(user, items, event_time)``) and returns
:class:`PrivateHeavyHitters`: a ``DataStream`` of typed releases — the core's
:class:`~privstream.mechanisms.Release` (ε, δ, mechanism, neighbour relation, privacy unit, error
bound, epoch) or a :class:`~privstream.operators.release_logic.ReleaseRefusal` where the ledger's
budget is exhausted — plus the rejected elements with their reasons and the ledger's entries.

Inside: each element's shard is the hash of its item (or user) — data-independent, so one element
changes one shard's stream (Lebeda–Tětek Cor. 7.2) — then per-shard epoch sketches (MG Alg. 1 item by
item, or PAMG Alg. 4 user by user) in keyed state, the fixed-order merge, and one charge and one
noisy release per epoch (the same operator bodies as the ``heavy-hitters`` job). Epochs:

* ``CountEpochs(n)``: every n elements of a shard (relation: replace one element by one routed to the
  same shard; stream lengths public; calibrated for its remove + add by group privacy);
* ``TimeEpochs(length_ms)`` with a public clock: ``Punctuation(watermark_ms)`` elements in the stream
  itself (no element with an earlier time follows; each is sent to every shard, in order with the
  elements — a separate clock stream would race the events), or ``schedule=(start_ms, end_ms)``, a
  declared span whose epochs are all released at the end of a bounded input. Which epochs are
  released is then a function of the clock only (empty epochs are released too), never of the data
  (docs/privacy.md). Punctuations must come from one clock: one upstream subtask.

The ledger is an argument: :class:`InMemoryLedger` (kept in the release operator's checkpointed
state) or :class:`KafkaLedger` (read to its end with the fence protocol before the graph is built,
charged with the same fail-closed rules as the jobs, entries written to its compacted topic by a
transactional sink; the environment needs the Kafka connector jars,
:func:`privstream.connectors.flink_jars.connector_jar_urls`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from pyflink.common import Types
from pyflink.datastream import DataStream

from privstream.accounting import Budget
from privstream.flink.streams import (
    PICKLED,
    ToShard,
    check_argument,
    check_stream,
    is_int,
    parallelism_of,
    route,
)
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.release_logic import ReleaseConfig, new_ledger
from privstream.operators.routing import SHARD_KEYS
from privstream.operators.shard_operator import REJECTED, TypedEvent
from privstream.operators.sketch_spec import RELEASE_MODES, SketchSpec, kind_for
from privstream.operators.window_logic import LedgerCharge
from privstream.validation import check_privacy_bound


@dataclass(frozen=True)
class InMemoryLedger:
    """A ledger that lives in the release operator's checkpointed state (tests, one-off runs): it
    refuses releases past ``total_epsilon``/``total_delta``; nothing outside the job records it."""

    total_epsilon: float
    total_delta: float
    ledger_id: str = "privstream/in-memory"


@dataclass(frozen=True)
class KafkaLedger:
    """A ledger on a compacted Kafka topic (the jobs' ``--ledger-topic``): read to its end before the
    graph is built (a ledger id with another total or composition, a broken chain or another live
    writer refuses the start), charged fail closed, one hash-chained entry per charge."""

    bootstrap: str
    ledger_id: str
    total_epsilon: float
    total_delta: float
    topic: str = "ledger"
    timeout_s: float = 60.0
    lease_s: float = 60.0
    job_name: str = "privstream-operators"


def check_name(name: object) -> None:
    """Graph-build check of a public operator's ``name`` (its operators' names and Kafka ids)."""
    check_argument(
        "name", name, isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9._-]+", name) is not None, "a name"
    )


def check_ledger(ledger: object) -> None:
    """Graph-build check of a public operator's ``ledger`` argument."""
    check_argument(
        "ledger", ledger, isinstance(ledger, InMemoryLedger | KafkaLedger), "InMemoryLedger or KafkaLedger"
    )


def charge_once(
    ledger: InMemoryLedger | KafkaLedger, budget: Budget, *, mechanism: str, label: Callable[[str], str]
) -> LedgerCharge:
    """Charge a graph's whole ``budget`` once, at build time, before the graph exists (the operators
    whose every release is post-processing of noise drawn for the whole run: sliding window,
    continual). The ledger composes sequentially. :class:`KafkaLedger`: read to its end first, fail
    closed, the entry written and acknowledged (:func:`~privstream.connectors.ledger_topic.charge_on_topic`);
    :class:`InMemoryLedger`: the budget must fit its total. ``label(submission)``: the entry's label.
    Raises ``ValueError`` naming ``ledger`` when the charge is refused."""
    from privstream.accounting import BudgetExceeded, PrivacyLedger

    try:
        expected = PrivacyLedger(
            Budget(ledger.total_epsilon, ledger.total_delta),
            composition="sequential",
            ledger_id=ledger.ledger_id,
        )
        if isinstance(ledger, KafkaLedger):
            from privstream.connectors.ledger_topic import charge_on_topic

            entry = charge_on_topic(
                ledger.bootstrap,
                ledger.topic,
                expected,
                budget,
                mechanism=mechanism,
                label=label,
                job_name=ledger.job_name,
                timeout_s=ledger.timeout_s,
            )
        else:
            entry = expected.charge(budget, mechanism=mechanism, label=label("in-memory"))
    except (ValueError, TypeError, BudgetExceeded) as exc:
        raise ValueError(f"ledger: {exc}") from None
    return LedgerCharge(entry.ledger_id, entry.sequence, entry.entry_hash)


class PrivateHeavyHitters(NamedTuple):
    """What :func:`private_heavy_hitters` adds to the graph."""

    releases: DataStream  #: Release or ReleaseRefusal objects, one per epoch
    rejected: DataStream  #: Rejected(element, reason, shard): elements not counted, with the reason
    ledger_entries: DataStream  #: Row(ledger id bytes, Avro LedgerEntry bytes), one per charge


def private_heavy_hitters(
    events: DataStream,
    *,
    epsilon: float,
    delta: float,
    k: int,
    epochs: CountEpochs | TimeEpochs,
    ledger: InMemoryLedger | KafkaLedger,
    punctuated: bool = False,
    schedule: tuple[int, int] | None = None,
    shards: int = 1,
    m: int | None = None,
    shard_key: str | None = None,
    release_mode: str | None = None,
    mechanism: str = "auto",
    name: str = "private-heavy-hitters",
) -> PrivateHeavyHitters:
    """Private heavy hitters of ``events`` per epoch (module docstring). ``epsilon``/``delta``: each
    epoch's release; ``k``: counters per shard sketch; ``shards``: hash shards (parallel sketch keys);
    ``m``: user level (PAMG, ≤ m distinct items per user set); ``release_mode``: ``per-shard``
    (default for MG: each shard's sketch released with PMG and summed) or ``merged`` (default for
    PAMG); ``mechanism``: ``auto`` or a registered name. Bad arguments raise ``ValueError`` naming
    the argument before anything is added to the graph."""
    check_argument(
        "epochs", epochs, isinstance(epochs, CountEpochs | TimeEpochs), "CountEpochs(n) or TimeEpochs(ms)"
    )
    timed = isinstance(epochs, TimeEpochs)
    if timed and punctuated == (schedule is not None):
        raise ValueError(
            "punctuated/schedule: time epochs need exactly one public clock: punctuated=True (Punctuation "
            "elements in the stream) or schedule=(start_ms, end_ms)"
        )
    if not timed and (punctuated or schedule is not None):
        raise ValueError("punctuated/schedule: only time epochs take a clock")
    if schedule is not None:
        check_argument(
            "schedule",
            schedule,
            len(schedule) == 2 and all(is_int(t) for t in schedule) and schedule[0] < schedule[1],
            "(start_ms, end_ms) ints with start < end",
        )
    check_argument("shards", shards, is_int(shards) and shards >= 1, "an int >= 1")
    check_argument("k", k, is_int(k) and k >= 1, "an int >= 1")
    check_argument("m", m, m is None or (is_int(m) and 1 <= m < k), f"None or an int with 1 <= m < k={k}")
    check_argument("shard_key", shard_key, shard_key in (None, *SHARD_KEYS), f"one of {SHARD_KEYS}")
    check_argument(
        "release_mode", release_mode, release_mode in (None, *RELEASE_MODES), f"one of {RELEASE_MODES}"
    )
    check_name(name)
    for arg, value in (("epsilon", epsilon), ("delta", delta)):
        check_argument(arg, value, isinstance(value, int | float) and math.isfinite(value), "a finite number")
    check_argument("epsilon", epsilon, epsilon > 0, "epsilon > 0")
    check_argument("delta", delta, delta >= 0, "delta >= 0")
    for arg, value in (("epsilon", epsilon), ("delta", delta)):
        check_privacy_bound(arg, value, arg)  # the project's one rule: ε <= 100, δ <= 0.1
    check_ledger(ledger)
    user_level = m is not None
    if user_level and shard_key == "item":
        raise ValueError("shard_key: a user-level operator (m) shards by user: one user's sets in one shard")
    check_stream(events, needs_time=timed, user_level=user_level, punctuated=punctuated, epochs="time epochs")
    spec = SketchSpec(kind_for(user_level=user_level).name, k, m, shard_key, release_mode)
    config = ReleaseConfig(
        epsilon, delta, ledger.total_epsilon, ledger.total_delta, ledger.ledger_id, mechanism=mechanism
    )
    problem = spec.mechanism_problem(mechanism, Budget(epsilon, delta))
    if problem is not None:
        raise ValueError(f"{'/'.join(problem[0])}: {problem[1]}")
    initial, lease = _initial_ledger(ledger, config, spec, epochs)
    return _build(events, spec, config, epochs, initial, lease, schedule, shards, name, ledger)


def _initial_ledger(
    ledger: InMemoryLedger | KafkaLedger,
    config: ReleaseConfig,
    spec: SketchSpec,
    epochs: CountEpochs | TimeEpochs,
) -> Any:
    """The ledger's starting state and, for a Kafka ledger, the lease of this graph's writer."""
    empty = new_ledger(config, spec, epochs)
    if isinstance(ledger, InMemoryLedger):
        return empty.to_bytes(), None
    from privstream.connectors.ledger_lease import LedgerLease
    from privstream.connectors.ledger_topic import read_ledger

    read = read_ledger(
        ledger.bootstrap,
        ledger.topic,
        empty,
        job_name=ledger.job_name,
        timeout_s=ledger.timeout_s,
        lease_s=ledger.lease_s,
    )
    lease = LedgerLease(
        bootstrap=ledger.bootstrap,
        topic=ledger.topic,
        ledger_id=ledger.ledger_id,
        writer=read.nonce,
        job_name=ledger.job_name,
        lease_s=ledger.lease_s,
    )
    return read.state, lease


def _build(
    events: DataStream,
    spec: SketchSpec,
    config: ReleaseConfig,
    epochs: CountEpochs | TimeEpochs,
    initial: bytes,
    lease: Any,
    schedule: tuple[int, int] | None,
    shards: int,
    name: str,
    ledger: InMemoryLedger | KafkaLedger,
) -> PrivateHeavyHitters:
    from privstream.noise.rng import new_noise_key
    from privstream.operators.combine_operator import EpochCombineFunction
    from privstream.operators.release_operator import LEDGER, ReleaseFunction
    from privstream.operators.shard_keys import process_by_shard
    from privstream.operators.sketch_operator import ShardSketchFunction

    env = events.get_execution_environment()
    timed = isinstance(epochs, TimeEpochs)
    to_shard = ToShard(
        user_level=spec.user_sets,
        shard_key=spec.shard_key or ("user" if spec.user_sets else "item"),
        shards=shards,
        needs_time=timed,
    )
    accepted, rejected_early = route(events, to_shard, name)
    announce = (  # at the routed stream's parallelism: union then key_by keeps it (forward)
        env.from_collection(list(range(shards)), type_info=Types.INT())
        .map(lambda shard: TypedEvent(shard, None, None), output_type=PICKLED)
        .set_parallelism(parallelism_of(events))
    )
    accepted = accepted.union(announce)
    sketches = process_by_shard(
        accepted,
        shards,
        lambda e: e[0],
        ShardSketchFunction(spec, epochs, name, shards=shards, typed=True, schedule=schedule),
        PICKLED,
    ).name(f"{name}: shard sketches")
    merged = (
        sketches.key_by(lambda _: 0, key_type=Types.INT())
        .process(EpochCombineFunction(shards, spec), output_type=PICKLED)
        .name(f"{name}: fixed-order merge")
        .set_parallelism(1)
    )
    releases = (
        merged.key_by(lambda _: 0, key_type=Types.INT())
        .process(
            ReleaseFunction(config, spec, epochs, initial, lease=lease, submission_key=new_noise_key()),
            output_type=PICKLED,
        )
        .name(f"{name}: release + ledger")
        .set_parallelism(1)
        .disable_chaining()  # see privstream.flink.streams.SIDE_OUTPUT_LEAK
    )
    entries = releases.get_side_output(LEDGER)
    if isinstance(ledger, KafkaLedger):
        from privstream.operators.kafka_io import kafka_sink

        entries.sink_to(
            kafka_sink(
                bootstrap=ledger.bootstrap,
                topic=ledger.topic,
                keyed=True,
                transactional_id_prefix=re.sub(
                    r"[^A-Za-z0-9._-]", "-", f"privstream-{ledger.ledger_id}-{name}"
                ),
            )
        ).name(f"{name}: ledger sink").set_parallelism(1)
    rejected = rejected_early.union(sketches.get_side_output(REJECTED))
    return PrivateHeavyHitters(releases, rejected, entries)
