"""``privstream keys --nodes K --out DIR``: the offline setup of the continual-monitor's PDCH-BF mode.

Writes a fresh X25519 key per node (``node-<i>.key``, SECRET: hand each to its node only) and the
public roster (``roster.json``) into ``DIR`` (Chan et al. §2.5's trusted authority). Run it once
per deployment, then ``privstream run continual-monitor --mode bf --keys DIR ...`` with ``K`` = the
events topic's partition count.
"""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, required=True, help="k: the events topic's partitions")
    parser.add_argument("--out", required=True, help="directory for node-<i>.key and roster.json")


def run(args: argparse.Namespace) -> int:
    from privstream.operators.continual_logic import write_keys

    if args.nodes < 2:
        print(f"privstream keys: error: --nodes: PDCH-BF needs >= 2 nodes, got {args.nodes}", file=sys.stderr)
        return 2
    try:
        out = write_keys(args.out, args.nodes)
    except OSError as exc:
        print(f"privstream keys: error: --out: {exc}", file=sys.stderr)
        return 2
    print(f"keys written to {out} ({args.nodes} node keys, SECRET, and roster.json)")
    return 0
