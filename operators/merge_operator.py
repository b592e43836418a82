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

from privstream.operators.shard_logic import EpochMerger, MergedEpoch, ShardSketch
from privstream.operators.sketch_spec import SketchSpec
from pyflink.common import Types
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class EpochMergeFunction(KeyedProcessFunction):
    """Input :class:`ShardSketch`, output :class:`MergedEpoch` (lowest epoch first)."""

    def __init__(self, num_shards: int, spec: SketchSpec) -> None:
        self.num_shards = num_shards
        self.spec = spec

    def open(self, runtime_context: RuntimeContext) -> None:
        self.state = runtime_context.get_state(
            ValueStateDescriptor("merge-state", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[MergedEpoch]:
        merger = EpochMerger(self.num_shards, self.spec, self.state.value())
        out = merger.add(ShardSketch(*value))
        self.state.update(merger.state)
        yield from out
