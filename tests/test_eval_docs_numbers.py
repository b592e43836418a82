"""The numbers docs/eval.md quotes from a run are that run's (issue 28).

Each study's section of docs/eval.md (its description and its "Reading the results") reads its
generated page (``docs/eval/<study>.md``, written by ``privstream eval <study> --report …``). Every
number the section's prose quotes must be on that page, to the precision it is quoted: 2.2 % stands for a page value in [0.0215, 0.0225), 1,810 for
one in [1809.5, 1810.5). So a rerun that moves a result, or a number typed wrong, fails here, and the
text is corrected from the new page. Small whole numbers (≤ 10: counts of runs, sites, rows),
commands and tables (the claims and settings a section defines) are not checked; the numbers of the
prose that are not measured (settings, formulas, the papers' own figures, years) are listed below
with where they come from.
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
    "chan": {
        "8192": "ε_0 = ε/8192, the theory's level-0 budget (a formula)",
        "2.5·10^7": "Lemma 3's condition on W for PDCH-BF's PCC (a formula)",
        "2·10^10": "the same condition for PDCH-LU's PCC",
        "3600": "the paper's Bloom rule, Q = ⌈e·3600⌉",
        "2002": "the year of Netflix's volume the stand-in assumes",
        "0.9": "ε_1 = 0.9ε, PDCH's leaf budget (a setting)",
        "22": "β = ⌈22/λ⌉, PDCH-LU's list length (a formula)",
        "2.4·10⁻³": "the bias predicted from the leaves' noise, set beside the measured 2.0·10⁻³",
        "769": "D, the stand-in's distinct items that the page's Q = ⌈e·D⌉ = 2,091 is sized from",
    },
    "hg-ldp": {
        "2311.16062": "the paper's arXiv number",
        "1.08": "b, HeavyGuardian's decay base (a setting)",
        "0.06": "HR's NDCG less the better of BDR's and CNR's, at ε ≥ 0.8: the page's summary rows' difference",
        "0.26": "the same difference's largest value",
        "2,314": "the paper's own ratio (Table 1)",
    },
    "dpsw": {"2024": "the paper's year", "0.005": "γ, one of the heavy-hitter thresholds (a setting)"},
    "lebeda-tetek": {"2023": "the paper's year"},
    "streaming": {"2013": "the flights data's year"},
}


def _value(match: re.Match[str]) -> tuple[float, float]:
    """The number (its unit applied) and half a unit of its last quoted digit; a whole number's
    trailing zeros are rounding (1,880 stands for 1,875 … 1,885)."""
    digits = Decimal(match[1].replace(",", ""))
    exponent = match[2] or match[3]
    shift = int(exponent.translate(_SUPERSCRIPT)) if exponent else 0
    last = digits.as_tuple().exponent
    if last == 0 and digits >= 100:
        text = match[1].replace(",", "")
        last = len(text) - len(text.rstrip("0"))
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


def _unmatched(quoted: str, page: str) -> list[str]:
    values = [_value(m)[0] for m in NUMBER.finditer(page)]
    quoted = _RANGE.sub(r"\1 \3–\2 \3", quoted)
    missing = []
    for match in NUMBER.finditer(quoted):
        x, half = _value(match)
        if x <= 10 and half >= 0.5:
            continue
        tolerance = half * (1 + 1e-9)
        raw = x / _UNITS[match[4]]  # the page's tables may state the unit in the column (sketch_kb)
        if not any(abs(y - x) <= tolerance or abs(100 * y - x) <= tolerance for y in values) and not any(
            abs(y - raw) <= half / _UNITS[match[4]] * (1 + 1e-9) for y in values
        ):
            missing.append(match[0])
    return missing


def test_every_study_has_a_section_and_a_page() -> None:
    assert set(_sections()) == set(NOT_MEASURED)
    assert all((ROOT / "docs" / "eval" / f"{study}.md").is_file() for study in NOT_MEASURED)


@pytest.mark.parametrize("study", sorted(NOT_MEASURED))
def test_the_numbers_quoted_from_a_run_are_on_its_page(study: str) -> None:
    page = (ROOT / "docs" / "eval" / f"{study}.md").read_text(encoding="utf-8")
    missing = [n for n in _unmatched(_sections()[study], page) if n not in NOT_MEASURED[study]]
    assert not missing, (
        f"docs/eval.md, Study `{study}`, quotes numbers that docs/eval/{study}.md does not have "
        f"(rerun moved them? read them off the page, or list a parameter in NOT_MEASURED): {missing}"
    )


def test_the_check_reads_numbers_to_their_quoted_precision() -> None:
    page = "| 0.02174 | 1810 | 2.01e-03 | 133,824 B |"
    assert _unmatched("2.2 %, 1,810, 2.0·10⁻³, 133,824 B and 0.0217", page) == []
    assert _unmatched("2.3 %, 1,811, 2.1·10⁻³, 0.0218", page) == ["2.3", "1,811", "2.1·10⁻³", "0.0218"]
    assert _unmatched("5 sites and 3 runs", page) == []
    assert _unmatched("1,800 and 134 KB and 0.13 M", "| 1812 | 133,824 |") == []
    assert _unmatched("0.13–0.14 M", "| 1.3e+05 | 1.4e+05 |") == [] and _unmatched("0.13–0.14 M", "| 0.13 |") == ["0.14 M"]
    assert _unmatched("1,820 and 135 KB", "| 1812 | 133,824 |") == ["1,820", "135 KB"]
