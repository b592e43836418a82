"""``privstream broker [--port N] [--data DIR]``: run the embedded broker until Ctrl-C/SIGTERM.

Starts tansu on 127.0.0.1 (in memory, or durable under ``--data`` through a local s3rver), creates
the default topics, prints the bootstrap address on stdout and stops cleanly on SIGTERM (exit 0) or Ctrl-C/SIGINT (one
line, exit 130).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None, help="listen port (default: a free port)")
    parser.add_argument(
        "--data",
        metavar="DIR",
        default=None,
        help="durable storage directory (needs s3rver; for light development use: under a Flink job's "
        "transactional load s3rver loses tansu's conditional writes, see docs/stack-facts.md)",
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of 'events'/'ldp-reports'")
    parser.add_argument("--no-topics", action="store_true", help="do not create the default topics")


def run(args: argparse.Namespace) -> int:
    import signal
    import sys
    import threading

    from privstream.connectors.broker import EmbeddedBroker
    from privstream.connectors.topics import ensure_default_topics

    try:
        broker = EmbeddedBroker(port=args.port, data_dir=args.data)
    except ValueError as exc:
        print(f"privstream broker: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        broker.start()
        if not args.no_topics:
            ensure_default_topics(broker.bootstrap, args.partitions)
        storage = f"durable in {broker.data_dir}" if broker.durable else "in memory"
        print(broker.bootstrap, flush=True)
        print(f"tansu broker on {broker.bootstrap} ({storage}); Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if not broker.alive():
                print(f"broker exited unexpectedly; log:\n{broker.log_tail()}", file=sys.stderr)
                return 1
        if signal.SIGINT in received:  # Ctrl-C: one line and 130, as every command (privstream.cli)
            print("privstream broker: stopped", file=sys.stderr)
            return 130
        return 0
    except (RuntimeError, TimeoutError, OSError) as exc:  # s3rver missing, start-up failure
        print(f"privstream broker: error: {exc}", file=sys.stderr)
        return 2
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
