"""Throughput of the core sketches on one Zipf(1.1) stream .

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
Run: ``flock /tmp/privstream-heavy.lock python benchmarks/bench_sketches.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from privstream.sketches import CountMinSketch, MisraGries, PrivacyAwareMisraGries


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10**7)
    parser.add_argument("--distinct", type=int, default=10**5)
    parser.add_argument("--batch", type=int, default=10**6)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--cms-width", type=int, default=2048)
    parser.add_argument("--cms-depth", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20261122)
    args = parser.parse_args()

    stream = zipf_stream(args.items, args.distinct, 1.1, args.seed)
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


if __name__ == "__main__":
    main()
