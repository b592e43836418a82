"""The HG-LDP server's heavy part on the debiased scale (paper App. A.7.1 partial debiasing, App. A.5
``DSR_Insert``/``DSR_FinalDebias``, Eq. 2).

Every scheme's estimate of a heavy item h is a sum over *phases*, maximal runs of reports randomised
by one mechanism with the same (offset o, scale s):

    f̂_h = Σ_φ (ΔC_h^φ − n^φ·o^φ) / s^φ

where ΔC_h^φ is the change of h's recorded count during φ (hits minus decays) and n^φ the number of
reports in φ:

* warm-up: o = 0, s = 1 (raw warm-up counts pass through unchanged);
* BGR, DSR full mode: o = q, s = p − q (GRR on D, §4.1 Algorithm 1);
* DSR shrunk mode: o = q_s, s = p_s − q_s (GRR on H ∪ {⊥});
* BDR, CNR: o = γ_h·p1·q2 + (1−γ_h)·q1/λ_h, s = p1·(p2 − q2) (Eq. 2).

The paper's implementation debiases *before storing* (App. A.7.1) so that ED's under-counting is
not amplified by the final division, and each DSR mode switch rescales every count (App. A.5):
the count ED sees is ``C_h = s_cur·f̂_h`` — every report lowers every count by o (partial
debiasing), a hit raises it by 1, a decay lowers it by 1, a switch A→B maps
``C ← C/s_A·s_B``, and the Response divides by s_cur. An item recorded mid-stream enters with
``1 − s_cur·(offsets of all earlier reports)``: raw count 0 before its insertion.

Stored per cell is ``A_h = C_h + G`` with one shared offset G (``C_h = A_h − G``), so a report
costs O(1); a switch rescales the λ_h cells (O(k)). All arithmetic is on exact
:class:`~fractions.Fraction`; the denominators stay bounded (every phase's o/s and 1/s share the
denominators of ε's rationalised ratio).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Phase:
    """One mechanism's debiasing constants: expected other-item hits per report and the scale."""

    name: str
    offset: Fraction
    scale: Fraction


WARM_UP = Phase("warm-up", Fraction(0), Fraction(1))


class DebiasedHeavyPart:
    """The heavy cells ⟨item, count⟩ on the debiased scale (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.phase = WARM_UP
        self.reports = 0  #: reports since statistics started
        self.switches = 0
        self._cells: dict[int, Fraction] = {}  #: A_h = C_h + G
        self._shift = Fraction(0)  #: G, the current phase's accumulated offset
        self._earlier = Fraction(0)  #: Σ over finished phases of n^φ·o^φ/s^φ
        self._weakest: tuple[int, Fraction] | None = None
        #: ED's scale in the statistics phase (None: the current phase's). DSR sets p_s − q_s, the
        #: released code's unit, so the τ = 1 flag and b^−C see one scale in both modes.
        self.unit: Fraction | None = None

    # --- cells ---------------------------------------------------------------------------------
    def __contains__(self, item: int) -> bool:
        return item in self._cells

    def __len__(self) -> int:
        return len(self._cells)

    @property
    def full(self) -> bool:
        return len(self._cells) >= self.capacity

    def items(self) -> tuple[int, ...]:
        return tuple(sorted(self._cells))

    def count(self, item: int) -> Fraction:
        """The count ED sees, C_h = s_cur·f̂_h."""
        return self._cells[item] - self._shift

    def weakest(self) -> tuple[int, Fraction]:
        """(item, count) of the weakest cell; ties go to the smallest item ID (deterministic)."""
        if self._weakest is None:  # the least count, then the least ID among its cells (no tuple
            # keys: one exact Fraction comparison per cell, then cheap equality tests)
            stored = min(self._cells.values())
            self._weakest = (min(item for item, value in self._cells.items() if value == stored), stored)
        item, stored = self._weakest
        return item, stored - self._shift

    def ed_ratio(self) -> Fraction:
        """ED counts per current-phase count: ``unit / s_cur`` (1 in warm-up or without a unit;
        kept per (unit, phase): it is asked for at every decay)."""
        if self.unit is None or self.phase == WARM_UP:
            return Fraction(1)
        cached = getattr(self, "_ratio", None)  # (unit, phase, ratio); absent in older checkpoints
        if cached is None or cached[0] is not self.unit or cached[1] is not self.phase:
            cached = (self.unit, self.phase, self.unit / self.phase.scale)
            self._ratio = cached
        return cached[2]

    def ed_weakest(self) -> tuple[int, Fraction]:
        """(item, count) of the weakest cell in ED's unit (``unit·f̂``; the raw count in warm-up)."""
        item, count = self.weakest()
        return item, count * self.ed_ratio()

    def ed_decay(self, item: int) -> None:
        """ED's decay: ``item`` loses 1 in ED's unit."""
        self.decay(item, 1 / self.ed_ratio())

    def load(self, counts: Mapping[int, int]) -> None:
        """Warm-up counts (raw, before any report)."""
        for item, count in counts.items():
            self._cells[item] = Fraction(count) + self._shift
        self._weakest = None

    def hit(self, item: int) -> None:
        self._cells[item] += 1
        if self._weakest is not None and self._weakest[0] == item:
            self._weakest = None

    def decay(self, item: int, amount: Fraction | int = 1) -> None:
        self._cells[item] -= amount
        if self._weakest is not None and self._weakest[0] == item and amount > 0:
            # the weakest cell only got weaker: it stays the minimum (ties to the smallest ID
            # included, its count is now below every other), so no rescan of the k cells
            self._weakest = (item, self._cells[item])
        else:
            self._weakest = None

    def replace(self, old: int | None, new: int) -> None:
        """``new`` takes ``old``'s cell (or a free one) with raw count 0 before now, plus this hit."""
        if old is not None:
            del self._cells[old]
        self._cells[new] = 1 - self.phase.scale * self._earlier
        self._weakest = None

    # --- phases ------------------------------------------------------------------------------
    def report(self, phase: Phase) -> None:
        """Account one report randomised by ``phase``'s mechanism (call before its count update)."""
        if phase != self.phase:
            self._switch(phase)
        self.reports += 1
        self._shift += phase.offset

    def begin(self, phase: Phase) -> None:
        """End the warm-up: rescale the raw counts to ``phase`` (no report, not counted as a switch)."""
        if self.phase != WARM_UP or self.reports:
            raise RuntimeError("begin: only once, at the end of the warm-up")
        self._switch(phase)
        self.switches = 0

    def _switch(self, phase: Phase) -> None:
        """DSR_Insert's rescale: C ← C/s_old·s_new for every cell; the offsets of the finished
        phase join the earlier ones."""
        old = self.phase
        ratio = phase.scale / old.scale
        self._earlier += self._shift / old.scale
        self._cells = {item: (stored - self._shift) * ratio for item, stored in self._cells.items()}
        self._shift = Fraction(0)
        self.phase = phase
        self.switches += 1
        self._weakest = None

    def estimate(self, item: int) -> Fraction:
        """f̂_h = C_h / s_cur (exact, unclamped)."""
        return self.count(item) / self.phase.scale

    def estimates(self) -> dict[int, Fraction]:
        return {item: self.estimate(item) for item in self._cells}
