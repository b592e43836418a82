"""``privstream releases JOB``: ``privstream tail`` of a job's default releases topic.

The topic is the job's own ``--releases-topic`` default, read from the job's option parser (one
source of truth): heavy-hitters → ``releases``, sliding-window → ``window-releases``,
continual-monitor → ``continual-releases``, ldp-heavy-hitters → ``ldp-releases``. A run given
another ``--releases-topic`` is read with ``privstream tail TOPIC``.
"""

from __future__ import annotations

import argparse
import importlib

from privstream.connectors.tail_cli import add_read_options, tail


def _jobs() -> dict[str, str]:
    from privstream.jobs.cli import JOBS

    return JOBS


def releases_topic(job: str) -> str:
    """The default ``--releases-topic`` of ``job`` (a name of ``privstream run``)."""
    parser = argparse.ArgumentParser()
    importlib.import_module(_jobs()[job]).configure(parser)
    topic = parser.get_default("releases_topic")
    assert isinstance(topic, str), f"{job} has no --releases-topic default"
    return topic


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", choices=sorted(_jobs()), help="the job whose default releases topic to read")
    add_read_options(parser)


def run(args: argparse.Namespace) -> int:
    return tail(args, releases_topic(args.job))
