"""Per-message cost of the sketch operator's state handling versus k (issue 25, item 1).

Drives the real operator body (:class:`~privstream.operators.sketch_operator.ShardSketchFunction`,
typed path) on in-memory stand-ins of its Flink state, 1,000-event messages of Zipf items, one
open epoch, and compares it with the shard logic without live sketches (every message loads,
updates and re-encodes its epoch's sketch: the operator's path before the live sketches). No Flink,
no Kafka: this isolates the state handling from the engine.

Run::

    python benchmarks/bench_shard_state.py            # k = 256, 4096, 65536
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
from privstream.operators.sketch_operator import ShardSketchFunction, TypedEvent  # noqa: E402
from privstream.operators.sketch_spec import SketchSpec  # noqa: E402

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
    f.sketches, f.progress, f.since = MapStateStub(), ValueStateStub(), ListStateStub()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", default="256,4096,65536")
    parser.add_argument("--messages", type=int, default=640)
    parser.add_argument("--events", type=int, default=1000, help="events per message")
    args = parser.parse_args(argv)
    payloads = messages(args.messages, args.events)
    print(f"{'k':>7} | {'live sketches (ms/msg)':>22} | {'re-encode each message (ms/msg)':>31} | speed-up")
    for k in (int(x) for x in args.k.split(",")):
        live, old = per_message_ms(k, payloads)
        print(f"{k:>7} | {live:>22.3f} | {old:>31.3f} | {old / live:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
