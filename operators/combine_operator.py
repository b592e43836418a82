"""The combine operator: every shard's sketch of an epoch, combined into that epoch's release input.

:class:`EpochCombineFunction` runs on a single key (all shard sketches are routed to it) and keeps
:class:`~privstream.operators.shard_logic.MergeState` in keyed state: per-shard progress and the
shard sketches of epochs not yet complete. Its checkpointed state is bounded by
(open epochs × shards × sketch size), independent of the stream length. Once every shard has closed
an epoch it emits an :class:`~privstream.operators.shard_logic.EpochReleaseInput`, whose bytes
:meth:`SketchSpec.combine <privstream.operators.sketch_spec.SketchSpec.combine>` decides: per shard
(the MG default) the shards' UNmerged sketches in shard-id order, merged their fixed-order
(mergeable-summaries) merge. The logic is :class:`~privstream.operators.shard_logic.EpochMerger`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privstream.operators.kafka_io import BYTES
from privstream.operators.shard_logic import EpochMerger, EpochReleaseInput, MergeState, ShardSketch
from privstream.operators.sketch_spec import SketchSpec
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class EpochCombineFunction(KeyedProcessFunction):
    """Input :class:`ShardSketch`, output :class:`EpochReleaseInput` (lowest epoch first): the shard
    sketches in shard order (per-shard release) or their fixed-order merge (:meth:`SketchSpec.combine`)."""

    def __init__(self, num_shards: int, spec: SketchSpec) -> None:
        self.num_shards = num_shards
        self.spec = spec

    def open(self, runtime_context: RuntimeContext) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("merge-state", BYTES))

    def merger(self) -> EpochMerger:
        """The merge logic over the checkpointed state (core binary envelope, never pickle)."""
        data = self.state.value()
        return EpochMerger(self.num_shards, self.spec, MergeState.from_bytes(bytes(data)) if data else None)

    def store(self, merger: EpochMerger) -> None:
        self.state.update(merger.state.to_bytes())

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[EpochReleaseInput]:
        merger = self.merger()
        out = merger.add(ShardSketch(*value))
        self.store(merger)
        yield from out
