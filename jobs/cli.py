"""``privstream run <job> …``: run a Flink job locally (a MiniCluster in this process).

Jobs: ``heavy-hitters`` (:mod:`privstream.jobs.heavy_hitters`), ``continual-monitor``
(:mod:`privstream.jobs.continual_monitor`), ``ldp-heavy-hitters``
(:mod:`privstream.jobs.ldp_heavy_hitters`) and ``sliding-window``
(:mod:`privstream.jobs.sliding_window`). To submit to a cluster instead, use Flink's own client:
``flink run -py <path of privstream/jobs/heavy_hitters.py> …`` (see README).

Every job logs a start banner (its run id, topics, budget, Flink web UI), its progress and, when a
bounded run ends, a summary (:mod:`privstream.jobs.run_report`); exit status 2: refused before
Flink started (the option named), 3: the run released nothing (every release refused by a spent
budget, or every message dead-lettered), 130: Ctrl-C.
"""

from __future__ import annotations

import argparse
from typing import Any

EXIT_STATUS = (
    "Exit status: 0: the run ended normally (a bounded run); 2: refused before Flink started "
    "(the option named); 3: the run released nothing (every release refused by a spent budget, or "
    "every message dead-lettered); 130: Ctrl-C."
)

#: job name -> module with ``configure(parser)`` and ``run(args) -> int``
JOBS = {
    "heavy-hitters": "privstream.jobs.heavy_hitters",
    "continual-monitor": "privstream.jobs.continual_monitor",
    "ldp-heavy-hitters": "privstream.jobs.ldp_heavy_hitters",
    "sliding-window": "privstream.jobs.sliding_window",
}


def configure(parser: argparse.ArgumentParser) -> None:
    import importlib

    sub = parser.add_subparsers(dest="job", required=True)
    for name, module_name in JOBS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or "").splitlines()[0]
        sp = sub.add_parser(name, help=summary, description=f"{summary} {EXIT_STATUS}")
        module.configure(sp)
        sp.set_defaults(_job_run=module.run)


#: ``privstream run`` options that carry a privacy parameter -> which bound applies to them
PRIVACY_OPTIONS = {"epsilon": "epsilon", "delta": "delta", "total_epsilon": "epsilon", "total_delta": "delta"}


def run(args: argparse.Namespace) -> int:
    """Refuse a privacy parameter no one would mean (:func:`privstream.validation.check_privacy_bound`)
    before the job reads any topic or starts Flink, for every job alike; then run the job."""
    import sys

    from privstream.validation import check_privacy_bound

    try:
        for name, parameter in PRIVACY_OPTIONS.items():
            check_privacy_bound("--" + name.replace("_", "-"), getattr(args, name, None), parameter)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return int(args._job_run(args) or 0)


def script_main(module: str, doc: str, configure: Any, run: Any, argv: list[str] | None) -> int:
    """A job file's ``main``: its own command line (``python -m <module>`` / ``flink run -py``)."""
    import sys

    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    configure(parser)
    return int(run(parser.parse_args(sys.argv[1:] if argv is None else argv)) or 0)
