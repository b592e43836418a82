"""``privstream ledger show ID``: a privacy ledger's spent and remaining budget and its charges over time.

::

    privstream ledger show heavy-hitters/events
    privstream ledger show sliding-window/events --ledger-topic ledger --bootstrap 127.0.0.1:9092

Reads the ledger topic (``read_committed``, until idle: :mod:`privstream.connectors.ledger_history`),
verifies the hash chain of the ledger's entries as a job's start-up does, and prints the total,
spent and remaining budget (ε, δ — or ρ for a zCDP ledger — as exact fractions and decimals), the
composition rule, and one row per charge: sequence, time, epoch, mechanism, its ε and δ, and the
running spend after it. Exit 0; 1 if the topic holds no entry of that ledger; 2 if the chain is
broken (one line saying where and why) or the topic cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from typing import TYPE_CHECKING

from privstream.connectors.clients import add_bootstrap_option
from privstream.connectors.tail_cli import add_idle_option

if TYPE_CHECKING:
    from privstream.connectors.ledger_history import LedgerHistory

_COMPOSITIONS = {
    "sequential": "sequential (every charge adds up)",
    "parallel_epochs": "parallel over epochs (charges of one epoch add up; spent = the most-charged "
    "epoch + charges that cover all epochs)",
}


def _describe_composition(composition: str) -> str:
    """The composition rule in words; a partitioned one (``parallel_epochs/time:60000ms``) names its
    epoch boundaries."""
    rule, _, partition = composition.partition("/")
    text = _COMPOSITIONS.get(rule, rule)
    return f"{text}; epochs {partition}" if partition else text


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ledger_command", required=True)
    show = sub.add_parser("show", help="spent and remaining budget, and the charges over time")
    show.add_argument("ledger_id", metavar="ID", help="the ledger id (e.g. heavy-hitters/events)")
    show.add_argument("--ledger-topic", default="ledger", help="the ledger topic (default: %(default)s)")
    add_bootstrap_option(show)
    add_idle_option(show, "stop reading once no record has arrived for this long")


def run(args: argparse.Namespace) -> int:
    from privstream.connectors.avro_codec import AvroDecodeError
    from privstream.connectors.clients import BrokerUnreachable
    from privstream.connectors.consume import TopicNotFound
    from privstream.connectors.ledger_history import read_history
    from privstream.connectors.ledger_topic import LedgerUnavailable

    try:
        history = read_history(args.bootstrap, args.ledger_topic, args.ledger_id, idle_s=args.idle)
    except LedgerUnavailable as exc:
        print(
            f"privstream ledger: ledger {args.ledger_id!r} on {args.ledger_topic!r}: {exc}", file=sys.stderr
        )
        return 2
    except (TopicNotFound, BrokerUnreachable, AvroDecodeError) as exc:
        print(f"privstream ledger: error: {exc}", file=sys.stderr)
        return 2
    if history.state is None:
        others = ", ".join(sorted(history.other_ledgers)) or "none"
        print(
            f"privstream ledger: no entry of ledger {args.ledger_id!r} on topic {args.ledger_topic!r} "
            f"(ledgers there: {others})",
            file=sys.stderr,
        )
        return 1
    print("\n".join(show_lines(history)))
    return 0


def _exact(value: Fraction) -> str:
    """``1.5 (= 3/2)``; an integer or a short decimal shows once."""
    decimal = f"{float(value):.6g}"
    return decimal if Fraction(decimal) == value else f"{decimal} (= {value})"


def show_lines(history: LedgerHistory) -> list[str]:
    """The text of ``privstream ledger show`` for a history whose state was read."""
    from privstream.connectors.record_text import utc

    state = history.state
    assert state is not None
    total = state.total.exact
    spent = state.totals.spent()
    names = ("ε", "δ") if len(total) == 2 else ("ρ",)
    lines = [
        f"ledger {history.ledger_id!r} on topic {history.topic!r}: {len(history.charges)} charges read, "
        f"head #{state.sequence}, chain verified",
        f"  composition: {_describe_composition(state.composition)}",
    ]
    for label, amounts in (
        ("total", total),
        ("spent", spent),
        ("remaining", tuple(max(t - s, Fraction(0)) for t, s in zip(total, spent, strict=True))),
    ):
        lines.append(
            f"  {label:<10}" + "   ".join(f"{n} = {_exact(v)}" for n, v in zip(names, amounts, strict=True))
        )
    if history.migrated:
        lines.append(
            "  (the ledger's first record is a migrated version-1 state: earlier charges are in its totals)"
        )
    first = history.charges[0].sequence if history.charges else state.sequence + 1
    if first > 1 and not history.migrated:
        lines.append(
            f"  (entries #1..#{first - 1} are no longer on the topic: compacted; their spend is in the totals)"
        )
    if not history.charges:
        return lines
    columns = [f"{'#':>4}", f"{'time':<27}", f"{'epoch':>6}", f"{'mechanism':<14}"]
    columns += [f"{n:>10}" for n in names] + [f"{'spent ' + n:>10}" for n in names]
    lines += ["", "  " + "  ".join([*columns, "writer    entry"])]
    for c in history.charges:
        row = [
            f"{c.sequence:>4}",
            f"{utc(c.time_ms):<27}",
            f"{'all' if c.epoch is None else c.epoch:>6}",
            f"{c.mechanism[:14]:<14}",
        ]
        row += [f"{float(v):>10.4g}" for v in (*c.amounts, *c.spent_after)]
        lines.append("  " + "  ".join([*row, f"{c.writer[:8] or '—':<8}  {c.entry_hash[:12]}"]))
    return lines
