"""privstream: differentially private heavy hitters and frequencies over streams (core, Flink jobs, Kafka).

The command line. Each subcommand lives in its own module, which defines ``configure(parser)`` and ``run(args) -> int``
and imports heavy dependencies (Flink, Kafka) only inside ``run``, so ``privstream --help`` stays fast
and the core never needs Flink or Kafka.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from privstream import extras

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("privstream.demo", "core demo: a sketch's heavy hitters and a private release vs true counts"),
    "setup": (
        "privstream.connectors.setup_cli",
        "fetch and verify the assets the jobs and tests need (connector jars)",
    ),
    "broker": ("privstream.connectors.broker_cli", "start the embedded Kafka-protocol broker on 127.0.0.1"),
    "produce": ("privstream.connectors.produce_cli", "produce synthetic or file events to a Kafka topic"),
    "run": (
        "privstream.jobs.cli",
        "run a Flink job locally: heavy-hitters, sliding-window, continual-monitor, ldp-heavy-hitters",
    ),
    "quickstart": (
        "privstream.jobs.quickstart",
        "broker + synthetic stream + heavy-hitters job, all embedded",
    ),
    "tail": ("privstream.connectors.tail_cli", "print a topic's committed records, decoded (text or --json)"),
    "releases": ("privstream.connectors.releases_cli", "privstream tail of a job's default releases topic"),
    "ledger": ("privstream.connectors.ledger_cli", "a privacy ledger: spent and remaining budget, charges"),
    "keys": (
        "privstream.jobs.keys_cli",
        "continual-monitor --mode bf: write the nodes' X25519 keys and roster (offline setup)",
    ),
    "eval": ("privstream.eval.cli", "reproduce a paper's evaluation: tables, plots and its claims checked"),
    "dashboard": (
        "privstream.connectors.dashboard",
        "live web page of the latest releases (error bars, guarantee) and the ledger's budget spent",
    ),
    "docs": ("privstream.docs_cli", "the documentation site: serve it locally, or --build DIR"),
}


def build_parser() -> argparse.ArgumentParser:
    from privstream import __version__

    parser = argparse.ArgumentParser(prog="privstream", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"privstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        _configure_command(sp, name, module_name)
    return parser


def _configure_command(sp: argparse.ArgumentParser, name: str, module_name: str) -> None:
    """Let the command's module configure ``sp``. A command whose extra (privstream.extras) is not
    installed gets a stub instead: ``privstream NAME ...`` prints one line naming the extra, exit 2."""
    needed = extras.COMMAND_EXTRAS.get(name)
    missing = extras.missing_extras(needed or ())
    if not missing:
        try:
            module = importlib.import_module(module_name)
            module.configure(sp)
        except ModuleNotFoundError as exc:  # an extra's package imported by a command not in COMMAND_EXTRAS
            extra = extras.extra_for_error(exc)
            if extra is None:
                raise
            missing = [extra]
        else:
            sp.set_defaults(_run=module.run)
            return
    message = extras.needs_message(f"privstream {name}", missing, needed)
    sp.description = f"{sp.description} ({message})"
    sp.set_defaults(_run=None, _missing_extra=message)


def interrupted_message(args: argparse.Namespace, exc: KeyboardInterrupt) -> str:
    """The one line Ctrl-C prints: the command's own (a running job's says how far its committed
    releases go: ``privstream.jobs.run_report.RunInterrupted``), else for ``run`` (stopped before
    its job started) where the job's releases go."""
    if str(exc):
        return str(exc)
    topic = getattr(args, "releases_topic", None)
    if args.command == "run" and topic:
        return (
            f"privstream run: stopped; releases committed so far are on {topic!r} (privstream tail {topic})"
        )
    return f"privstream {args.command}: stopped"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    message = getattr(args, "_missing_extra", None)
    if message is not None:  # the command's options were never declared: report the extra, not them
        print(message, file=sys.stderr)
        return 2
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, the shell's 128 + SIGINT, no traceback
        print(interrupted_message(args, exc), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`privstream tail … | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        return 141  # the shell's 128 + SIGPIPE
    except ModuleNotFoundError as exc:
        extra = extras.extra_for_error(exc)
        if extra is None:
            raise
        print(extras.needs_message(f"privstream {args.command}", [extra]), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
