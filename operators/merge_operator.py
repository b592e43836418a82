"""The merge operator: every shard's sketch of an epoch, merged in shard-id order.

:class:`EpochMergeFunction` runs on a single key (all shard sketches are routed to it) and keeps
:class:`~privstream.operators.shard_logic.MergeState` in keyed state: per-shard progress and the
shard sketches of epochs not yet complete. Its checkpointed state is bounded by
(open epochs × shards × sketch size), independent of the stream length. The merge itself is
:class:`~privstream.operators.shard_logic.EpochMerger` (mergeable-summaries merge, fixed order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privstream.operators.kafka_io import BYTES
from privstream.operators.shard_logic import EpochMerger, MergedEpoch, MergeState, ShardSketch
from privstream.operators.sketch_spec import SketchSpec
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class EpochMergeFunction(KeyedProcessFunction):
    """Input :class:`ShardSketch`, output :class:`MergedEpoch` (lowest epoch first)."""

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

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[MergedEpoch]:
        merger = self.merger()
        out = merger.add(ShardSketch(*value))
        self.store(merger)
        yield from out
