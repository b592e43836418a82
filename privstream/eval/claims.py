"""The claims table: each claim a paper states, next to what the evaluation measured, with a verdict.

A study returns a list of :class:`Claim` rows (claim text, where the paper states it, the measured
value, the criterion, PASS / FAIL / SKIP). :func:`write_claims` writes ``claims.csv`` and
``claims.md``; :func:`format_claims` renders them for the terminal.

Statistical claims ("holds with probability >= 1 − β") are checked with :func:`coverage_verdict`:
the number of runs that violate the stated interval is compared with the upper 99.9 % quantile of a
Binomial(runs, β) — a claim FAILs only if violations are significantly more frequent than promised.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from privstream.validation import check_int


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"  #: not measurable in this run (missing data, mechanism or grid), with the reason


@dataclass(frozen=True)
class Claim:
    """One row of the claims table."""

    claim: str  #: the paper's claim, in its own words where possible
    source: str  #: where the paper states it (section / theorem)
    measured: str  #: the measured value
    expected: str  #: the pass criterion
    status: Status

    @classmethod
    def check(cls, claim: str, source: str, measured: str, expected: str, passed: bool) -> Claim:
        return cls(claim, source, measured, expected, Status.PASS if passed else Status.FAIL)

    @classmethod
    def skip(cls, claim: str, source: str, reason: str, expected: str = "") -> Claim:
        return cls(claim, source, f"not measured: {reason}", expected, Status.SKIP)


COLUMNS = ("claim", "source", "measured", "expected", "status")


def binomial_upper_quantile(runs: int, p: float, confidence: float = 0.999) -> int:
    """Smallest v with Pr[Binomial(runs, p) <= v] >= ``confidence`` (exact, by summing the pmf)."""
    runs = check_int("runs", runs, minimum=0)
    if not 0 <= p <= 1:
        raise ValueError(f"p: must lie in [0, 1], got {p!r}")
    if p == 0 or runs == 0:
        return 0
    if p == 1:
        return runs
    total = 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    for v in range(runs + 1):
        log_pmf = math.lgamma(runs + 1) - math.lgamma(v + 1) - math.lgamma(runs - v + 1)
        total += math.exp(log_pmf + v * log_p + (runs - v) * log_q)
        if total >= confidence:
            return v
    return runs


def coverage_verdict(covered: int, runs: int, beta: float) -> tuple[bool, str]:
    """(passed, measured text) for "the interval holds with probability >= 1 − β": passed unless the
    ``runs − covered`` violations exceed :func:`binomial_upper_quantile` (runs, β)."""
    runs = check_int("runs", runs)
    covered = check_int("covered", covered, minimum=0)
    if covered > runs:
        raise ValueError(f"covered: {covered} > runs {runs}")
    violations = runs - covered
    allowed = binomial_upper_quantile(runs, beta)
    text = f"{covered / runs:.3f} of {runs} runs ({violations} violations, at most {allowed} allowed)"
    return violations <= allowed, text


def write_claims(out_dir: Path, claims: Sequence[Claim]) -> list[Path]:
    """Write ``claims.csv`` and ``claims.md`` into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / "claims.csv", out_dir / "claims.md"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for c in claims:
            writer.writerow([c.claim, c.source, c.measured, c.expected, c.status.value])
    md_path.write_text(claims_markdown(claims), encoding="utf-8")
    return [csv_path, md_path]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_markdown(claims: Sequence[Claim]) -> str:
    """The claims as a Markdown table (what ``claims.md`` holds)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for c in claims:
        cells = [c.claim, c.source, c.measured, c.expected, f"**{c.status.value}**"]
        lines.append("| " + " | ".join(_md_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def format_claims(claims: Sequence[Claim], width: int = 110) -> str:
    """A plain-text rendering for the terminal: one block per claim, then a tally."""
    blocks = []
    for i, c in enumerate(claims, 1):
        blocks.append(
            f"[{c.status.value}] {i}. {c.claim}\n"
            f"       source:   {c.source}\n"
            f"       measured: {c.measured}\n"
            f"       expected: {c.expected}"
        )
    tally = {s: sum(1 for c in claims if c.status is s) for s in Status}
    rule = "-" * min(width, 110)
    summary = ", ".join(f"{n} {s.value}" for s, n in tally.items())
    return "\n".join([rule, *blocks, rule, f"claims: {summary}"])
