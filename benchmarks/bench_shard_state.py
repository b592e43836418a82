"""Per-message cost of the sketch and sliding-window operators' state handling versus the state
size (issue 25, item 1).

Drives the real operator body (:class:`~privstream.operators.sketch_operator.ShardSketchFunction`,
typed path) on in-memory stand-ins of its Flink state, 1,000-event messages of Zipf items, one
open epoch, and compares it with the shard logic without live sketches (every message loads,
updates and re-encodes its epoch's sketch: the operator's path before the live sketches). No Flink,
no Kafka: this isolates the state handling from the engine. The same for the sliding-window job's
operator (:class:`~privstream.operators.window_operator.WindowShardFunction`: count windows, events
messages of ``--window-events`` items) against its logic writing the DPSW state after every
message (the path before), for PCMS widths giving about 0.1 to 6 MiB of state.

Run::

    python benchmarks/bench_shard_state.py            # k = 256, 4096, 65536; widths 256, 2048, 16384
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' state stand-ins

from privstream.operators.epochs import CountEpochs, ShardProgress  # noqa: E402
from privstream.operators.payloads import EventPayload  # noqa: E402
from privstream.operators.shard_logic import ShardSketcher  # noqa: E402
from privstream.operators.shard_operator import TypedEvent  # noqa: E402
from privstream.operators.sketch_operator import ShardSketchFunction  # noqa: E402
from privstream.operators.sketch_spec import SketchSpec  # noqa: E402
from privstream.operators.unflushed import UnflushedMessages  # noqa: E402
from privstream.operators.window_logic import WindowShardLogic  # noqa: E402
from privstream.operators.window_operator import WindowShardFunction  # noqa: E402

from tests.test_several_bad_messages import ContextStub, ListStateStub, MapStateStub, ValueStateStub  # noqa: E402


def messages(count: int, size: int) -> list[EventPayload]:
    rng = np.random.default_rng(1)
    return [
        EventPayload(np.minimum(rng.zipf(1.1, size), 10**6).astype(np.int64), np.zeros(size, np.int64))
        for _ in range(count)
    ]


def per_message_ms(k: int, payloads: list[EventPayload]) -> tuple[float, float]:
    """(live sketches in the operator, re-encode every message) in ms per message."""
    spec, policy = SketchSpec("mg", k), CountEpochs(10**12)
    spec.update(spec.new(), payloads[0])  # numba compiles once, outside the timing
    f = ShardSketchFunction(spec, policy, "bench", shards=1, typed=True)
    f.sketches, f.progress, f.since = MapStateStub(), ValueStateStub(), UnflushedMessages(ListStateStub())
    start = time.perf_counter()
    for payload in payloads:
        for _ in f.process_element(TypedEvent(0, payload, None), ContextStub()):
            pass
    live = (time.perf_counter() - start) / len(payloads) * 1e3
    old = ShardSketcher(0, spec, policy, {}, ShardProgress(), 1)
    start = time.perf_counter()
    for payload in payloads:
        old.add(payload)
    return live, (time.perf_counter() - start) / len(payloads) * 1e3


def window_per_message_ms(width: int, count: int, size: int) -> tuple[float, float, int]:
    """(operator with the sketch in memory, logic + state written every message) in ms per message,
    and the DPSW state's bytes."""
    from tests.test_window_job_logic import _message, _settings

    settings = _settings(
        shards=1, width=width, domain_size=10**6, queries=(0, 1, 2), window=4 * 10**6, substream=10**6,
        checkpoints=(10**6, 8, 1),
    )  # fmt: skip
    rng = np.random.default_rng(1)
    encoded = [_message(np.minimum(rng.zipf(1.1, size), 10**6 - 1)) for _ in range(count)]
    f = WindowShardFunction(settings, "bench")
    f.sketch, f.refused, f.binding = ValueStateStub(), ValueStateStub(), ValueStateStub()
    f.since, f._logic, f._sizes = UnflushedMessages(ListStateStub()), {}, {}
    start = time.perf_counter()
    for offset, message in enumerate(encoded):
        for _ in f.process_element((message, 0, offset), ContextStub()):
            pass
    live = (time.perf_counter() - start) / count * 1e3
    logic, stored = WindowShardLogic(settings, 0), ValueStateStub()
    start = time.perf_counter()
    for offset, message in enumerate(encoded):
        logic.process(message, offset, "bench")
        stored.update(logic.to_bytes())
    return live, (time.perf_counter() - start) / count * 1e3, len(logic.to_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", default="256,4096,65536")
    parser.add_argument("--messages", type=int, default=640)
    parser.add_argument("--events", type=int, default=1000, help="events per message")
    parser.add_argument("--widths", default="256,2048,16384", help="sliding window: PCMS widths")
    parser.add_argument("--window-events", type=int, default=100, help="sliding window: events per message")
    args = parser.parse_args(argv)
    payloads = messages(args.messages, args.events)
    print(f"{'k':>7} | {'live sketches (ms/msg)':>22} | {'re-encode each message (ms/msg)':>31} | speed-up")
    for k in (int(x) for x in args.k.split(",")):
        live, old = per_message_ms(k, payloads)
        print(f"{k:>7} | {live:>22.3f} | {old:>31.3f} | {old / live:>7.1f}x")
    print(
        f"\n{'width':>7} | {'state (KiB)':>11} | {'in memory (ms/msg)':>18} | {'written each message (ms/msg)':>29} | speed-up"
    )
    for width in (int(x) for x in args.widths.split(",")):
        live, old, size = window_per_message_ms(width, args.messages, args.window_events)
        print(f"{width:>7} | {size / 1024:>11.0f} | {live:>18.3f} | {old:>29.3f} | {old / live:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
