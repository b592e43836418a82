"""Private sliding-window frequencies and heavy hitters (DPSW-Sketch) in a user's own PyFlink pipeline.

:func:`private_sliding_window` takes the user's stream of elements — plain items, or
``(item, user, event_time)`` tuples/Rows, with :class:`~privstream.flink.Punctuation` elements for
event-time windows — and returns :class:`PrivateSlidingWindow`: a ``DataStream`` of typed releases
(the ``WindowRelease`` dict of :meth:`~privstream.operators.window_logic.WindowShardLogic.release_record`:
per shard, the Alg. 3 estimates of the public query set, the γ-heavy hitters of the declared domain
(Alg. 3 lines 6–9), the window, the guarantee — ρ-zCDP by Lemma 4.1, (ε, δ) by Thm 3.2 — its
neighbour relation and the ledger charge that covers it), the rejected elements with their reasons,
and that charge.

DPSW-Sketch is Wang–Wang–Chen, KDD 2024 (docs/sliding-window.md). Inside: each element's shard is
the hash of its item (or user, ``shard_key="user"``), computed from the element alone
(:func:`privstream.operators.elements.element_payload`), so one element changes one shard's stream;
each shard keeps one DPSW-Sketch (Alg. 2 maintenance) in keyed state — the body of the
``sliding-window`` job, :class:`~privstream.operators.window_logic.WindowShardLogic` — and releases
independently (shards are disjoint: parallel composition). Windowing:

* ``"count"`` (the paper's): the last ``window`` items of a shard, released at every substream end
  (every ``substream`` items of that shard). Relation: replace one item at a fixed position of one
  shard's stream by one the hash puts in the same shard; shard lengths public. ``Punctuation``
  elements are ignored (as the job ignores ``EpochWatermark``).
* ``"event-time"``: the last ``window`` ms; elements need an event time, and the stream carries
  ``Punctuation(watermark_ms)`` elements (no later element has an earlier time), each sent to every
  shard in order with the elements. A punctuation that completes a substream of the public grid
  (``origin`` + k·``substream``) releases once per shard — also a shard that holds no element —, so
  which releases happen depends only on the punctuations, never on the data. Relation:
  add/remove one event (:func:`privstream.window.params.shard_relation`); late events (at or before
  the clock) and events beyond the horizon (more than one substream ahead) are rejected, not counted.
  ``window_items`` is the PUBLIC bound on a shard's items per window (the threshold (γ − ζ)·n).
  Punctuations must come from one clock: one upstream subtask.

The ledger is charged **once per graph** at build time, as the job charges once per submission
(every release is post-processing of noise drawn once per substream, DPSW Lemma 4.1):
:class:`~privstream.flink.InMemoryLedger` checks that the run's (ε, δ) fits its total and records the
entry; :class:`~privstream.flink.KafkaLedger` goes through the job's own
:func:`privstream.jobs.sliding_window.charge_ledger` (read to its end first, fail closed, one
hash-chained entry written before the graph exists). The noise key is a fresh CSPRNG secret per call
(:attr:`~privstream.operators.window_logic.WindowSettings.submission_key`), HMAC-derived per shard.

Keyed state per shard: the sketch's versioned binary state as last written
(:meth:`WindowShardLogic.to_bytes`, restored by ``WindowShardLogic(..., state)``: at every release,
clock move, rejection, and at least every
:data:`~privstream.operators.unflushed.FLUSH_EVERY` elements) plus the elements seen since (a
list of at most ``FLUSH_EVERY`` − 1): a restore rebuilds the sketch from both, with the same keyed
noise, without serialising the whole sketch after every element.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from pyflink.common import Types
from pyflink.common.typeinfo import RowTypeInfo, TupleTypeInfo
from pyflink.datastream import DataStream
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from privstream.connectors.avro_codec import decode
from privstream.flink.heavy_hitters import InMemoryLedger, KafkaLedger, charge_once, check_ledger, check_name
from privstream.flink.streams import PICKLED, Punctuation, ToShard, check_argument, check_stream, route
from privstream.operators.kafka_io import BYTES
from privstream.operators.payloads import EventPayload, WatermarkPayload
from privstream.operators.shard_keys import process_by_shard
from privstream.operators.shard_operator import REJECTED, Rejected, TypedEvent
from privstream.operators.unflushed import UnflushedMessages
from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

#: WindowSettings' (and the core's) names in its errors → this function's argument
_ALIASES = {"seed": "hash_seed", "zeta": "width", "rho": "epsilon"}
_NAMED = re.compile(r"^(?:--)?([a-z][a-z_-]*)(?: \(--[a-z-]+\))?: (.*)$", flags=re.S)


class PrivateSlidingWindow(NamedTuple):
    """What :func:`private_sliding_window` adds to the graph."""

    releases: DataStream  #: WindowRelease dicts (release_record), one per shard and substream end
    rejected: DataStream  #: Rejected(element, reason, shard): elements not counted, with the reason
    charge: LedgerCharge  #: the one ledger entry that covers every release (each release names it)


def _named(message: str, arguments: Sequence[str]) -> str:
    """``message`` of a WindowSettings/core error, starting with the argument it is about."""
    match = _NAMED.match(message)
    if match is not None:
        name = match.group(1).replace("-", "_")
        name = _ALIASES.get(name, name)
        if name in arguments:
            rest = match.group(2)
            return f"{name}: {rest.removeprefix(f'{match.group(1)}: ')}"  # "gamma (--gamma): gamma: ..."
    return f"settings: {message}"


def _settings(**arguments: Any) -> WindowSettings:
    """:class:`WindowSettings` of the arguments (its own validation), errors naming the argument."""
    for name in ("queries", "checkpoints"):
        value = arguments[name]
        if value is not None:
            ok = isinstance(value, Sequence) and not isinstance(value, str | bytes)
            check_argument(name, value, ok, "None or a sequence of ints")
            arguments[name] = tuple(value)
    try:
        return WindowSettings(**arguments)
    except (ValueError, TypeError) as exc:
        raise ValueError(_named(str(exc), list(arguments))) from None


def private_sliding_window(
    events: DataStream,
    *,
    window: int,
    substream: int,
    epsilon: float,
    delta: float,
    domain_size: int,
    gamma: float,
    ledger: InMemoryLedger | KafkaLedger,
    depth: int = 3,
    width: int = 2000,
    shards: int = 1,
    windowing: str = "count",
    window_items: int | None = None,
    origin: int | None = None,
    queries: Sequence[int] | None = None,
    checkpoints: Sequence[int] | None = None,
    alpha: float | None = None,
    budget_ratio: float | None = None,
    hash_seed: int = 0,
    shard_key: str = "item",
    name: str = "private-sliding-window",
) -> PrivateSlidingWindow:
    """DPSW-Sketch releases of ``events`` per shard (module docstring). The names are the job's
    (:class:`~privstream.operators.window_logic.WindowSettings`): ``window`` w and ``substream`` W
    (items, or ms for ``windowing="event-time"``), ``depth``/``width`` of each PCMS (Alg. 1),
    ``epsilon``/``delta`` of each shard's sketch for the whole run (Lemma 4.1, Thm 3.2),
    ``domain_size`` (heavy hitters are items 0..d-1), ``gamma`` (heavy: ≥ (γ − ζ)·w, Alg. 3 line 8),
    ``queries`` (the public query set; default: the domain), ``checkpoints`` or ``alpha`` and
    ``budget_ratio`` (Alg. 2 lines 1–4), ``hash_seed``; event time: ``window_items`` (required) and
    ``origin``. Bad arguments raise ``ValueError`` naming the argument before anything is charged
    or added to the graph."""
    settings = _settings(
        window=window,
        substream=substream,
        depth=depth,
        width=width,
        epsilon=epsilon,
        delta=delta,
        domain_size=domain_size,
        gamma=gamma,
        shards=shards,
        checkpoints=checkpoints,
        alpha=alpha,
        budget_ratio=budget_ratio,
        hash_seed=hash_seed,
        queries=queries,
        shard_key=shard_key,
        windowing=windowing,
        origin=origin,
        window_items=window_items,
    )
    check_name(name)
    check_ledger(ledger)
    check_stream(
        events,
        needs_time=settings.event_time,
        user_level=False,
        punctuated=settings.event_time,
        epochs="event-time windows",
    )
    if settings.event_time and isinstance(events.get_type(), RowTypeInfo | TupleTypeInfo):
        raise ValueError(
            "events: event-time windows release on Punctuation elements in the stream, which a stream of "
            "Rows or tuples cannot hold: map it to Types.PICKLED_BYTE_ARRAY() with the punctuations"
        )
    from privstream.accounting import Budget
    from privstream.jobs.sliding_window import MECHANISM

    charge = charge_once(
        ledger,
        Budget(settings.epsilon, settings.delta),
        mechanism=MECHANISM,
        label=lambda submission: (
            f"sliding-window ({settings.windowing}) {name}: every release of this graph (submission {submission})"
        ),
    )
    settings = replace(settings, charge=charge)
    releases, rejected = _build(events, settings, name)
    return PrivateSlidingWindow(releases, rejected, settings.charge)


def _build(events: DataStream, settings: WindowSettings, name: str) -> tuple[DataStream, DataStream]:
    """Hash shard → one DPSW-Sketch per shard key → (releases, rejected)."""
    to_shard = ToShard(
        user_level=False, shard_key=settings.shard_key, shards=settings.shards, needs_time=settings.event_time
    )
    accepted, rejected_early = route(events, to_shard, name)
    releases = (
        process_by_shard(
            accepted, settings.shards, lambda e: e[0], DPSWShardFunction(settings, name), PICKLED
        )
        .name(f"{name}: DPSW-Sketch per shard")
        .disable_chaining()  # see privstream.flink.streams.SIDE_OUTPUT_LEAK
    )
    return releases, rejected_early.union(releases.get_side_output(REJECTED))


@dataclass
class _Live:
    """A shard's sketch in memory and, for count windows, the items not yet fed (the rest of the
    current substream; fed at once when it completes)."""

    logic: WindowShardLogic
    waiting: list[Any] = field(default_factory=list)


class DPSWShardFunction(KeyedProcessFunction):
    """Keyed by shard: :class:`TypedEvent` → release dicts; :class:`Rejected` on ``REJECTED``.

    State: ``dpsw-sketch`` (:meth:`WindowShardLogic.to_bytes` as last written: module docstring)
    and ``binding`` (:meth:`WindowSettings.binding`, checked on restore, as the job's operator), and
    ``since`` (the payload of every element since, :class:`UnflushedMessages`). The sketch is kept
    in memory and rebuilt from the state after a restore (the elements since replayed into it: an
    element with an output is written at once, so a replayed one had none). A count window's
    items wait in memory until their substream completes (one release) or ``FLUSH_EVERY``
    elements went unwritten; then they are fed to the sketch, which is written."""

    def __init__(self, settings: WindowSettings, name: str) -> None:
        self.settings = settings
        self.name = name

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sketch = runtime_context.get_state(ValueStateDescriptor("dpsw-sketch", BYTES))
        self.binding = runtime_context.get_state(ValueStateDescriptor("binding", Types.STRING()))
        self.since = UnflushedMessages(runtime_context.get_list_state(ListStateDescriptor("since", PICKLED)))
        self._live: dict[int, _Live] = {}  # shard -> sketch; rebuilt after every restore

    def _shard(self, shard: int) -> _Live:
        live = self._live.get(shard)
        if live is None:  # the stored sketch (its binding checked) and the elements since
            stored, binding = self.sketch.value(), self.binding.value() or "(none stored)"
            restored = None if stored is None else bytes(stored)
            live = _Live(WindowShardLogic(self.settings, shard, restored, binding=binding))
            for payload in self.since.restore(shard):
                if self.settings.event_time:
                    live.logic.add_events(payload, b"", 0, self.name)
                else:
                    live.waiting.append(payload.items[0])
            self._live[shard] = live
        return live

    def _store(self, live: _Live) -> None:
        """Write the sketch, a count window's waiting items fed to it first (fewer than the rest of
        their substream: no output)."""
        if live.waiting:
            assert not live.logic.add(live.waiting), "an incomplete substream releases nothing"
            live.waiting = []
        self.sketch.update(live.logic.to_bytes())
        if self.binding.value() != live.logic.binding:
            self.binding.update(live.logic.binding)

    def _outputs(self, outputs: list[tuple[str, bytes]], element: Any, shard: int) -> Iterator[Any]:
        """The logic's outputs: a release as its dict, a dead letter as a :class:`Rejected`."""
        for kind, data in outputs:
            record = decode(data)[1]
            if kind == "release":
                yield record
            else:
                yield REJECTED, Rejected(element, record["error"], shard)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        event = TypedEvent(*value)
        live = self._shard(event.shard)
        try:
            yield from self._process(live, event)
        except BaseException:
            self._live.pop(event.shard, None)  # never keep a sketch left half-changed by an error
            raise

    def _process(self, live: _Live, event: TypedEvent) -> Iterator[Any]:
        logic, payload = live.logic, event.payload
        if isinstance(payload, WatermarkPayload):
            if not self.settings.event_time:
                return  # count windows ignore punctuations (as the job ignores EpochWatermark)
            clock = logic.sketch.clock
            outputs = logic.punctuate(payload.watermark_ms, b"", 0, self.name)
            if logic.sketch.clock != clock:
                self.since.commit(event.shard, None, True, lambda: self._store(live))
            yield from self._outputs(outputs, Punctuation(payload.watermark_ms), event.shard)
            return
        if not isinstance(payload, EventPayload):
            return

        def store() -> None:
            self._store(live)

        if self.settings.event_time:
            outputs = logic.add_events(payload, b"", 0, self.name)
            self.since.commit(event.shard, payload, bool(outputs), store)
            yield from self._outputs(outputs, event.element, event.shard)
            return
        live.waiting.append(payload.items[0])
        if len(live.waiting) < self.settings.substream - logic.sketch.items % self.settings.substream:
            self.since.commit(event.shard, payload, False, store)
            return
        outputs = logic.add(live.waiting)  # exactly the rest of the substream: one release
        live.waiting = []
        self.since.commit(event.shard, None, True, store)
        yield from self._outputs(outputs, event.element, event.shard)
