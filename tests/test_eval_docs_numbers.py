"""The numbers docs/eval.md quotes from a run are that run's (issue 28).

Each study's section of docs/eval.md (its description and its "Reading the results") reads its
generated page (``docs/eval/<study>.md``, written by ``privstream eval <study> --report …``). Every
number of the section's prose must be, to the precision it is quoted (2.2 % stands for a value in
[0.0215, 0.0225), 1,810 for one in [1,805, 1,815]):

* in the page's Run or Claims tables (the claims' evidence quotes the measured values), or
* in the summary (or another table) cell it is bound to in :data:`BOUND` — its column and the cells
  naming its row (workload, arm, ε …) — so a quote is checked against *its* cell, never against
  any of the thousands of numbers a page holds, or
* not measured (settings, formulas, the papers' own figures, years): :data:`NOT_MEASURED`, each
  with where it comes from.

So a rerun that moves a result, or a number typed wrong, fails here, and the text is corrected from
the new page. Small whole numbers (≤ 10: counts of runs, sites, rows), commands and the tables a
section defines (its claims and settings) are not checked.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "docs" / "eval.md"

_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
#: 1,810 · 0.35 · 2.0·10⁻³ · 2.5·10^5 · 6.33e-06 · 31k · 7.58 M · 7.4 KB
NUMBER = re.compile(
    r"(?<![\w.§])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
    r"(?:\s*[·×]\s*10\^?\{?([⁻⁰¹²³⁴⁵⁶⁷⁸⁹\d-]+)\}?|e([+-]?\d+))?"
    r"(?:\s?(k|M|KB|MB|GB)\b)?"
)
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "KB": 10**3, "MB": 10**6, "GB": 10**9}

#: Numbers a study's section quotes that its run does not measure, by study, with their source.
NOT_MEASURED: dict[str, dict[str, str]] = {
    "lebeda-tetek": {"2023": "the paper's year", "32": "k of the tiny run (a setting)"},
    "streaming": {
        "2013": "the flights data's year",
        "9,066": "MovieLens' distinct movies (the dataset's description)",
        "4,043": "the flights data's distinct aircraft (the dataset's description)",
    },
    "chan": {
        "90": "W = 90 days, the window (a setting)",
        "4,000": "MovieLens' β = 2/λ at λ = 0.0005 (a formula)",
        "0.004": "θ (a setting)",
        "0.4": "θ = 0.4 % of a window (a setting)",
        "30": "MovieLens' 30-day steps (a setting)",
        "8192": "ε_0 = ε/8192, the theory's level-0 budget (a formula)",
        "26": "β_0, Lemma 2's list length at level 0 (a formula)",
        "3·10^5": "the theory's per-level noise sd (a formula)",
        "32": "Lemma 1's constant",
        "2.5·10^7": "Lemma 3's condition on W for PDCH-BF's PCC (a formula)",
        "2·10^10": "the same condition for PDCH-LU's PCC",
        "3600": "the paper's Bloom rule, Q = ⌈e·3600⌉",
        "2002": "the year of Netflix's volume the stand-in assumes",
        "0.9": "ε_1 = 0.9ε, PDCH's leaf budget (a setting)",
        "0.49": "E[max(r, 0)] of the leaves' Geom(e^{ε_1}) noise (computed from its law)",
        "22": "β = ⌈22/λ⌉, PDCH-LU's list length (a formula)",
        "220": "0.49 × 90 leaves × 5 sites: the bias computed from the noise's law",
        "90,000": "the window's ratings (90 days of the stand-in's daily volume)",
        "2.4·10⁻³": "that computed bias as a fraction, set beside the measured 2.0·10⁻³",
        "1.3 GB": "the 83 MB table (on the page) at 128-byte instead of 8-byte cells",
    },
    "hg-ldp": {
        "2311.16062": "the paper's arXiv number",
        "1.08": "b, HeavyGuardian's decay base (a setting)",
        "4,000": "the memory study's reports (a setting)",
        "9,066": "MovieLens' distinct movies (the dataset's description)",
        "2,314": "the paper's own ratio (Table 1)",
    },
    "dpsw": {
        "2024": "the paper's year",
        "25": "the Gaussian mixture's parameter (50, 25)",
        "2000": "b, the paper scale's PCMS width (a setting)",
        "0.4": "one ε of the paper's grid",
        "0.005": "γ, one of the heavy-hitter thresholds (a setting)",
        "0.01": "γ, the other threshold",
        "0.55": "q, the budget split ratio (a setting)",
        "0.8": "ρ_1 ≈ 0.8ρ, what q gives (a setting)",
        "60": "the reduced scale's timestamps (a setting)",
        "95": "the boundary PCMSs' noise σ (from ρ, a formula)",
        "0.85": "the min-of-3 rows' downward bias in σ (a formula)",
    },
}

_HG = {"workload": "normal:count=100000,std=10"}
_HG_EXP = {"workload": "exponential:count=100000,scale=10"}
_THEORY = {"workload": "zipf(1.2), n=500, one item per step"}
_PAPER_Z, _PAPER_G = {"workload": "zipf:count=10000000"}, {"workload": "gaussian:count=10000000"}
_REDUCED_Z, _REDUCED_G = {"workload": "zipf:count=300000"}, {"workload": "gaussian:count=300000"}

#: Numbers quoted from a page's summary or other tables, each bound to its cell: the column and
#: the cells that name its row (any row with those cells whose column holds the quote passes).
BOUND: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
    "lebeda-tetek": {},
    "streaming": {
        "100,004": ("events", {"workload": "movielens", "sketch": "exact"}),
        "334,264": ("events", {"workload": "flights", "sketch": "exact"}),
        "33": ("threshold", {"workload": "zipf", "mechanism": "pmg", "k": "512", "epsilon": "1"}),
        "606": ("threshold", {"workload": "zipf", "mechanism": "gshm", "k": "512", "epsilon": "1"}),
        "1,809": ("threshold", {"workload": "zipf", "mechanism": "gshm", "k": "4096", "epsilon": "1"}),
        "7,718": ("threshold", {"workload": "zipf", "mechanism": "gshm", "k": "65536", "epsilon": "1"}),
        "28": ("threshold", {"workload": "zipf", "mechanism": "exact_threshold", "epsilon": "0.5"}),
        "15": ("threshold", {"workload": "zipf", "mechanism": "exact_threshold", "epsilon": "1"}),
        "237": ("smallest_top_count", {"workload": "movielens"}),
        "0.8 MB": ("bytes", {"workload": "zipf", "k": "65536", "sketch": "shard 0/4"}),
    },
    "chan": {
        "18": ("error_mean", {**_THEORY, "arm": "PDCH-LU", "epsilon": "1"}),
        "211": ("max_distinct_per_leaf", {"workload": "ratings-sim"}),
        "2,085": ("max_distinct_per_leaf", {"workload": "movielens"}),
        "17,770": ("items", {"workload": "ratings-sim", "arm": "PDCH-BF (paper Bloom)", "epsilon": "1"}),
        "3.9": ("updates_mean", {"workload": "ratings-sim", "arm": "DCH-LU (noiseless)"}),
        "6.1": ("error_mean", {"workload": "ratings-sim", "arm": "PDCH-LU, MG calibration", "epsilon": "10"}),
        "0.31": ("error_mean", {**_THEORY, "arm": "PDCH-BF", "epsilon": "1"}),
        "19": ("rows", {"arm": "PDCH-BF, Thm 2 sizing at k=100"}),
        "543,657": ("columns", {"arm": "PDCH-BF, Thm 2 sizing at k=100"}),
        "83 MB": ("bytes_per_node_step", {"arm": "PDCH-BF, Thm 2 sizing at k=100"}),
        "0.011": ("error_mean", {**_THEORY, "arm": "DCH-BF (noiseless)"}),
        "1.8": ("error_mean", {**_THEORY, "arm": "PDCH-LU", "epsilon": "10"}),
        "0.08": ("error_mean", {**_THEORY, "arm": "PDCH-BF", "epsilon": "10"}),
    },
    "hg-ldp": {
        "0.48": ("ndcg", {**_HG_EXP, "arm": "dsr", "epsilon": "0.8"}),
        "0.18": ("ndcg", {**_HG_EXP, "arm": "bgr", "epsilon": "0.8"}),
        "355": ("aae", {**_HG, "arm": "hr", "epsilon": "2"}),
        "0.09": ("ndcg", {"workload": "movielens", "arm": "heavyguardian"}),
        "7,371": ("bgr", {"d": "100000"}),
    },
    "dpsw": {
        "0.83": ("f1_0.005", {**_PAPER_Z, "arm": "DPSW", "epsilon": "2"}),
        "0.95": ("f1_0.01", {**_PAPER_G, "arm": "DPSW", "epsilon": "0.5"}),
        "5,800": ("mae_high", {**_PAPER_Z, "arm": "PCC-MG", "epsilon": "2"}),
        "677": ("mae_high", {**_REDUCED_Z, "arm": "PCC-MG", "epsilon": "1"}),
        "13,070": ("mae_high", {**_PAPER_G, "arm": "PCC-MG", "epsilon": "0.5"}),
        "75": ("mae_high", {**_PAPER_Z, "arm": "DPSW", "epsilon": "2"}),
        "408": ("mae_high", {**_PAPER_G, "arm": "DPSW", "epsilon": "0.5"}),
        "3,612": ("mae_low", {**_PAPER_G, "arm": "PCC-MG", "epsilon": "0.5"}),
        "3,616": ("mae_low", {**_PAPER_G, "arm": "PCC-MG", "epsilon": "2"}),
        "89": ("mae_low", {**_PAPER_G, "arm": "DPSW", "epsilon": "2"}),
        "417": ("mae_low", {**_PAPER_G, "arm": "DPSW", "epsilon": "0.5"}),
        "309": ("mae_low", {**_PAPER_Z, "arm": "PCC-MG", "epsilon": "2"}),
        "322": ("mae_low", {**_PAPER_Z, "arm": "PCC-MG", "epsilon": "0.5"}),
        "85": ("mae_low", {**_PAPER_Z, "arm": "DPSW", "epsilon": "1"}),
        "235": ("mae_low", {**_PAPER_Z, "arm": "DPSW", "epsilon": "0.5"}),
        "6.1 M": ("items_per_s", {**_PAPER_Z, "arm": "DPSW", "epsilon": "0.5"}),
        "7.6 M": ("items_per_s", {**_PAPER_G, "arm": "DPSW", "epsilon": "2"}),
        "20 M": ("items_per_s_without_noise", {**_REDUCED_Z, "arm": "DPSW", "epsilon": "0.5"}),
        "0.13 M": ("items_per_s", {**_REDUCED_Z, "arm": "PCC-MG", "epsilon": "1"}),
        "0.35 M": ("items_per_s", {**_REDUCED_G, "arm": "PCC-MG", "epsilon": "1"}),
        "30": ("live_pcms", {**_REDUCED_Z, "arm": "DPSW", "epsilon": "1"}),
        "703 KB": ("sketch_kb", {**_REDUCED_Z, "arm": "DPSW", "epsilon": "1"}),
        "1,406 KB": ("sketch_kb", {**_PAPER_Z, "arm": "DPSW", "epsilon": "1"}),
        "781 KB": ("sketch_kb", {**_REDUCED_Z, "arm": "exact"}),
        "7,812 KB": ("sketch_kb", {**_PAPER_Z, "arm": "exact"}),
    },
}


def _value(match: re.Match[str]) -> tuple[float, float]:
    """The number (its unit applied) and half a unit of its last quoted digit; a whole number's
    last zero is rounding (1,880 stands for 1,875 … 1,885; 100 for 95 … 105)."""
    digits = Decimal(match[1].replace(",", ""))
    exponent = match[2] or match[3]
    shift = int(exponent.translate(_SUPERSCRIPT)) if exponent else 0
    last = digits.as_tuple().exponent
    if last == 0 and digits >= 100:
        text = match[1].replace(",", "")
        last = min(1, len(text) - len(text.rstrip("0")))
    half = Decimal(1).scaleb(last) / 2 * _UNITS[match[4]]
    return float(digits.scaleb(shift) * _UNITS[match[4]]), float(half.scaleb(shift))


def _sections() -> dict[str, str]:
    """Each study's section of docs/eval.md (its description and its Results), without its code
    blocks (commands) and tables (the claims and settings it defines)."""
    text = EVAL.read_text(encoding="utf-8")
    found = re.findall(r"^## Study `(\S+)`\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    sections = {}
    for study, body in found:
        body = re.sub(r"```.*?```", "", body, flags=re.S)
        sections[study] = "\n".join(line for line in body.splitlines() if not line.startswith("|"))
    return sections


#: a range with one unit, 0.13–0.29 M: the unit is the range's start's too
_RANGE = re.compile(r"(\d[\d.,]*)–(\d[\d.,]*)\s?(k|M|KB|MB|GB)\b")


def _close(x: float, half: float, unit: str | None, y: float) -> bool:
    """Page value ``y`` rounds to the quote ``x`` (± ``half``): as it is, as a percentage, or in the
    quote's unit when the page's column states it (``sketch_kb``)."""
    tolerance = half * (1 + 1e-9)
    raw, raw_half = x / _UNITS[unit], tolerance / _UNITS[unit]
    return abs(y - x) <= tolerance or abs(100 * y - x) <= tolerance or abs(y - raw) <= raw_half


def _quotes(text: str) -> list[re.Match[str]]:
    """The checked numbers of ``text`` (small whole numbers left out)."""
    text = _RANGE.sub(r"\1 \3–\2 \3", text)
    return [m for m in NUMBER.finditer(text) if not (_value(m)[0] <= 10 and _value(m)[1] >= 0.5)]


def _unmatched(quoted: str, page: str) -> list[str]:
    """The quotes of ``quoted`` that no number of ``page`` rounds to."""
    values = [_value(m)[0] for m in NUMBER.finditer(page)]
    missing = []
    for match in _quotes(quoted):
        x, half = _value(match)
        if not any(_close(x, half, match[4], y) for y in values):
            missing.append(match[0])
    return missing


def _tables(page: str) -> list[tuple[str, list[dict[str, str]]]]:
    """The page's Markdown tables: (the heading above, its rows as column → cell)."""
    tables: list[tuple[str, list[dict[str, str]]]] = []
    heading, lines = "", page.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.strip("# ").strip()
        elif line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            columns = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                cells = (c.strip() for c in row.strip().strip("|").split(" | "))
                rows.append(dict(zip(columns, cells, strict=False)))
            tables.append((heading, rows))
    return tables


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def _bound_cells(
    tables: list[tuple[str, list[dict[str, str]]]], column: str, where: dict[str, str]
) -> list[float]:
    """The numbers in ``column`` of every row (of any of ``tables``) whose cells include ``where``."""
    return [
        value
        for _, rows in tables
        for row in rows
        if column in row and all(row.get(k) == v for k, v in where.items())
        if (value := _number(row[column])) is not None
    ]


def _drift(study: str) -> list[str]:
    """The quotes of the study's section that neither its Run/Claims tables nor their bound cells
    hold, and that are not listed as not measured."""
    tables = _tables((ROOT / "docs" / "eval" / f"{study}.md").read_text(encoding="utf-8"))
    evidence = "\n".join(
        " | ".join(row.values()) for heading, rows in tables if heading in ("Run", "Claims") for row in rows
    )
    drift = []
    for quote in _unmatched(_sections()[study], evidence):
        if quote in NOT_MEASURED[study]:
            continue
        if quote not in BOUND[study]:
            drift.append(f"{quote} (in no Run or Claims table, bound to no cell)")
            continue
        column, where = BOUND[study][quote]
        cells = _bound_cells(tables, column, where)
        (match,) = _quotes(quote)
        x, half = _value(match)
        if not any(_close(x, half, match[4], y) for y in cells):
            drift.append(f"{quote} (its cell {column} of {where} holds {cells or 'nothing'})")
    return drift


def test_every_study_has_a_section_a_page_and_live_bindings() -> None:
    assert set(_sections()) == set(NOT_MEASURED) == set(BOUND)
    for study in NOT_MEASURED:
        assert (ROOT / "docs" / "eval" / f"{study}.md").is_file()
        quoted = {m[0] for m in _quotes(_sections()[study])}
        stale = sorted((set(BOUND[study]) | set(NOT_MEASURED[study])) - quoted)
        assert not stale, f"{study}: bound or listed numbers the section no longer quotes: {stale}"


@pytest.mark.parametrize("study", sorted(NOT_MEASURED))
def test_the_numbers_quoted_from_a_run_are_on_its_page(study: str) -> None:
    drift = _drift(study)
    assert not drift, (
        f"docs/eval.md, Study `{study}`, quotes numbers that docs/eval/{study}.md does not back "
        f"(a rerun moved them? read them off the page; bind a summary number to its cell in BOUND; "
        f"list a setting in NOT_MEASURED): {drift}"
    )


def test_the_check_reads_numbers_to_their_quoted_precision() -> None:
    page = "| 0.02174 | 1810 | 2.01e-03 | 133,824 B |"
    assert _unmatched("2.2 %, 1,810, 2.0·10⁻³, 133,824 B and 0.0217", page) == []
    assert _unmatched("2.3 %, 1,811, 2.1·10⁻³, 0.0218", page) == ["2.3", "1,811", "2.1·10⁻³", "0.0218"]
    assert _unmatched("5 sites and 3 runs", page) == []
    assert _unmatched("1,810 and 134 KB and 0.13 M", "| 1812 | 133,824 |") == []
    assert _unmatched("0.13–0.14 M", "| 1.3e+05 | 1.4e+05 |") == []
    assert _unmatched("0.13–0.14 M", "| 0.13 |") == ["0.14 M"]
    assert _unmatched("1,820, 100 and 135 KB", "| 1812 | 133,824 | 150 |") == ["1,820", "100", "135 KB"]


def test_a_bound_number_is_checked_against_its_own_cell_only() -> None:
    page = "## Summary\n\n| workload | arm | mae |\n|---|---|---|\n| z | a | 677.4 |\n| z | b | 150.4 |\n"
    tables = _tables(page)
    assert _bound_cells(tables, "mae", {"arm": "a"}) == [677.4]
    assert _bound_cells(tables, "mae", {"arm": "c"}) == []
    assert not _unmatched("150", page)  # somewhere on the page, but not in a's cell:
    assert not any(_close(150, 0.5, None, y) for y in _bound_cells(tables, "mae", {"arm": "a"}))
