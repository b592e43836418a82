"""Private continual heavy hitters (Chan–Li–Shi–Xu's PDCH-LU / PDCH-BF) in a user's own PyFlink pipeline.

:func:`private_continual_heavy_hitters` takes the user's stream of ``(item, user, event_time)``
elements (items of the declared universe ``0 .. universe-1``) with a public clock — ``Punctuation``
elements in the stream, or a declared ``schedule`` — and returns :class:`PrivateContinualHeavyHitters`:
a ``DataStream`` of one release per time step (the continual-monitor job's ``Release`` record as a
dict: the step, its heavy hitters with their estimated counts and the guarantee), the rejected elements
with their reasons, and the one ledger charge that covers every release.

Inside, as in the ``continual-monitor`` job (docs/continual.md): each element's **node** is the hash
of its item (:func:`privstream.operators.elements.element_payload`, computed from the element alone),
so one element changes one node's stream; each node cuts its stream into time steps of ``step_ms``
by the clock (a step closes on a punctuation, never on event times; every step from the first
punctuation to the last is released, empty ones too) and runs its protocol — a PDCH-LU node
(``mode="lu"``) or a PDCH-BF node (``mode="bf"``, with the nodes' keys from ``privstream keys``) — in
keyed state (:class:`~privstream.operators.continual_operator.ContinualNodeFunction`, the job's own
operator); one aggregator (:class:`~privstream.operators.continual_operator.ContinualAggregatorFunction`)
combines the nodes' updates and releases step s once every node has closed it.

**Relation** (Chan et al. Lemma 3 and Theorem 1 / §4.3): add or remove one element; its node is
decided by its item's hash and its step by its own, trusted, event time relative to the public
clock, so it changes one step of one node's stream, hence one block per level of that node's PCC
(Lemma 2 bounds each block's change), and that node's whole transcript is ε-DP (Σ ε_i < ε). The
nodes hold disjoint elements, so the whole output is ε-DP (parallel composition), for the whole
run: the ledger is charged ``(epsilon, 0)`` **once per graph**, at build time, as for the sliding
window. The aggregator post-processes. An element late for its step (at or before the clock) is
rejected, not counted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pyflink.common import Types
from pyflink.common.typeinfo import RowTypeInfo, TupleTypeInfo
from pyflink.datastream import DataStream

from privstream.connectors.avro_codec import decode
from privstream.flink.heavy_hitters import InMemoryLedger, KafkaLedger, charge_once, check_ledger, check_name
from privstream.flink.streams import (
    PICKLED,
    ToShard,
    check_argument,
    check_stream,
    is_int,
    parallelism_of,
    route,
)
from privstream.operators.continual_logic import ContinualSettings
from privstream.operators.shard_operator import REJECTED, TypedEvent
from privstream.operators.window_logic import LedgerCharge

#: ContinualSettings' option names in its errors → this function's argument
_OPTIONS = {
    "--mode": "mode",
    "--epsilon": "epsilon",
    "--lam": "lam",
    "--lambda": "lam",
    "--window": "window",
    "--universe": "universe",
    "--step": "step_ms",
    "--window-items": "window_items",
    "--theta": "theta",
    "--delta": "delta",
    "--keys": "keys_dir",
}
MECHANISM = "continual-pcc"  #: the ledger entry's mechanism


class PrivateContinualHeavyHitters(NamedTuple):
    """What :func:`private_continual_heavy_hitters` adds to the graph."""

    releases: DataStream  #: Release dicts, one per time step (the job's Avro ``Release`` record)
    rejected: DataStream  #: Rejected(element, reason, node): elements not counted, with the reason
    charge: LedgerCharge  #: the one ledger entry that covers every release of the graph


def _settings(**arguments: Any) -> ContinualSettings:
    """:class:`ContinualSettings` (its own validation), its errors naming this function's argument."""
    try:
        return ContinualSettings(**arguments)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        for option, argument in _OPTIONS.items():
            if message.startswith(option + ":") or message.startswith(option + " "):
                raise ValueError(f"{argument}: {message[len(option) :].lstrip(': ')}") from None
        name = message.split(":", 1)[0]
        if name in arguments:
            raise ValueError(message) from None
        raise ValueError(f"settings: {message}") from None


def private_continual_heavy_hitters(
    events: DataStream,
    *,
    epsilon: float,
    lam: float,
    window: int,
    universe: int,
    theta: float,
    step_ms: int,
    ledger: InMemoryLedger | KafkaLedger,
    nodes: int = 2,
    mode: str = "lu",
    window_items: int | None = None,
    delta: float = 1e-6,
    keys_dir: str | None = None,
    schedule: tuple[int, int] | None = None,
    name: str = "private-continual",
) -> PrivateContinualHeavyHitters:
    """Continual heavy hitters of ``events`` per time step (module docstring). The names are the
    job's (:class:`~privstream.operators.continual_logic.ContinualSettings`): ``epsilon`` per node
    for the whole run, ``lam`` (λ: the error target as a fraction of the window's count), ``window``
    (W, in steps), ``universe`` (items 0..n-1), ``theta`` (θ: heavy at ≥ θ of the window),
    ``step_ms``, ``nodes`` (hash shards, each one node of the protocol), ``mode`` ("lu" or "bf"),
    ``window_items`` (a public bound on a node's items per window; default W), and for "bf"
    ``delta`` and ``keys_dir``. The clock: ``Punctuation`` elements in a pickled stream, or
    ``schedule=(start_ms, end_ms)`` (both multiples of ``step_ms``; every step of the span is
    released when the input ends). Bad arguments raise ``ValueError`` naming the argument before
    anything is charged or added to the graph."""
    check_argument("nodes", nodes, is_int(nodes) and nodes >= 1, "an int >= 1")
    for argument, value in (("step_ms", step_ms), ("window", window), ("universe", universe)):
        check_argument(argument, value, is_int(value), "an int")
    settings = _settings(
        mode=mode,
        epsilon=epsilon,
        lam=lam,
        window=window,
        universe=universe,
        nodes=nodes,
        theta=theta,
        step_ms=step_ms,
        window_items=window_items,
        delta=delta,
        keys_dir=keys_dir,
    )
    check_name(name)
    check_ledger(ledger)
    if schedule is not None:
        ok = (
            isinstance(schedule, tuple)
            and len(schedule) == 2
            and all(is_int(t) and t % step_ms == 0 for t in schedule)
            and schedule[0] < schedule[1]
        )
        check_argument(
            "schedule", schedule, ok, f"(start_ms, end_ms), start < end, multiples of step_ms={step_ms}"
        )
    check_stream(events, needs_time=True, user_level=False, punctuated=schedule is None, epochs="time steps")
    if schedule is None and isinstance(events.get_type(), RowTypeInfo | TupleTypeInfo):
        raise ValueError(
            "events: punctuated time steps need a pickled stream (Punctuation elements among the events), "
            "not Rows or tuples: map it to Types.PICKLED_BYTE_ARRAY() with the punctuations, or give schedule="
        )
    from privstream.accounting import Budget

    charge = charge_once(
        ledger,
        Budget(settings.epsilon, 0.0),
        mechanism=MECHANISM,
        label=lambda submission: (
            f"continual heavy hitters ({mode}) {name}: every release of this graph (submission {submission})"
        ),
    )
    releases, rejected = _build(events, settings.with_secrets(), schedule, name)
    return PrivateContinualHeavyHitters(releases, rejected, charge)


def _build(
    events: DataStream, settings: ContinualSettings, schedule: tuple[int, int] | None, name: str
) -> tuple[DataStream, DataStream]:
    """Hash shard → one protocol node per shard key → the aggregator → (release dicts, rejected)."""
    from privstream.operators.continual_operator import ContinualAggregatorFunction, ContinualNodeFunction
    from privstream.operators.shard_keys import process_by_shard

    env = events.get_execution_environment()
    to_shard = ToShard(user_level=False, shard_key="item", shards=settings.nodes, needs_time=True)
    accepted, rejected_early = route(events, to_shard, name)
    announce = (  # every node closes its steps, also without elements (as the heavy-hitters operator)
        env.from_collection(list(range(settings.nodes)), type_info=Types.INT())
        .map(lambda node: TypedEvent(node, None, None), output_type=PICKLED)
        .set_parallelism(parallelism_of(events))
    )
    updates = (
        process_by_shard(
            accepted.union(announce),
            settings.nodes,
            lambda e: e[0],
            ContinualNodeFunction(settings, name, typed=True, schedule=schedule),
            PICKLED,
        )
        .name(f"{name}: protocol node per shard")
        .disable_chaining()  # see privstream.flink.streams.SIDE_OUTPUT_LEAK
    )
    releases = (
        updates.map(lambda update: (update, -1, -1), output_type=PICKLED)
        .key_by(lambda _: 0, key_type=Types.INT())
        .process(ContinualAggregatorFunction(settings, name), output_type=PICKLED)
        .name(f"{name}: aggregator")
        .set_parallelism(1)
        .disable_chaining()  # its dead letters (never this graph's own updates): SIDE_OUTPUT_LEAK
        .map(lambda record: decode(record)[1], output_type=PICKLED)
        .set_parallelism(1)
    )
    return releases, rejected_early.union(updates.get_side_output(REJECTED))
