"""Throughput of the core sketches on one Zipf(1.1) stream, and the per-message state cycle.

One stream of 10^7 items over 10^5 distinct values (truncated Zipf(1.1): P(rank r) ∝ r^-1.1,
r = 1..10^5, item = r - 1), generated once with a fixed numpy seed (synthetic data only). Timed:

* ``np.bincount`` over the whole stream (one call): the floor for any exact counting;
* MG (Alg. 1 class) ``update_batch`` in batches, CMS ``update_batch`` in batches;
* PAMG ``update_batch_flat``: the stream cut into users of 4 consecutive items, duplicates within
  a user removed (rate reported per item it saw and per user);
* Apache DataSketches ``frequent_items_sketch`` fed item by item from a Python loop over Python
  ints (the list conversion is not timed);
* MG sequential Alg. 1 ``update`` on a 10^6-item prefix, for reference.

Targets: MG batch >= 1x DataSketches; MG and CMS batch within 5x of np.bincount.

**Per-message state cycle** (:func:`message_cycle`, also alone with ``--cycle-only``): what a
streaming shard does per Kafka message with its Lebeda–Tětek Alg. 1 sketch kept as bytes in Flink
state — ``MisraGries.from_bytes`` → ``update_batch`` (1,000 items) → ``to_bytes`` — after a 10^6-item
prefix of the stream, median over 50 messages; then ``slots()`` (PMG's input) and ``counters()`` on
a restored state, ``merge_in_order`` of 4 shard states (restores included), the merged sketch's
``to_bytes``/``from_bytes``, and the same cycle for PAMG (``update_batch_flat``, 250 users of 4).
Milliseconds, one machine, before → after the array state paths (bytes unchanged)::

    k       from_bytes    update       to_bytes      cycle         slots()      counters()
    512     0.09 → 0.06   0.16 → 0.04  0.29 → 0.04   0.55 → 0.14   0.07 → 0.03  0.09 → 0.04
    4096    0.55 → 0.12   1.00 → 0.02  2.28 → 0.08   3.83 → 0.21   0.76 → 0.35  0.63 → 0.16
    65536   10.2 → 0.93   15.6 → 0.01  39.5 → 0.76   65.6 → 1.74   14.7 → 7.4   10.8 → 2.6

    k       merge 4 shards  merged to_bytes  merged from_bytes  PAMG cycle
    512     0.82 → 0.42     0.09 → 0.01      0.06 → 0.03        0.38 → 0.23
    4096    5.84 → 1.07     0.62 → 0.02      0.31 → 0.04        2.69 → 1.36
    65536   296 → 8.6       29.5 → 0.37      9.7 → 0.48         63.7 → 32.7

With many dummies left (k = 65536 after 2·10^5 Zipf(1.2) items mod 10^5: 35,204 dummies), the
cycle went from 236 ms (from_bytes 39, update_batch 74, to_bytes 120) to ~2 ms, and ``slots()``
from 13.5 ms to 5.6 ms of its own work (with the garbage collector enabled, a full collection that
its 65,536 result tuples trigger in a numba-loaded interpreter adds ~50 ms to about every other
call, before and after). PAMG's remaining cycle time is ``update_batch_flat``'s dict conversions.

Run: ``flock /tmp/privstream-heavy.lock python benchmarks/bench_sketches.py [--cycle-only]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from privstream.sketches import (
    CountMinSketch,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    merge_in_order,
)


def zipf_stream(n: int, distinct: int, s: float, seed: int) -> np.ndarray:
    """n draws of a Zipf(s) distribution truncated to ranks 1..distinct, as items 0..distinct-1."""
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    uniform = np.random.default_rng(seed).random(n)
    return np.searchsorted(cdf, uniform, side="right").astype(np.int64)


def users_of(stream: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut the stream into users of ``size`` consecutive items; drop repeats within a user."""
    rows = stream[: len(stream) // size * size].reshape(-1, size).copy()
    rows.sort(axis=1)
    keep = np.ones_like(rows, dtype=bool)
    keep[:, 1:] = rows[:, 1:] != rows[:, :-1]
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    return rows[keep], offsets


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def median_ms(samples: list[float]) -> float:
    return 1e3 * float(np.median(samples))


def message_cycle(stream: np.ndarray, ks: list[int], messages: int, size: int, prefix: int) -> None:
    """The streaming job's per-message state cycle: ``from_bytes`` → ``update_batch`` (one message
    of ``size`` items) → ``to_bytes``, on an Alg. 1 sketch that has seen ``prefix`` items; median
    ms per phase over ``messages`` messages. Then queries and merges of such states."""
    print(f"\nper-message cycle: {messages} messages of {size:,} items after a {prefix:,}-item prefix")
    print(
        f"{'k':>7} {'from_bytes':>10} {'update':>8} {'to_bytes':>9} {'cycle':>8} {'slots()':>8} "
        f"{'counters':>8} {'merge 4':>8} {'m.to_b':>7} {'m.from_b':>8} {'pamg cyc':>8}   (ms)"
    )
    for k in ks:
        sketch = MisraGries(k)
        sketch.update_batch(stream[:prefix])
        state = sketch.to_bytes()
        phases: list[list[float]] = [[], [], [], []]
        for i in range(messages):
            msg = stream[prefix + i * size : prefix + (i + 1) * size]
            t0 = time.perf_counter()
            restored = MisraGries.from_bytes(state)
            t1 = time.perf_counter()
            restored.update_batch(msg)
            t2 = time.perf_counter()
            state = restored.to_bytes()
            t3 = time.perf_counter()
            for samples, secs in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                samples.append(secs)
        slots = timed_query(state, MisraGries.slots)
        counters = timed_query(state, MisraGries.counters)
        shard_states = []
        for j in range(4):
            shard = MisraGries(k)
            shard.update_batch(stream[j:prefix:4])
            shard_states.append(shard.to_bytes())
        merge = timed(partial(merge_states, shard_states), 3)
        merged_bytes = merge_states(shard_states).to_bytes()
        merged = StandardMisraGries.from_bytes(merged_bytes)
        merged_to = timed(merged.to_bytes, 3)
        merged_from = timed(partial(StandardMisraGries.from_bytes, merged_bytes), 3)
        pamg_cycle = pamg_message_cycle(stream, k, messages, size, prefix)
        print(
            f"{k:>7} {median_ms(phases[0]):>10.2f} {median_ms(phases[1]):>8.2f} {median_ms(phases[2]):>9.2f} "
            f"{median_ms(phases[3]):>8.2f} {1e3 * slots:>8.2f} {1e3 * counters:>8.2f} "
            f"{1e3 * merge:>8.2f} {1e3 * merged_to:>7.2f} {1e3 * merged_from:>8.2f} {pamg_cycle:>8.2f}"
        )


def merge_states(states: list[bytes]) -> StandardMisraGries:
    """What the merge operator does per epoch: load the shards' Alg. 1 states, merge in shard order."""
    return merge_in_order([MisraGries.from_bytes(b) for b in states])  # type: ignore[return-value]


def timed_query(state: bytes, query: Callable[[MisraGries], object], repeat: int = 5) -> float:
    """Best seconds of ``query`` on a freshly restored sketch (the restore is not timed)."""
    best = float("inf")
    for _ in range(repeat):
        sketch = MisraGries.from_bytes(state)
        start = time.perf_counter()
        query(sketch)
        best = min(best, time.perf_counter() - start)
    return best


def pamg_message_cycle(stream: np.ndarray, k: int, messages: int, size: int, prefix: int) -> float:
    """Median ms of PAMG ``from_bytes`` → ``update_batch_flat`` (``size // 4`` users of 4
    consecutive items) → ``to_bytes``, after the users of the ``prefix``."""
    items, offsets = users_of(stream[: prefix + messages * size], 4)
    per_message = size // 4
    start = min(prefix // 4, len(offsets) - 1 - messages * per_message)
    sketch = PrivacyAwareMisraGries(k, 4)
    sketch.update_batch_flat(items[: offsets[start]], offsets[: start + 1])
    state = sketch.to_bytes()
    samples = []
    for i in range(messages):
        a, b = start + i * per_message, start + (i + 1) * per_message
        t0 = time.perf_counter()
        restored = PrivacyAwareMisraGries.from_bytes(state)
        restored.update_batch_flat(items[offsets[a] : offsets[b]], offsets[a : b + 1] - offsets[a])
        state = restored.to_bytes()
        samples.append(time.perf_counter() - t0)
    return median_ms(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10**7)
    parser.add_argument("--distinct", type=int, default=10**5)
    parser.add_argument("--batch", type=int, default=10**6)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--cms-width", type=int, default=2048)
    parser.add_argument("--cms-depth", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--cycle-k", type=int, nargs="+", default=[512, 4096, 65536])
    parser.add_argument("--cycle-messages", type=int, default=50)
    parser.add_argument("--cycle-size", type=int, default=1000)
    parser.add_argument("--cycle-prefix", type=int, default=10**6)
    parser.add_argument("--cycle-only", action="store_true", help="run only the per-message cycle section")
    args = parser.parse_args()

    stream = zipf_stream(args.items, args.distinct, 1.1, args.seed)
    if args.cycle_only:
        message_cycle(stream, args.cycle_k, args.cycle_messages, args.cycle_size, args.cycle_prefix)
        return
    n = len(stream)
    batches = [stream[i : i + args.batch] for i in range(0, n, args.batch)]
    user_items, offsets = users_of(stream, 4)
    bounds = list(range(0, len(offsets) - 1, args.batch // 4)) + [len(offsets) - 1]
    user_batches = [
        (user_items[offsets[a] : offsets[b]], offsets[a : b + 1] - offsets[a])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    as_list = stream.tolist()
    print(f"stream: {n:,} items, {len(np.unique(stream)):,} distinct, Zipf(1.1), seed {args.seed}")

    def mg_batch() -> None:
        sketch = MisraGries(args.k)
        for b in batches:
            sketch.update_batch(b)

    def cms_batch() -> None:
        sketch = CountMinSketch(args.cms_width, args.cms_depth, seed=1)
        for b in batches:
            sketch.update_batch(b)

    def pamg_batch() -> None:
        sketch = PrivacyAwareMisraGries(args.k, 4)
        for items, offs in user_batches:
            sketch.update_batch_flat(items, offs)

    def datasketches_loop() -> None:
        import datasketches

        sketch = datasketches.frequent_items_sketch(11)  # max map 2048 -> up to 1536 counters
        update = sketch.update
        for x in as_list:
            update(x)

    prefix = as_list[: 10**6]

    def mg_sequential() -> None:
        sketch = MisraGries(args.k)
        update = sketch.update
        for x in prefix:
            update(x)

    rows = [
        ("np.bincount (one call)", n, timed(lambda: np.bincount(stream, minlength=args.distinct), 3)),
        (f"MG Alg.1 update_batch (k={args.k}, batch {args.batch:,})", n, timed(mg_batch, 3)),
        (
            f"CMS update_batch ({args.cms_width}x{args.cms_depth}, batch {args.batch:,})",
            n,
            timed(cms_batch, 3),
        ),
        (
            f"PAMG update_batch_flat (k={args.k}, m=4, {len(offsets) - 1:,} users)",
            len(user_items),
            timed(pamg_batch, 3),
        ),
        ("DataSketches frequent_items item-by-item (lg_max_k=11)", n, timed(datasketches_loop)),
        (f"MG Alg.1 sequential update (k={args.k}, 10^6 prefix)", len(prefix), timed(mg_sequential)),
    ]
    base = rows[0][2] / rows[0][1]
    ds = rows[4][1] / rows[4][2]
    print(
        f"{'operation':<62} {'items':>11} {'seconds':>8} {'items/s':>13} {'x bincount time':>15} {'x DS rate':>9}"
    )
    for name, count, secs in rows:
        rate = count / secs
        print(
            f"{name:<62} {count:>11,} {secs:>8.3f} {rate:>13,.0f} {secs / count / base:>15.2f} {rate / ds:>9.2f}"
        )
    pamg_users = len(offsets) - 1
    print(f"PAMG users/s: {pamg_users / rows[3][2]:,.0f}")
    message_cycle(stream, args.cycle_k, args.cycle_messages, args.cycle_size, args.cycle_prefix)


if __name__ == "__main__":
    main()
