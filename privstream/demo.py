"""``privstream demo``: the core library without Flink or Kafka.

Builds a Lebeda–Tětek Alg. 1 Misra–Gries sketch item by item over a synthetic Zipf stream and
releases it with PMG (Alg. 2, discrete variant); splits the same stream into shards by a hash of the
item (a data-independent rule: removing one event changes one shard, Cor. 7.2 — never by position),
merges the shard sketches in shard order and releases the merged sketch with the mechanism the
release layer picks for it (never PMG). Prints both releases beside the true counts; the two
releases are of the same data, so together they cost the sum of their budgets (sequential
composition).
"""

from __future__ import annotations

import argparse

import numpy as np

from privstream.accounting import Budget
from privstream.datagen import zipf_items
from privstream.mechanisms import Release, release
from privstream.partitioning import partition_for
from privstream.sketches import MisraGries, merge_in_order


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=200_000, help="stream length (default 200000)")
    parser.add_argument("--universe", type=int, default=25_600, help="distinct values (default 25600)")
    parser.add_argument("--k", type=int, default=100, help="sketch size (default 100)")
    parser.add_argument("--shards", type=int, default=4, help="shards for the merged sketch (default 4)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="ε per release (default 1.0)")
    parser.add_argument("--delta", type=float, default=1e-6, help="δ per release (default 1e-6)")
    parser.add_argument("--top", type=int, default=15, help="rows to print (default 15)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic data (not of the noise)")


def _describe(rel: Release) -> str:
    bound = rel.error_bound
    return (
        f"{rel.mechanism}: (ε={rel.epsilon:g}, δ={rel.delta:g})-DP, neighbours: {rel.neighbour_relation}; "
        f"unit: {rel.privacy_unit}; {len(rel.items)} keys released; with prob. ≥ {1 - bound.beta:g}: "
        f"f(x) − {bound.below:.1f} − {bound.sketch_term} ≤ f̂(x) ≤ f(x) + {bound.above:.1f}"
    )


def run(args: argparse.Namespace) -> int:
    items = zipf_items(args.count, universe=args.universe, s=1.1, seed=args.seed)
    true = np.bincount(items)

    sequential = MisraGries(args.k)
    for x in items.tolist():
        sequential.update(x)
    shard_of = partition_for(items, args.shards)  # by a hash of the item, never by position
    shards = []
    for index in range(args.shards):
        shard = MisraGries(args.k)
        shard.update_batch(items[shard_of == index])
        shards.append(shard)
    merged = merge_in_order(shards)

    budget = Budget(args.epsilon, args.delta)
    pmg = release(sequential, budget, mechanism="pmg")  # noise from the OS CSPRNG
    merged_release = release(merged, budget)  # "auto": the best mechanism valid for a merged sketch

    print(
        f"stream: {args.count} Zipf(1.1) items over {args.universe} values; k={args.k}; n/(k+1)="
        f"{args.count / (args.k + 1):.1f}"
    )
    print("sequential Alg. 1 sketch ->", _describe(pmg))
    print(f"{args.shards} item-hashed shards merged in shard order ->", _describe(merged_release))
    print(
        f"both releases are of the same stream: together (ε={2 * args.epsilon:g}, δ={2 * args.delta:g})-DP "
        "by sequential composition"
    )
    pmg_items, merged_items = pmg.as_dict_items(), merged_release.as_dict_items()
    top = np.argsort(-true, kind="stable")[: args.top]
    print(f"\n{'item':>8} {'true':>8} {'MG':>8} {'PMG':>8} {'merged':>8} {'released':>9}")
    for x in top.tolist():
        print(
            f"{x:>8} {int(true[x]):>8} {sequential.estimate(x):>8} {pmg_items.get(x, 0):>8} "
            f"{merged.estimate(x):>8} {merged_items.get(x, 0):>9}"
        )
    return 0
