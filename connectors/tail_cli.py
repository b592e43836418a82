"""``privstream tail TOPIC``: print a topic's committed records, decoded, as text or JSON lines.

::

    privstream tail releases                       # what is committed now, then exit
    privstream tail releases --follow              # and every new record, until Ctrl-C
    privstream tail window-releases --json --run 3f2a9c1b0d4e   # one submission's, as JSON lines
    privstream tail ledger --limit 20

Records are read with ``read_committed`` from the beginning of every partition (an aborted or
still-open transaction's records are never shown) and decoded with the project's Avro schemas
(every type: :mod:`privstream.connectors.record_text`); a message that does not decode is shown
as such, with the reason. Without ``--follow`` the read stops once nothing new has arrived for
``--idle`` seconds (end offsets are never asked for: the embedded broker answers them wrongly,
docs/stack-facts.md), so it shows what was committed when it started, and anything committed
while it read. ``--run`` keeps the records of one run (:mod:`privstream.connectors.run_ids` says
what identifies a run today). ``privstream releases JOB`` is this command on a job's default
releases topic.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from privstream.connectors.clients import add_bootstrap_option


def add_read_options(parser: argparse.ArgumentParser) -> None:
    """The options ``tail`` and ``releases`` share."""
    add_bootstrap_option(parser)
    parser.add_argument("--follow", "-f", action="store_true", help="keep reading new records until Ctrl-C")
    parser.add_argument("--json", action="store_true", help="one JSON object per record (bytes as hex)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        action="store_true",
        default=True,
        help="start at the beginning of every partition (the default)",
    )
    start.add_argument(
        "--new",
        action="store_true",
        help="with --follow: skip what is committed now (read past it silently), show only new records",
    )
    parser.add_argument(
        "--run",
        metavar="RUN_ID",
        default=None,
        help="only the records of this run: a run id, ledger entry hash (or 8+ leading characters), "
        "<ledger id>#<sequence>, start-up nonce, ledger id, deployment or continual session",
    )
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N records")
    add_idle_option(parser, "without --follow: stop once no record has arrived for this long")


def add_idle_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--idle SECONDS`` (default 2): how a read without end offsets decides it has reached the end."""
    parser.add_argument(
        "--idle", type=float, default=2.0, metavar="SECONDS", help=f"{what} (default: %(default)s)"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "topic", help="the topic to read (releases, window-releases, ledger, events-dlq, ...)"
    )
    add_read_options(parser)


def run(args: argparse.Namespace) -> int:
    return tail(args, args.topic)


def _check(args: argparse.Namespace) -> str | None:
    if args.limit is not None and args.limit < 1:
        return f"--limit: must be >= 1, got {args.limit}"
    if not args.idle > 0:
        return f"--idle: must be > 0, got {args.idle}"
    if args.new and not args.follow:
        return "--new: only with --follow (without it there would be nothing to show)"
    return None


def tail(args: argparse.Namespace, topic: str) -> int:
    """Print ``topic``'s records as ``args`` say (the options of :func:`add_read_options`)."""
    from privstream.connectors.clients import BrokerUnreachable
    from privstream.connectors.consume import ShowingReader, TopicNotFound, committed_reader
    from privstream.connectors.run_ids import matches, run_ids

    problem = _check(args)
    if problem:
        print(f"privstream tail: error: {problem}", file=sys.stderr)
        return 2
    shown = 0
    unattributed: Counter[str] = Counter()
    try:
        with committed_reader(args.bootstrap, topic, reader=ShowingReader) as reader:
            if args.new:
                for _ in reader.records(idle_s=args.idle):
                    pass  # what was committed before: read past, not shown
            for record in reader.records(idle_s=args.idle, until=(lambda: False) if args.follow else None):
                if args.run is not None:
                    ids = run_ids(record.schema, record.value)
                    if not ids:
                        unattributed[record.schema] += 1
                    if not matches(args.run, ids):
                        continue
                _show(record, args.json)
                shown += 1
                if shown == args.limit:
                    break
    except TopicNotFound as exc:
        print(f"privstream tail: error: {exc}", file=sys.stderr)
        return 2
    except (BrokerUnreachable, ValueError) as exc:
        print(f"privstream tail: error: {exc}", file=sys.stderr)
        return 2
    if unattributed:
        kinds = ", ".join(f"{n} {schema}" for schema, n in sorted(unattributed.items()))
        print(f"--run: left out {kinds}: these records name no run yet", file=sys.stderr)
    print(f"{shown} records from {topic!r} (read_committed)", file=sys.stderr)
    return 0


def _show(record: Any, as_json: bool) -> None:
    from privstream.connectors.record_text import json_value, render

    if as_json:
        line = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": None if record.key is None else record.key.decode("utf-8", "replace"),
            "schema": record.schema,
            "value": json_value(record.value),
        }
        print(json.dumps(line, ensure_ascii=False), flush=True)
        return
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    print("\n".join(render(record.schema, record.value, where)), flush=True)
