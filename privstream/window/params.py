"""Public parameters of a DPSW-Sketch and the guarantee they give.

:func:`dpsw_params` validates every parameter (failing fast with an error naming it) and derives:

* ρ from (ε, δ) by DPSW Eq. (1) (:func:`privstream.accounting.dp_to_zcdp`), or ρ given directly;
* the substream length W (given, or ``⌈w^β⌉`` as in Alg. 2);
* the checkpoint list I (Alg. 2 lines 1–4 from the smooth factor α, or given explicitly);
* the budget-split ratio q (α by default, as in the paper; separately configurable, erratum 7);
* the per-PCMS budgets ρ_1..ρ_|I| (Lemma 4.1) and ζ of the heavy-hitter threshold (γ − ζ)w
  (default ``e/b``, the Count-Min width rule ``b = ⌈e/ζ⌉``; the paper leaves it open, erratum 9).

Windowing (docs/sliding-window.md has the proofs):

* ``COUNT`` — the paper's count-based window of the last w items. Positions are item indices 1, 2, …
  and the substream grid cuts the stream by position. Neighbours: streams of equal length that
  differ by **replacing** one item at one position (DPSW §3.1; Lemma 4.1 gives ρ-zCDP). Adding or
  removing an item shifts every later position across the grid and is NOT covered.
* ``EVENT_TIME`` — an extension: positions are integer event times, the window is the last w time
  units, and the grid cuts time, not the data. Adding or removing one event changes one substream's
  PCMSs by a counters each (ρ_all/2-zCDP, ρ_all = :attr:`DPSWParams.substream_rho` < ρ); changing
  one event's item and/or time is a removal plus an addition (ρ_all within one substream; in two
  substreams ρ_all/2 + ρ_all/2, the Rényi divergences of independent noise adding up): ≤ ρ.
* Shards: :func:`shard_relation` (count windows: a replacement the partitioner routes to the same
  shard, the project's count-epoch relation).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from privstream.accounting.budget import dp_to_zcdp, exact_value, zcdp_to_dp
from privstream.privacy import SAME_SHARD_REPLACEMENT, Change, Scope, Unit
from privstream.sketches.hashing import MAX_WIDTH
from privstream.validation import check_int
from privstream.window.checkpoints import (
    budget_split,
    checkpoint_list,
    substream_total,
    unit_fraction,
    validate_checkpoints,
)


class Windowing(enum.Enum):
    """What a position is: an item's index (count-based window) or an event time (extension)."""

    COUNT = "count"
    EVENT_TIME = "event-time"

    @property
    def code(self) -> int:
        return list(Windowing).index(self)


@dataclass(frozen=True)
class DPSWParams:
    """Validated public parameters (build with :func:`dpsw_params`)."""

    window: int  #: w: items (COUNT) or time units (EVENT_TIME)
    substream: int  #: W: the substream length, 1 <= W <= w
    checkpoints: tuple[int, ...]  #: I, decreasing from W to 1
    budget_ratio: Fraction  #: q of the budget split (the paper's α)
    rho: Fraction  #: total ρ (zCDP) of the structure at all times
    depth: int  #: a: rows
    width: int  #: b: counters per row
    seed: int  #: the public hash seed
    zeta: Fraction  #: ζ of the heavy-hitter threshold (γ − ζ)·w
    windowing: Windowing = Windowing.COUNT
    origin: int = 1  #: the first position (1 for COUNT, 0 by default for EVENT_TIME): the grid's start
    epsilon: Fraction | None = None  #: the (ε, δ) ρ was derived from, if any
    delta: Fraction | None = None

    @property
    def budgets(self) -> tuple[Fraction, ...]:
        """(ρ_1, …, ρ_|I|): the whole-substream PCMS, then each prefix/suffix pair's PCMSs."""
        return budget_split(self.rho, self.budget_ratio, len(self.checkpoints))

    @property
    def substream_rho(self) -> Fraction:
        """ρ_1 + 2Σ_{j>=2} ρ_j = ρ·[1 − (1−q)²q^{|I|−1}] < ρ (Lemma 4.1)."""
        return substream_total(self.budgets)

    @property
    def max_live_substreams(self) -> int:
        """⌈w/W⌉ + 1: substreams that can overlap a window (Lemma 4.2's count)."""
        return -(-self.window // self.substream) + 1

    @property
    def max_held_substreams(self) -> int:
        """Substreams a sketch ever holds: :attr:`max_live_substreams`, plus one for EVENT_TIME
        (an event may run one substream ahead of the clock, :attr:`DPSWSketch.horizon`)."""
        return self.max_live_substreams + (self.windowing is Windowing.EVENT_TIME)

    def guarantee(self) -> WindowGuarantee:
        return window_guarantee(self)


@dataclass(frozen=True)
class WindowGuarantee:
    """What every answer of the sketch, at all times and for any number of queries, guarantees."""

    rho: Fraction  #: zCDP of the whole structure (Lemma 4.1)
    epsilon: float | None  #: (ε, δ) by DPSW Thm 3.2, if δ was given
    delta: float | None
    unit: Unit
    change: Change
    scope: Scope
    neighbour_relation: str
    theorem: str
    #: False for a sketch with injected noise (tests): then nothing above is guaranteed
    private: bool = True


def check_gamma(gamma: object, zeta: Fraction) -> Fraction:
    """γ of a heavy-hitter query as an exact fraction, refused (ValueError naming ``gamma`` and
    ``zeta``) unless ζ < γ < 1: the threshold (γ − ζ)·w of Alg. 3 line 8 (Lemma 4.3, Thm 4.4) is
    then positive; with γ <= ζ it would be <= 0 and report every item of the domain."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | Fraction) or not 0 < gamma < 1:
        raise ValueError(f"gamma: must be a number in (0, 1), got {gamma!r}")
    g = Fraction(repr(gamma)) if isinstance(gamma, float) else Fraction(gamma)
    if g <= zeta:
        raise ValueError(
            f"gamma: must exceed zeta = {float(zeta):.4g} (the threshold (gamma - zeta)*w of DPSW Alg. 3 "
            f"would be <= 0 and report the whole domain); got gamma {gamma!r}: raise gamma, or lower zeta "
            "(give zeta, or a larger width: the default zeta is e/width)"
        )
    return g


def window_guarantee(p: DPSWParams) -> WindowGuarantee:
    """The guarantee of DPSW Lemma 4.1 / Thm 4.4 for the windowing of ``p``. The relation is stated
    here, not through :meth:`privstream.privacy.NeighbourRelation.render`, whose replacement text
    claims a calibration by group privacy, whereas the PCMS noise is calibrated for a replacement
    directly (Δ2 = √(2a))."""
    dp = zcdp_to_dp(float(p.rho), float(p.delta)) if p.delta is not None else None
    if p.windowing is Windowing.COUNT:
        change = Change.REPLACE
        text = (
            "replace one event at a fixed position of one stream by another; stream lengths public "
            "(DPSW §3.1; count-based window of the last w items; adding or removing an event is not "
            "covered: it shifts every later position across the substream grid)"
        )
    else:
        change = Change.ADD_REMOVE
        text = (
            "add/remove one event at any event time of one stream (rho/2), or change one event's item "
            "and/or event time (rho); substreams and checkpoints cut event time on a fixed public grid, "
            "and the window advances only on public punctuations, never on the data"
        )
    return WindowGuarantee(
        rho=p.rho,
        epsilon=None if dp is None else dp.epsilon,
        delta=None if dp is None else dp.delta,
        unit=Unit.EVENT,
        change=change,
        scope=Scope.ONE_STREAM,
        neighbour_relation=text,
        theorem="DPSW-Sketch Lemma 4.1 (zCDP), Thm 3.2 ((eps, delta)), discrete Gaussian per CKS 2020 Thm 4",
    )


def shard_relation(p: DPSWParams) -> str:
    """The relation for sketches of the shards of a data-independent partition (one sketch per
    shard, estimates summed): docs/sliding-window.md, "Shards"."""
    if p.windowing is Windowing.COUNT:
        return (
            f"replace one event at a fixed position of {SAME_SHARD_REPLACEMENT}; shard stream lengths "
            "public; rho per shard and rho for all shards together (parallel composition); a replacement "
            "routed to another shard removes an event from one shard and adds one to another, shifting "
            "every later position in both, and is not covered; each shard's window is its own last w "
            "items, not the last w items of the whole stream"
        )
    return (
        "add/remove one event in one shard (rho_all/2, rho_all = rho*[1 - (1-q)^2 q^(|I|-1)] < rho), or "
        "change one event's item and/or time, in one shard or moving it between two (rho_all/2 + "
        "rho_all/2 = rho_all <= rho); shards share the window only when their clocks are advanced to "
        "the same public punctuations"
    )


def _positive_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ValueError(f"{name}: must be a finite number > 0, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    return v


def rho_from(epsilon: float, delta: float | Fraction) -> Fraction:
    """DPSW Eq. (1): the ρ whose Thm 3.2 conversion gives (ε, δ), as an exact rational that never
    exceeds ε after conversion (the float is stepped down if rounding pushed it over)."""
    eps = _positive_real("epsilon", epsilon)
    if isinstance(delta, bool) or not isinstance(delta, int | float | Fraction) or not 0 < float(delta) < 1:
        raise ValueError(f"delta: must be a number in (0, 1), got {delta!r}")
    rho = dp_to_zcdp(eps, float(delta)).rho
    while zcdp_to_dp(rho, float(delta)).epsilon > eps:
        rho = math.nextafter(rho, 0.0)
    return Fraction(rho)  # the float checked above, exactly (not its shortest repr, which may differ)


def dpsw_params(
    *,
    window: int,
    depth: int,
    width: int,
    substream: int | None = None,
    beta: float | None = None,
    alpha: float | Fraction | None = None,
    checkpoints: Sequence[int] | None = None,
    budget_ratio: float | Fraction | None = None,
    epsilon: float | None = None,
    delta: float | Fraction | None = None,
    rho: float | Fraction | None = None,
    seed: int = 0,
    zeta: float | Fraction | None = None,
    windowing: Windowing = Windowing.COUNT,
    origin: int | None = None,
) -> DPSWParams:
    """Validate and derive the parameters (module docstring). Give the substream length as
    ``substream`` or ``beta``; the checkpoints as ``alpha`` or ``checkpoints``; the budget as
    ``(epsilon, delta)`` or ``rho``."""
    w = check_int("window", window, allow_numpy=True, type_error=ValueError)
    a = check_int("depth", depth, allow_numpy=True, type_error=ValueError)
    b = check_int("width", width, below=MAX_WIDTH + 1, allow_numpy=True, type_error=ValueError)
    s = check_int("seed", seed, minimum=0, below=2**64, allow_numpy=True, type_error=ValueError)
    if not isinstance(windowing, Windowing):
        raise ValueError(f"windowing: must be a Windowing, got {windowing!r}")
    if (substream is None) == (beta is None):
        raise ValueError("substream: give exactly one of substream (W) and beta (W = ceil(window**beta))")
    if beta is not None:
        length = math.ceil(w ** float(unit_fraction("beta", beta)))
    else:
        length = check_int("substream", substream, allow_numpy=True, type_error=ValueError)
    if length > w:
        raise ValueError(f"substream: the substream length must be <= window {w}, got {length}")
    if (alpha is None) == (checkpoints is None):
        raise ValueError("checkpoints: give exactly one of alpha (Alg. 2's smooth factor) and checkpoints")
    if checkpoints is not None:
        points = validate_checkpoints(list(checkpoints), length)
    else:
        points = checkpoint_list(length, alpha)  # type: ignore[arg-type]
    if budget_ratio is None:
        if alpha is None:
            raise ValueError("budget_ratio: required with explicit checkpoints (the paper's alpha)")
        budget_ratio = alpha
    ratio = unit_fraction("budget_ratio", budget_ratio)
    eps_frac: Fraction | None = None
    delta_frac: Fraction | None = None
    if rho is not None:
        if epsilon is not None:
            raise ValueError("rho: give either rho or (epsilon, delta), not both")
        total = exact_value(_positive_real("rho", rho)) if not isinstance(rho, Fraction) else rho
        if total <= 0:
            raise ValueError(f"rho: must be > 0, got {rho}")
        if delta is not None:
            delta_frac = unit_fraction("delta", delta)
    else:
        if epsilon is None or delta is None:
            raise ValueError("epsilon: give (epsilon, delta) or rho")
        total = rho_from(epsilon, delta)
        eps_frac, delta_frac = exact_value(epsilon), unit_fraction("delta", delta)
    if zeta is None:
        zeta_frac = exact_value(math.e / b)
        if zeta_frac >= 1:
            raise ValueError(
                f"zeta: the default e/width = {float(zeta_frac):.3f} is >= 1 for width {b} (no gamma < 1 "
                "exceeds it, Alg. 3's threshold (gamma - zeta)*w); give zeta in [0, 1) or a width >= 3"
            )
    else:
        zeta_frac = exact_value(zeta) if not isinstance(zeta, Fraction) else zeta
        if not 0 <= zeta_frac < 1:
            raise ValueError(f"zeta: must lie in [0, 1), got {zeta}")
    if origin is None:
        start = 1 if windowing is Windowing.COUNT else 0
    else:
        if windowing is Windowing.COUNT and origin != 1:
            raise ValueError("origin: count-based positions are item indices starting at 1")
        start = check_int(
            "origin", origin, minimum=-(2**62), below=2**62, allow_numpy=True, type_error=ValueError
        )
    return DPSWParams(
        window=w,
        substream=length,
        checkpoints=points,
        budget_ratio=ratio,
        rho=total,
        depth=a,
        width=b,
        seed=s,
        zeta=zeta_frac,
        windowing=windowing,
        origin=start,
        epsilon=eps_frac,
        delta=delta_frac,
    )
