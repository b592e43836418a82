"""The HG-LDP server: warm-up, per-scheme Insert, public state, and the Top-k Response (paper §3–§4).

Lifecycle (docs/ldp.md): ``warm_up``/``warm_start`` fill the heavy part with raw (un-randomised) data,
``start_statistics`` fixes γ_h (BDR/CNR) and opens the statistics phase, then every report goes
through :meth:`HgLdpServer.add` and :meth:`HgLdpServer.heavy_hitters` answers queries.

A report batch (:class:`~privstream.ldp.randomiser.LdpReportBatch`: many reports against one
state) is checked once (:meth:`HgLdpServer.batch_outputs`: scheme, parameters, payload width, and
the state it names) and its outputs are then applied one by one, in order, by
:meth:`HgLdpServer.add_output` — exactly what :meth:`HgLdpServer.add` does for each of them (the
HeavyGuardian insert is sequential per report).

Insert per scheme, applied with the public state (version and digest) the client used
(:class:`StateHistory`):

* BGR (Algorithm 1): ED_Insert(y); a dropped item is not recorded (λ_l = 0).
* DSR (Algorithms 3–4): the report's mode (full / shrunk, from the client's state) selects the
  debiasing phase; ⊥ only decays the weakest cell (never replaces), an item goes through ED_Insert.
* BDR (Algorithm 6): ⊥ only decays the weakest cell; an item goes through ED_Insert.
* CNR (Algorithm 11): a heavy hit or a free heavy cell as usual; otherwise the weakest heavy cell
  decays with probability b^−C, the item goes through ED_Insert in the light part, and if the heavy
  cell reached 0 the light part's largest item is promoted with count 1 while the evicted heavy
  item takes its light cell with count 1 (the swap of the released code).

ED (paper §2.4) runs on the heavy part's *debiased* counts (App. A.7.1 partial debiasing,
:class:`~privstream.ldp.hg_debias.DebiasedHeavyPart`): the weakest cell decays with probability
b^−C for its debiased count C (exactly, also for a fractional C), loses 1, and is replaced once
C ≤ 0; the public "weakest count ≤ 1" flag uses the same counts. C is in one unit per scheme
(the released code's): the scale s of BGR's or Eq. 2's estimator, and for DSR p_s − q_s in both
modes (C = (p_s − q_s)·f̂; a full-mode hit adds (p_s − q_s)/(p − q)). Response (Algorithm 9): the heavy items'
estimates (Eq. 2, the BGR estimator or DSR's phase sum), negatives clamped to 0, sorted, top-k.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction

import numpy as np

from privstream.ldp.heavy_guardian import CellPart, decays
from privstream.ldp.hg_debias import DebiasedHeavyPart, Phase
from privstream.ldp.hg_params import EVICTION_THRESHOLD, HgLdpParams
from privstream.ldp.hg_state import PublicState, StaleStateError, StateDigestError, StateHistory
from privstream.ldp.randomiser import FrequencyAggregator, LdpReport, LdpReportBatch
from privstream.noise.rng import RandomSource, resolve
from privstream.validation import check_int

logger = logging.getLogger(__name__)

SCHEME_NAMES = {"bgr": "hg-bgr", "dsr": "hg-dsr", "bdr": "hg-bdr", "cnr": "hg-cnr"}


class InconsistentReportError(ValueError):
    """A report's output is impossible under the state version it names (e.g. ⊥ in BGR)."""

    reason = "inconsistent"


def refusal_reason(exc: ValueError) -> str:
    """The dead-letter reason of a report :meth:`HgLdpServer.add` refused (one mapping for the
    Kafka loop and the Flink operator): ``stale-state (unknown|too-old)``, ``state digest
    mismatch``, ``inconsistent`` or ``rejected`` (another scheme, other parameters, a malformed
    payload), then the message."""
    if isinstance(exc, StateDigestError):
        return f"{exc.reason}: {exc}"
    if isinstance(exc, StaleStateError):
        return f"stale-state ({exc.reason}): {exc}"
    if isinstance(exc, InconsistentReportError):
        return f"inconsistent: {exc}"
    return f"rejected: {exc}"


class HgLdpServer(FrequencyAggregator):
    """HeavyGuardian (w = 1, λ_h = k, λ_l = params.light_cells, b) with the scheme's bookkeeping."""

    def __init__(
        self,
        params: HgLdpParams,
        *,
        gamma_h: Fraction | None = None,
        max_lag: int = 1024,
        rng: RandomSource | None = None,
        run_id: bytes | None = None,
    ) -> None:
        if not isinstance(params, HgLdpParams):
            raise TypeError(f"params: expected HgLdpParams, got {type(params).__name__}")
        if gamma_h is not None and not (isinstance(gamma_h, Fraction) and 0 <= gamma_h <= 1):
            raise ValueError(f"gamma_h: must be a Fraction in [0, 1], got {gamma_h!r}")
        self.params = params
        self.scheme = SCHEME_NAMES[params.scheme]
        self._rng = resolve(rng)
        self.heavy = DebiasedHeavyPart(params.k)
        self.light = CellPart(params.light_cells or 0, params.decay_base, self._rng)
        self.history = StateHistory(max_lag, run_id)  # run_id: random unless given
        self.gamma_h = gamma_h
        self.warm_up_items = 0
        self._n = 0
        self._statistics = False
        self._canonical = LdpReport.canonical_parameters(params.public)
        self._phases: dict[str, Phase] = {}
        self.bottom = params.domain_size

    @property
    def rng(self) -> RandomSource:
        """The source of the server's ED decays (heavy and light part)."""
        return self._rng

    def use_rng(self, rng: RandomSource) -> None:
        """Draw the server's ED decays from ``rng`` from now on (e.g. the CSPRNG after a public,
        seeded warm-up; the decays act on already randomised reports and cost no privacy)."""
        self._rng = rng
        self.light._rng = rng

    # --- warm-up ------------------------------------------------------------------------------
    def warm_up(self, items: Iterable[int]) -> None:
        """Insert raw warm-up items with plain ED (paper §6.1); counts pass through unchanged."""
        self._require_phase(statistics=False)
        d = self.params.domain_size
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int | np.integer) or not 0 <= item < d:
                raise ValueError(f"items: warm-up items must be ints in 0..{d - 1}")
            self._ed_insert(int(item))
            self.warm_up_items += 1

    def warm_start(self, counts: Mapping[int, int]) -> None:
        """Fill the heavy part from an a-priori histogram (§6.1; ``gamma_h`` must then be given)."""
        self._require_phase(statistics=False)
        if len(counts) > self.params.k:
            raise ValueError(
                f"counts: at most k = {self.params.k} items fit the heavy part, got {len(counts)}"
            )
        self.heavy.load(
            {
                check_int("item", i, minimum=0, below=self.bottom): check_int("count", c)
                for i, c in counts.items()
            }
        )

    def start_statistics(self) -> PublicState:
        """End the warm-up: fix γ_h (BDR/CNR; from the warm-up if not given) and publish version 0."""
        self._require_phase(statistics=False)
        if not self.heavy.full:
            raise RuntimeError(
                f"warm-up: the heavy part must be full ({self.params.k} items) before statistics"
            )
        p = self.params
        if p.scheme in ("bdr", "cnr") and self.gamma_h is None:
            if self.warm_up_items == 0:
                raise ValueError("gamma_h: required when the heavy part was warm-started from a histogram")
            self.gamma_h = sum(map(self.heavy.count, self.heavy.items()), Fraction(0)) / self.warm_up_items
            self.gamma_h = min(self.gamma_h, Fraction(1))
        if p.scheme in ("bgr", "dsr"):
            pf, qf = p.grr_full
            self._phases["full"] = Phase("full", qf, pf - qf)
            ps, qs = p.grr_shrunk
            self._phases["shrunk"] = Phase("shrunk", qs, ps - qs)
            # ED and the τ = 1 flag see counts in one unit: BGR's only scale; for DSR the released
            # code's p_s − q_s in both modes (docs/ldp.md, choice 4).
            self.heavy.unit = (ps - qs) if p.scheme == "dsr" else (pf - qf)
        else:
            assert self.gamma_h is not None
            self._phases["split"] = Phase("eq2", p.eq2_offset(self.gamma_h), p.eq2_denominator())
            self.heavy.unit = p.eq2_denominator()
        # Counts leave the raw warm-up scale now (the code's stopWarmup), so version 0's flag
        # already uses ED's unit.
        self.heavy.begin(
            self._phases["split" if p.scheme in ("bdr", "cnr") else "shrunk" if p.scheme == "dsr" else "full"]
        )
        self._statistics = True
        logger.info(
            "hg-ldp %s: statistics start after %d warm-up items (γ_h=%s)",
            p.scheme,
            self.warm_up_items,
            self.gamma_h,
        )
        return self.public_state()

    def _require_phase(self, *, statistics: bool) -> None:
        if self._statistics != statistics:
            raise RuntimeError(
                "statistics have started" if self._statistics else "statistics have not started"
            )

    # --- public state -------------------------------------------------------------------------
    def public_state(self) -> PublicState:
        """The latest public state (a new version whenever the hot set or the flag changed since
        the last call: the caller decides when to publish, e.g. before each client reads it, or
        once per batch of reports in the Kafka server)."""
        heavy = self.heavy
        low = not heavy.full or heavy.ed_weakest()[1] <= EVICTION_THRESHOLD
        return self.history.publish(heavy.items(), low)

    # --- insert ------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self._n

    def _check_origin(self, scheme: str, parameters: tuple[tuple[str, str], ...], width: int) -> None:
        """ValueError unless reports of ``scheme`` with ``parameters`` and ``width``-byte payloads
        are this server's (in the statistics phase)."""
        self._require_phase(statistics=True)
        if scheme != self.scheme or parameters != self._canonical:
            raise ValueError("report: not produced by this scheme with these parameters")
        expected = max(1, (self.params.domain_size.bit_length() + 7) // 8)
        if width != expected:
            raise ValueError(f"report: payload must be {expected} bytes, got {width}")

    def add(self, report: LdpReport) -> None:
        """Insert one report, randomised against the state (version and digest) it names (raises
        :class:`~privstream.ldp.hg_state.StaleStateError`,
        :class:`~privstream.ldp.hg_state.StateDigestError` or :class:`InconsistentReportError`)."""
        self._require_phase(statistics=True)
        if not isinstance(report, LdpReport):
            raise ValueError("report: not produced by this scheme with these parameters")
        self._check_origin(report.scheme, report.parameters, len(report.payload))
        self.add_output(int.from_bytes(report.payload, "big"), report.state_version, report.state_digest)

    def batch_outputs(self, batch: LdpReportBatch) -> list[int]:
        """The outputs of ``batch``, in order, once it is checked as a whole: this scheme and
        parameters, the payload width, and the state it names held by this run now (else the
        errors of :meth:`add`: every report of the batch would be refused for the same reason,
        and none can change the server first). Each output then goes to :meth:`add_output` with
        the batch's version and digest."""
        if not isinstance(batch, LdpReportBatch):
            raise ValueError("batch: not an LdpReportBatch")
        self._check_origin(batch.scheme, batch.parameters, batch.width)
        self.history.get(batch.state_version, batch.state_digest)
        return batch.outputs()

    def add_batch(
        self,
        batch: LdpReportBatch,
        *,
        refused: Callable[[str], None],
        before: Callable[[], None] = lambda: None,
        applied: Callable[[], None] = lambda: None,
    ) -> None:
        """Apply ``batch`` report by report, in order (the one batch policy of the Kafka loop and the
        Flink job): :meth:`batch_outputs` first — a batch refused whole raises its ValueError, nothing
        applied — then for each output ``before()``, :meth:`add_output`, and ``applied()``, or, for a
        report refused on its own, ``refused(reason)`` with the reason ``report <i> of <count> in the
        batch: …`` (:func:`refusal_reason`), the rest of the batch still applied."""
        outputs = self.batch_outputs(batch)
        for index, y in enumerate(outputs):
            before()
            try:
                self.add_output(y, batch.state_version, batch.state_digest)
            except ValueError as exc:
                refused(f"report {index} of {batch.count} in the batch: {refusal_reason(exc)}")
                continue
            applied()

    def add_output(self, y: int, state_version: int, state_digest: bytes) -> None:
        """Insert the output ``y`` of one report of this scheme and parameters (checked by the
        caller), randomised against the state ``(state_version, state_digest)``."""
        if y > self.bottom:
            raise ValueError(f"report: output {y} outside 0..{self.bottom}")
        # Every scheme names a version it read (BGR too: its randomiser ignores the state, but a
        # report against an unknown or dropped version is refused alike; docs/ldp.md), and the
        # digest of that state: a version number of another server run or of an aborted attempt
        # names another state (hg_state), so the pair must be a state of this run.
        self.insert_output(y, self.history.get(state_version, state_digest))

    def insert_output(self, y: int, state: PublicState | None) -> None:
        """Insert a decoded output ``y`` (``d`` = ⊥) randomised against ``state`` (None for BGR)."""
        scheme = self.params.scheme
        if scheme == "bgr":
            phase = self._phases["full"]
        elif scheme == "dsr":
            assert state is not None
            phase = self._phases[state.dsr_mode]
            if state.dsr_mode == "shrunk" and y != self.bottom and y not in state.hot_items:
                raise InconsistentReportError("report: a shrunk-mode DSR output must be a hot item or ⊥")
        else:
            assert state is not None
            phase = self._phases["split"]
            if y == self.bottom and (scheme == "cnr" or state.weakest_low):
                raise InconsistentReportError("report: ⊥ is only sent by BDR while no eviction is imminent")
        if y == self.bottom and scheme == "bgr":
            raise InconsistentReportError("report: BGR never sends ⊥")
        if y == self.bottom and scheme == "dsr" and state is not None and state.dsr_mode == "full":
            raise InconsistentReportError("report: full-mode DSR never sends ⊥")
        self.heavy.report(phase)
        self._n += 1
        if y == self.bottom:
            self._decay_weakest()
        elif scheme == "cnr":
            self._insert_cnr(y)
        else:
            self._ed_insert(y)

    def _decay_weakest(self) -> tuple[int, Fraction]:
        """ED's decay step: the weakest cell loses 1 with probability b^−C, C and the 1 in ED's unit
        (:meth:`DebiasedHeavyPart.ed_weakest`); returns (item, new C)."""
        weak, count = self.heavy.ed_weakest()
        if decays(count, self.params.decay_base, self._rng):
            self.heavy.ed_decay(weak)
            count -= 1
        return weak, count

    def _ed_insert(self, y: int) -> None:
        """ED_Insert (paper §2.4) on the debiased counts; a count ≤ 0 after the decay is replaced."""
        heavy = self.heavy
        if y in heavy:
            heavy.hit(y)
        elif not heavy.full:
            heavy.replace(None, y)
        else:
            weak, count = self._decay_weakest()
            if count <= 0:
                heavy.replace(weak, y)

    def _insert_cnr(self, y: int) -> None:
        """Algorithm 11: a miss decays the weakest heavy cell and goes to the light part; when the
        heavy cell reaches 0 the light part's largest item is promoted (swapping cells)."""
        if y in self.heavy or not self.heavy.full:
            self._ed_insert(y)
            return
        weak, count = self._decay_weakest()
        light = self.light
        light.insert(y)
        if count <= 0:
            nominee, _ = max(light.cells.items(), key=lambda cell: (cell[1], -cell[0]))
            self.heavy.replace(weak, nominee)
            del light.cells[nominee]
            light.cells[weak] = 1

    # --- response ----------------------------------------------------------------------------
    def estimates_exact(self) -> dict[int, Fraction]:
        """Unclamped exact estimates of every heavy item."""
        return self.heavy.estimates()

    def heavy_hitters(self) -> list[tuple[int, float]]:
        """Algorithm 9: the heavy items by debiased estimate (clamped at 0), largest first, top-k."""
        est = [(item, max(0.0, float(value))) for item, value in self.estimates_exact().items()]
        est.sort(key=lambda pair: (-pair[1], pair[0]))
        return est[: self.params.k]

    def estimate(self) -> np.ndarray:
        """Dense estimates over the domain (0 for items not in the heavy part)."""
        out = np.zeros(self.params.domain_size, dtype=np.float64)
        for item, value in self.heavy_hitters():
            out[item] = value
        return out

    def size_bytes(self) -> int:
        """Server memory model: per heavy cell a 4-byte ID and its count as a 32-byte rational, per
        light cell a 4-byte ID and a 1-byte counter (4 bits in the paper), 64 bytes of counters and
        constants — independent of the domain size d."""
        return 40 * self.params.k + 5 * self.light.capacity + 64
