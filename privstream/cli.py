"""The ``privstream`` command line.

Each subcommand lives in its own module, which defines ``configure(parser)`` and ``run(args) -> int``
and imports heavy dependencies (Flink, Kafka) only inside ``run``, so ``privstream --help`` stays fast
and the core never needs Flink or Kafka.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("privstream.demo", "core demo: a sketch's heavy hitters and a private release vs true counts"),
    "setup": (
        "privstream.connectors.setup_cli",
        "fetch and verify the assets the jobs and tests need (connector jars)",
    ),
    "broker": ("privstream.connectors.broker_cli", "start the embedded Kafka-protocol broker on 127.0.0.1"),
    "produce": ("privstream.connectors.produce_cli", "produce synthetic or file events to a Kafka topic"),
    "run": ("privstream.jobs.cli", "run a Flink job (heavy-hitters) locally"),
    "quickstart": (
        "privstream.jobs.quickstart",
        "broker + synthetic stream + heavy-hitters job, all embedded",
    ),
    "eval": ("privstream.eval.cli", "reproduce a paper's evaluation: tables, plots and its claims checked"),
}


def build_parser() -> argparse.ArgumentParser:
    from privstream import __version__

    parser = argparse.ArgumentParser(prog="privstream", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"privstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sp = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
