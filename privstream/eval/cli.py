"""``privstream eval``: run a registered evaluation study and write its tables, plots and claims.

    privstream eval --list
    privstream eval lebeda-tetek [--out DIR] [--workload SPEC]... [--k 16,64] [--epsilon 0.5 1]
                                 [--reps N] [--seed N] [--tiny] [--param key=value]...

Prints the claims table (and where the files went); ``--strict`` exits 1 if a claim fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _split(convert: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    """An argparse type: a comma-separated list of ``convert``-ed values."""

    def parse(text: str) -> list[Any]:
        try:
            values = [convert(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected at least one {what[:-1]}")
        return values

    return parse


class _Extend(argparse.Action):
    """Repeatable list option: ``--k 16,64 --k 256`` and ``--k 16 64`` all extend one list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option: str | None = None,
    ) -> None:
        current = list(getattr(namespace, self.dest) or [])
        for chunk in values:
            current.extend(chunk)
        setattr(namespace, self.dest, current)


def _param(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", nargs="?", help="the study to run (see --list)")
    parser.add_argument(
        "--list", action="store_true", help="list the registered studies and workloads, then exit"
    )
    parser.add_argument("--out", help="output directory (default eval-results/<study>)")
    parser.add_argument(
        "--workload",
        action="append",
        metavar="SPEC",
        help="workload NAME or NAME:key=value,... (repeatable; default: the study's)",
    )
    parser.add_argument(
        "--k", nargs="+", type=_split(int, "ints"), action=_Extend, help="sketch sizes, e.g. 16,64,256"
    )
    parser.add_argument(
        "--epsilon", nargs="+", type=_split(float, "numbers"), action=_Extend, help="ε values, e.g. 0.5,1"
    )
    parser.add_argument("--delta", type=float, help="δ of every (ε, δ) release")
    parser.add_argument("--beta", type=float, help="1 − confidence of the stated error bounds")
    parser.add_argument("--reps", type=int, help="releases per cell")
    parser.add_argument("--top", type=int, help="k of the top-k metrics (default 10)")
    parser.add_argument("--gamma", type=float, help="heavy-hitter fraction: items with f >= γ·n")
    parser.add_argument("--max-events", type=int, help="cut every workload to this many events")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic data and of the (seeded) noise"
    )
    parser.add_argument(
        "--param", action="append", type=_param, metavar="KEY=VALUE", help="study parameter (repeatable)"
    )
    parser.add_argument("--tiny", action="store_true", help="tiny fast settings (seconds; for tests)")
    parser.add_argument(
        "--report",
        metavar="PAGE",
        help="also write the run as a Markdown page with its plots (e.g. docs/eval/<study>.md: the site's page)",
    )
    parser.add_argument(
        "--report-section",
        metavar="TITLE",
        help="write the run as the section TITLE of the --report page, keeping the page's other runs",
    )
    parser.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a claim fails")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO) to stderr")


def _print_list() -> None:
    from privstream.eval.harness import describe_workloads, studies

    print("studies:")
    for study in studies():
        print(f"  {study.name:<16} {study.description}")
    print("workloads (--workload NAME or NAME:key=value,...):")
    for name, text in describe_workloads():
        print(f"  {name:<16} {text}")


def argv_of(args: argparse.Namespace) -> list[str]:
    """The options of this run as a command line (what a report says made it), ``--out`` left out."""
    out = [args.study]
    for option, value in (
        ("--tiny", args.tiny),
        ("--seed", args.seed if args.seed else None),
        ("--reps", args.reps),
        ("--max-events", args.max_events),
        ("--delta", args.delta),
        ("--beta", args.beta),
        ("--top", args.top),
        ("--gamma", args.gamma),
    ):
        if value is True:
            out.append(option)
        elif value not in (None, False):
            out += [option, str(value)]
    for spec in args.workload or ():
        out += ["--workload", spec]
    if args.k:
        out += ["--k", ",".join(map(str, args.k))]
    if args.epsilon:
        out += ["--epsilon", ",".join(map(str, args.epsilon))]
    for key, value in args.param or ():
        out += ["--param", f"{key}={value}"]
    if args.no_plots:
        out.append("--no-plots")
    out += ["--report", args.report]
    if args.report_section:
        out += ["--report-section", args.report_section]
    return out


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.list:
        _print_list()
        return 0
    if not args.study:
        print("privstream eval: name a study (privstream eval --list shows them)", file=sys.stderr)
        return 2
    from privstream.eval.claims import format_claims
    from privstream.eval.harness import run_study
    from privstream.eval.report import section_slug, write_report
    from privstream.eval.workloads import MissingExtra

    if args.report_section is not None:  # a bad title fails before the run, not after it
        if not args.report:
            print("privstream eval: --report-section needs --report PAGE", file=sys.stderr)
            return 2
        try:
            section_slug(args.report_section)
        except ValueError as exc:
            print(f"privstream eval: {exc}", file=sys.stderr)
            return 2

    overrides = {
        "workloads": args.workload,
        "ks": args.k,
        "epsilons": args.epsilon,
        "delta": args.delta,
        "beta": args.beta,
        "reps": args.reps,
        "top": args.top,
        "gamma": args.gamma,
        "max_events": args.max_events,
        "params": dict(args.param) if args.param else None,
    }
    try:
        outcome = run_study(
            args.study,
            out_dir=args.out,
            seed=args.seed,
            tiny=args.tiny,
            overrides=overrides,
            plots=not args.no_plots,
            progress=not args.no_progress,
        )
    except (ValueError, MissingExtra) as exc:  # bad parameters name themselves; -v shows the traceback
        if args.verbose:
            raise
        print(f"privstream eval: {exc}", file=sys.stderr)
        return 2
    if args.report:
        import shlex

        command = shlex.join(["privstream", "eval", *(argv_of(args))])
        write_report(outcome, args.report, command, section=args.report_section)
    print(format_claims(outcome.claims))
    print(f"{len(outcome.tables['runs'])} runs in {outcome.seconds:.1f} s; results in {outcome.out_dir}/:")
    print("  " + " ".join(sorted(p.name for p in outcome.files)))
    return 1 if args.strict and outcome.failed_claims else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="privstream eval", description=__doc__.splitlines()[0])
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
