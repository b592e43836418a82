"""DPSW-Sketch: differentially private frequencies and heavy hitters over a sliding window
(Wang, Wang, Chen, KDD 2024: Alg. 2 construction and maintenance, Alg. 3 queries, Lemma 4.1 privacy).

Structure (Alg. 2). Positions are cut into consecutive substreams of W positions on a fixed grid
from ``origin``; substream l covers ``[t_l, t_l + W − 1]`` with ``t_l = origin + l·W``. Each substream
holds PCMSs (:mod:`privstream.window.pcms`) on pre-specified ranges, from the checkpoint list I:

* prefix j: ``[t_l, v_j]`` with ``v_j = t_l + I[j] − 1`` (j = 1 is the whole substream);
* suffix j >= 2: ``[u_j, t_l + W − 1]`` with ``u_j = t_l + W − I[j]`` (erratum 1: the paper's
  ``t + I'[j]`` is one too late, leaving x undefined when the window starts at ``t_l``); suffix 1 is
  the whole-substream PCMS itself (one PCMS, ρ_1).

Every PCMS's noise is drawn once, when its substream is created (Alg. 2 lines 7–9). Only the current
substream receives items, each into the ≤ 2|I| − 1 PCMSs whose range holds its position (lines
10–11). Once a substream is complete its prefixes j >= 2 are dropped: they are never queried again.
Substreams that no longer overlap the window are deleted (line 12): at most ⌈w/W⌉ + 1 are live.

Queries (Alg. 3, corrected) at the current time T, window start ``s_W = max(T − w + 1, origin)``,
``l`` = T's substream, ``l'`` = s_W's substream:

* ``l' < l``: ``suffix_x`` of ``l'`` with x the largest j with ``u_j ≤ s_W`` (erratum 2: the paper's
  line 3 names substream l), the whole-substream PCMS of every ``l' < k < l``, and ``prefix_y`` of
  ``l`` with y the smallest j with ``v_j ≤ T``;
* ``l' = l`` (the window starts in the current substream, erratum 3): ``prefix_y`` of ``l`` only.

Every PCMS used has range end ≤ T, so no partially built PCMS is ever queried (the threat model of
Zhao et al.: queries of completed PCMSs are post-processing, so any number of queries is free).
Heavy hitters (Alg. 3 lines 6–9) enumerate a declared domain with threshold ``(γ − ζ)·w``; without
a declared domain the query is refused, never answered from the raw data.

Windowing (:class:`~privstream.window.params.Windowing`): COUNT positions are item indices (the
paper); EVENT_TIME positions are integer event times given with the items, the clock moves only by
:meth:`DPSWSketch.advance_to` (public punctuations), and empty substreams still get their noisy
PCMSs. An event may run at most one substream ahead of the clock (:attr:`DPSWSketch.horizon`; later
ones are refused before anything is allocated), so at most ⌈w/W⌉ + 2 substreams are ever held, and
the state decoder accepts exactly the states this maintenance reaches.

State bytes (:meth:`DPSWSketch.to_bytes`, :mod:`privstream.window.state`) hold noisy counters of
PCMSs still under construction, which are NOT releasable (a partial PCMS is not private under the
threat model), and the noise key if one is used: protect them like the raw stream.

Keyed noise and resuming (:meth:`DPSWSketch.rekey`): a replay of the same run under the same key
redraws identical noise (exactly-once); a *new* run resuming a state must re-key first, or every
resumed run would add the same noise to different continuations and the difference of their
answers would be the exact difference of their counts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain
from privstream.noise.rng import CryptoRandomSource, KeyedRandomSource, RandomSource
from privstream.sketches.order import Item, item_order_key
from privstream.validation import check_int
from privstream.window.kernels import add_items
from privstream.window.params import DPSWParams, WindowGuarantee, Windowing, check_gamma
from privstream.window.pcms import HashFamily, NoiseSampler, discrete_gaussian_noise, noisy_table, table_query

logger = logging.getLogger(__name__)

_DOMAIN_CHUNK = 1 << 16

#: Version of the keyed noise: the DRBG context (:meth:`DPSWSketch.noise_context`) and the sampler's
#: bit-to-sample mapping (:mod:`privstream.noise`). Bump it whenever either changes: keyed noise of
#: another version cannot be regenerated, so :meth:`DPSWSketch.rekey` refuses such a state.
NOISE_VERSION = "v3"

#: :attr:`WindowGuarantee.theorem` of a sketch whose noise does not come from the CSPRNG or a secret key.
NO_GUARANTEE = (
    "NO DP GUARANTEE: injected noise source (a noise sampler or a seeded rng), tests only; the "
    "production noise is the exact discrete Gaussian from the OS CSPRNG or a secret noise_key"
)


class Substream:
    """One substream's PCMS tables, shape (K, a, b).

    Under construction K = 2|I| − 1, laid out ``[prefix_1 … prefix_|I|, suffix_2 … suffix_|I|]``;
    once complete K = |I|: ``[whole, suffix_2 … suffix_|I|]``."""

    __slots__ = ("complete", "index", "tables")

    def __init__(self, index: int, tables: np.ndarray, complete: bool) -> None:
        self.index, self.tables, self.complete = index, tables, complete

    def prefix(self, j: int) -> int:
        """Table index of prefix j (1-based; only j = 1 once complete)."""
        if self.complete and j != 1:
            raise LookupError(f"prefix {j} of a complete substream was dropped")
        return j - 1

    def suffix(self, j: int, n: int) -> int:
        """Table index of suffix j (suffix 1 is the whole-substream PCMS)."""
        if j == 1:
            return 0
        return j - 1 if self.complete else n + j - 2


@dataclass(frozen=True)
class Used:
    """One PCMS a query reads: substream, table index, and its absolute range [start, end]."""

    substream: int
    table: int
    start: int
    end: int
    kind: str  # "prefix", "suffix" or "whole"
    j: int


class DPSWSketch:
    """DPSW-Sketch (module docstring). ``rng`` drives the noise (the CSPRNG if None); with
    ``noise_key`` (>= 32 secret bytes from the CSPRNG) substream l's noise comes from a keyed DRBG
    bound to l and the parameters, so a replay after a failure redraws identical noise. Use one key
    per sketch (per shard) and never for another stream: two streams with the same key and
    parameters would get the same noise, and the difference of their answers would be noiseless;
    a new run resuming a keyed state re-keys it first (:meth:`rekey`). ``noise`` replaces the
    sampler (tests only; not with ``noise_key``). With ``noise`` or a seeded ``rng``
    :meth:`guarantee` states no DP guarantee, and so does every sketch restored from its state."""

    def __init__(
        self,
        params: DPSWParams,
        *,
        domain: Domain | DeclaredDomain | None = None,
        rng: RandomSource | None = None,
        noise_key: bytes | None = None,
        noise: NoiseSampler | None = None,
    ) -> None:
        if not isinstance(params, DPSWParams):
            raise ValueError(f"params: must be DPSWParams (use dpsw_params), got {type(params).__name__}")
        if noise_key is not None:
            KeyedRandomSource(noise_key, "check")  # validates the key (ValueError naming it)
            if noise is not None:
                raise ValueError("noise: give either an injected sampler (tests) or a noise_key, not both")
        self.params = params
        self.domain = None if domain is None else declared_domain(domain)
        self._hashes = HashFamily(params.depth, params.width, params.seed)
        self._rng = rng
        self._noise_key = None if noise_key is None else bytes(noise_key)
        self._noise = noise
        #: the keyed-noise version recorded in the state this sketch was restored from, else
        #: :data:`NOISE_VERSION`; kept (conservatively) as restored, and :meth:`rekey` needs it equal
        self.noise_version = NOISE_VERSION
        #: set when restored from a state whose noise was injected (:attr:`injected_noise`): its tables
        #: may hold exact counts whatever noise this sketch draws later, so the flag is sticky
        self._injected_before = False
        n = len(params.checkpoints)
        self._n = n
        length = params.substream
        starts = [0] * n + [length - c for c in params.checkpoints[1:]]
        ends = [c - 1 for c in params.checkpoints] + [length - 1] * (n - 1)
        self._starts_building = np.array(starts, dtype=np.int64)
        self._ends_building = np.array(ends, dtype=np.int64)
        budgets = params.budgets
        self._table_rhos = [*budgets, *budgets[1:]]  # prefix_1..prefix_|I|, suffix_2..suffix_|I|
        self._substreams: dict[int, Substream] = {}
        self._next = 0  # the next substream index to create
        self._clock = params.origin - 1
        self.items = 0  # items ingested
        self.insertions = 0  # PCMS insertions made (<= (2|I| − 1)·items)
        self.noise_seconds = 0.0  # time spent drawing noise (for throughput reports; not state)

    # ---------------------------------------------------------------- structure
    def _sampler(self, index: int) -> NoiseSampler:
        if self._noise is not None:
            return self._noise
        if self._noise_key is not None:
            return self._keyed_sampler(self._noise_key, index)
        return discrete_gaussian_noise(self._rng)

    def _keyed_sampler(self, key: bytes, index: int) -> NoiseSampler:
        return discrete_gaussian_noise(KeyedRandomSource(key, self.noise_context(index)))

    def noise_context(self, index: int) -> str:
        """What the keyed DRBG of substream ``index`` is bound to: the noise version
        (:data:`NOISE_VERSION`), the substream and every public parameter (windowing, w, W, I, q, ρ,
        ζ, a, b, seed, origin, ε, δ), so one key under two parameter sets never gives the same noise."""
        p = self.params
        return (
            f"privstream.window.dpsw {NOISE_VERSION} substream {index} windowing {p.windowing.value} "
            f"window {p.window} "
            f"length {p.substream} checkpoints {p.checkpoints} budget_ratio {p.budget_ratio} rho {p.rho} "
            f"zeta {p.zeta} depth {p.depth} width {p.width} seed {p.seed} origin {p.origin} "
            f"epsilon {p.epsilon} delta {p.delta}"
        )

    def _noise_tables(self, sampler: NoiseSampler) -> np.ndarray:
        """The (2|I| − 1, a, b) noise of one substream under construction, one table per PCMS in
        the building layout, each of variance a/ρ_j (Alg. 2 lines 7–9, Alg. 1 ``init``)."""
        p = self.params
        began = time.perf_counter()
        tables = np.stack([noisy_table(p.depth, p.width, rho, sampler) for rho in self._table_rhos])
        self.noise_seconds += time.perf_counter() - began
        return tables

    def _create(self, index: int) -> None:
        """Alg. 2 lines 6–9: a new substream with every PCMS's noise drawn now."""
        tables = self._noise_tables(self._sampler(index))
        self._substreams[index] = Substream(index, tables, complete=False)
        logger.debug("DPSW substream %d created (%d PCMSs)", index, len(tables))

    def rekey(self, noise_key: bytes) -> None:
        """Give a restored keyed sketch a new noise key: what a *new* run resuming a state must do.

        Why: keyed noise is a function of (key, :meth:`noise_context`), so every run resuming one
        state under the state's key would add the *same* noise to the incomplete substreams (and to
        every substream created later) whatever data follows; two resumed runs with different
        continuations would then differ by exactly the difference of their counts (no noise at
        all). Re-keying, for every substream still under construction (its tables still change),
        subtracts the noise regenerated from the old key — the same keyed DRBG, context and sampler
        draw it again, exactly — and adds fresh noise from ``noise_key`` (Alg. 2 lines 7–9 redrawn;
        each table keeps its variance a/ρ_j). Complete substreams keep their tables: fixed data plus
        fixed noise, whose later reads are post-processing of what the old run already paid for.
        Later substreams draw from ``noise_key``.

        Privacy argument (Lemma 4.1 per run, then composition): after re-keying, two resumed runs
        share no noise on data that differs — their incomplete and future PCMSs carry independent
        noise, the complete ones identical data. Each run (submission) charges the ledger, so fresh
        independent noise on the same partial data of an incomplete substream is covered by
        sequential composition of the runs' charges. A failover of the *same* run keeps its key and
        must not re-key (it replays identical noise, exactly once).

        Re-keying to the current key changes nothing. Refused (ValueError, nothing changed): a
        sketch without a noise key or with an injected sampler (its old noise cannot be
        regenerated), a bad key (naming ``noise_key``), and a state whose noise version differs from
        the code's :data:`NOISE_VERSION` (its old noise cannot be regenerated: start afresh)."""
        old = self._noise_key
        if old is None or self._noise is not None:
            raise ValueError(
                "noise_key: only a keyed sketch (noise_key, no injected sampler) can be re-keyed: the "
                "old noise of its incomplete substreams must be regenerated to be replaced"
            )
        KeyedRandomSource(noise_key, "check")  # validates the new key (ValueError naming it)
        new = bytes(noise_key)
        if new == old:
            return
        if self.noise_version != NOISE_VERSION:
            raise ValueError(
                f"noise_key: this state's keyed noise has version {self.noise_version!r}, this code draws "
                f"{NOISE_VERSION!r}; its old noise cannot be regenerated to be replaced, so it cannot be "
                "resumed by a new run: start afresh (without the saved state)"
            )
        building = [s for s in self._substreams.values() if not s.complete]
        fresh = {
            s.index: s.tables
            - self._noise_tables(self._keyed_sampler(old, s.index))
            + self._noise_tables(self._keyed_sampler(new, s.index))
            for s in building
        }
        for s in building:  # only now: a failure above leaves the sketch unchanged
            s.tables = fresh[s.index]
        self._noise_key = new
        logger.info("DPSW sketch re-keyed: %d incomplete substream(s) redrawn", len(building))

    def substream_of(self, position: int) -> int:
        return (position - self.params.origin) // self.params.substream

    def substream_start(self, index: int) -> int:
        return self.params.origin + index * self.params.substream

    def window_start(self, clock: int | None = None) -> int:
        t = self._clock if clock is None else clock
        return max(t - self.params.window + 1, self.params.origin)

    def _ensure(self, index: int) -> None:
        """Create substreams up to ``index`` in order, skipping those already older than the
        window at the current clock (they could never be queried)."""
        for k in range(max(self._next, self.substream_of(self.window_start())), index + 1):
            self._create(k)  # from the window's oldest substream on: a long gap costs no loop
        self._next = max(self._next, index + 1)

    def _settle(self) -> None:
        """After the clock moved: drop the unused prefixes of complete substreams and delete the
        substreams that no longer overlap the window (Alg. 2 line 12)."""
        oldest = self.window_start()
        length = self.params.substream
        for k in list(self._substreams):
            sub = self._substreams[k]
            end = self.substream_start(k) + length - 1
            if end < oldest:
                del self._substreams[k]
                logger.debug("DPSW substream %d expired", k)
            elif not sub.complete and end <= self._clock:
                keep = [0, *range(self._n, 2 * self._n - 1)]
                sub.tables = np.ascontiguousarray(sub.tables[keep])
                sub.complete = True

    def _add(self, sub: Substream, buckets: np.ndarray, offsets: np.ndarray, lo: int, hi: int) -> None:
        if sub.complete:  # pragma: no cover - items never reach a complete substream
            raise RuntimeError("items reached a complete substream")
        self.insertions += add_items(
            sub.tables, self._starts_building, self._ends_building, offsets, buckets, lo, hi
        )
        self.items += hi - lo

    # ---------------------------------------------------------------- updates
    @property
    def clock(self) -> int:
        """T: every position <= T is complete (COUNT: the items seen so far)."""
        return self._clock

    def update(self, item: object, position: int | None = None) -> None:
        """One item (COUNT: at the next position; EVENT_TIME: at ``position`` > clock)."""
        if self.params.windowing is Windowing.COUNT:
            self.update_batch([item])
        else:
            if position is None:
                raise ValueError("position: required for event-time windowing")
            self.update_batch([item], [position])

    def update_batch(
        self, items: Sequence[object] | np.ndarray, positions: Sequence[int] | np.ndarray | None = None
    ) -> None:
        """A batch of items, exactly equivalent to :meth:`update` item by item (same PCMS counters,
        same noise draws in the same order, same clock). COUNT: the items take the next positions;
        EVENT_TIME: ``positions`` (integers, nondecreasing, all > clock and <= :attr:`horizon`, the end
        of the substream after the clock's) are their event times; a refused batch changes nothing."""
        count = len(items)
        if count == 0:
            return
        length = self.params.substream
        if self.params.windowing is Windowing.COUNT:
            if positions is not None:
                raise ValueError("positions: count-based windowing numbers the items itself")
            buckets = self._hashes.buckets(items)
            first = self._clock + 1
            done = 0
            while done < count:
                pos = first + done
                index = self.substream_of(pos)
                start = self.substream_start(index)
                take = min(count - done, start + length - pos)
                self._ensure(index)
                offsets = np.arange(pos - start, pos - start + take, dtype=np.int64)
                self._add(self._substreams[index], buckets, offsets, done, done + take)
                done += take
                self._clock = pos + take - 1
                self._settle()
            return
        if positions is None:
            raise ValueError("positions: event-time windowing needs each item's event time")
        pos_arr = self._event_times(positions, count)
        buckets = self._hashes.buckets(items)
        index_arr = (pos_arr - self.params.origin) // length
        cuts = np.flatnonzero(np.diff(index_arr)) + 1
        bounds = [0, *cuts.tolist(), count]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            index = int(index_arr[lo])
            self._ensure(index)
            offsets = pos_arr[lo:hi] - self.substream_start(index)
            self._add(self._substreams[index], buckets, offsets, lo, hi)

    @property
    def horizon(self) -> int:
        """EVENT_TIME: the last event time accepted before the next punctuation, the end of the
        substream after the clock's. Events further ahead are refused (they would make the sketch
        create, and draw noise for, every substream up to theirs: unbounded memory)."""
        return self.substream_start(self.substream_of(self._clock) + 2) - 1

    def _event_times(self, positions: Sequence[int] | np.ndarray, count: int) -> np.ndarray:
        """Validated int64 event times: integers (floats are refused, not truncated), one per item,
        nondecreasing, after the clock and not beyond :attr:`horizon`. Checked before anything is
        allocated or drawn, so a refused batch leaves the sketch unchanged."""
        raw = np.asarray(positions)
        if raw.dtype.kind not in "iu":
            raise ValueError(
                f"positions: event times must be integers, got dtype {raw.dtype} (floats are refused, not truncated)"
            )
        if raw.shape != (count,):
            raise ValueError(f"positions: need one per item ({count}), got shape {raw.shape}")
        if raw.dtype.kind == "u" and int(raw.max()) >= 2**63:
            raise ValueError("positions: event times must fit in int64")
        pos_arr = raw.astype(np.int64, copy=False)
        if int(pos_arr[0]) <= self._clock or bool(np.any(pos_arr[1:] < pos_arr[:-1])):
            raise ValueError(
                f"positions: must be nondecreasing and after the clock {self._clock} (late events are refused)"
            )
        last = int(pos_arr[-1])
        if last > self.horizon:
            raise ValueError(
                f"positions: event time {last} is more than one substream ahead of the clock {self._clock} "
                f"(horizon {self.horizon}); advance the clock with a punctuation (advance_to) first: the sketch "
                "would otherwise create and hold every substream up to that event's"
            )
        return pos_arr

    def advance_to(self, clock: int) -> None:
        """EVENT_TIME: every event with time <= ``clock`` has arrived (a public punctuation)."""
        if self.params.windowing is not Windowing.EVENT_TIME:
            raise ValueError("clock: count-based windowing advances with the items only")
        if (
            isinstance(clock, bool)
            or not isinstance(clock, int | np.integer)
            or not self._clock <= clock < 2**62
        ):
            raise ValueError(
                f"clock: must be an int >= the current clock {self._clock} (and < 2**62), got {clock!r}"
            )
        self._clock = int(clock)  # first: substreams a long gap skips entirely are never created
        if self._clock >= self.params.origin:
            self._ensure(self.substream_of(self._clock))
        self._settle()

    # ---------------------------------------------------------------- queries
    def query_plan(self) -> list[Used]:
        """The PCMSs Alg. 3 reads at the current clock (empty before the first position)."""
        t = self._clock
        p = self.params
        if t < p.origin:
            return []
        checkpoints = p.checkpoints
        n = self._n
        s_w = self.window_start()
        cur, old = self.substream_of(t), self.substream_of(s_w)
        t_cur = self.substream_start(cur)
        y = next(j for j in range(1, n + 1) if t_cur + checkpoints[j - 1] - 1 <= t)  # Alg. 3 line 2
        cur_sub = self._substreams[cur]
        used = [
            Used(
                cur,
                cur_sub.prefix(y),
                t_cur,
                t_cur + checkpoints[y - 1] - 1,
                "whole" if y == 1 else "prefix",
                y,
            )
        ]
        if old == cur:  # erratum 3: the window starts in the current substream
            return used
        t_old = self.substream_start(old)
        end_old = t_old + p.substream - 1
        x = max(j for j in range(1, n + 1) if end_old + 1 - checkpoints[j - 1] <= s_w)  # Alg. 3 line 1
        old_sub = self._substreams[old]
        out = [
            Used(
                old,
                old_sub.suffix(x, n),
                end_old + 1 - checkpoints[x - 1],
                end_old,
                "whole" if x == 1 else "suffix",
                x,
            )
        ]
        for k in range(old + 1, cur):  # Alg. 3 line 4
            start = self.substream_start(k)
            out.append(Used(k, 0, start, start + p.substream - 1, "whole", 1))
        return out + used

    def estimate_batch(self, items: Sequence[object] | np.ndarray) -> np.ndarray:
        """Alg. 3 lines 1–5: f̂_{e,T} for each item (int64; noisy, may be negative)."""
        plan = self.query_plan()
        buckets = self._hashes.buckets(items)
        total = np.zeros(buckets.shape[1], dtype=np.int64)
        for use in plan:
            total += table_query(self._substreams[use.substream].tables[use.table], buckets)
        return total

    def estimate(self, item: object) -> int:
        return int(self.estimate_batch([item])[0])

    def heavy_threshold(self, gamma: float | Fraction, *, window_items: int | None = None) -> int:
        """The least integer estimate >= (γ − ζ)·n (Alg. 3 line 8): n = w for COUNT windows (w items).
        EVENT_TIME windows span w time units, not items, so n must be ``window_items``, a PUBLIC bound
        on the items per window fixed in advance (never taken from the data, as PCC's window_items);
        without it the query is refused (ValueError naming ``window_items``). γ must exceed ζ
        (:func:`~privstream.window.params.check_gamma`): a threshold <= 0 would report every item."""
        g = check_gamma(gamma, self.params.zeta)
        if self.params.windowing is Windowing.COUNT:
            if window_items is not None and window_items != self.params.window:
                raise ValueError(
                    f"window_items: a count-based window holds exactly w = {self.params.window} items"
                )
            scale = self.params.window
        elif window_items is None:
            raise ValueError(
                "window_items: an event-time window spans w time units, not items, so the threshold "
                "(gamma - zeta)*n needs a PUBLIC bound n on the items per window (window_items=), "
                "declared in advance, never taken from the data"
            )
        else:
            scale = check_int("window_items", window_items, allow_numpy=True, type_error=ValueError)
        bar = (g - self.params.zeta) * scale
        return -((-bar.numerator) // bar.denominator)

    def heavy_hitters(
        self,
        gamma: float | Fraction,
        domain: Domain | DeclaredDomain | None = None,
        *,
        window_items: int | None = None,
    ) -> list[tuple[Item, int]]:
        """Alg. 3 lines 6–9: every item of the declared domain whose estimate is >= (γ − ζ)·n, with
        its estimate, in item order (n: :meth:`heavy_threshold`; EVENT_TIME needs ``window_items``).
        Refused (ValueError naming ``domain``) without a domain: candidates must never come from
        the raw data; refused (naming ``gamma`` and ``zeta``) unless γ > ζ."""
        bar = self.heavy_threshold(gamma, window_items=window_items)
        universe = self.domain if domain is None else declared_domain(domain)
        if universe is None:
            raise ValueError(
                "domain: the heavy-hitter query enumerates a declared item domain (DPSW Alg. 3 lines 6-9); "
                "pass domain= here or to DPSWSketch, never candidates taken from the data"
            )
        out: list[tuple[Item, int]] = []
        for chunk in _domain_chunks(universe):
            values = self.estimate_batch(chunk)
            out += [(chunk[i], int(values[i])) for i in np.flatnonzero(values >= bar).tolist()]
        return sorted(out, key=lambda p: item_order_key(p[0]))

    # ---------------------------------------------------------------- facts
    def guarantee(self) -> WindowGuarantee:
        """The parameters' guarantee (Lemma 4.1, Thm 3.2) if the noise is the production noise (the
        OS CSPRNG or a secret ``noise_key``); with an injected sampler or a seeded ``rng`` (tests)
        ``private`` is False, ε, δ are None and the theorem says NO DP GUARANTEE; so too after a
        restore of such a sketch's state (:attr:`injected_noise`)."""
        g = self.params.guarantee()
        if self.injected_noise:
            return dataclasses.replace(g, epsilon=None, delta=None, theorem=NO_GUARANTEE, private=False)
        return g

    @property
    def injected_noise(self) -> bool:
        """Whether the noise comes from an injected sampler or a non-CSPRNG ``rng`` (tests only), or
        the sketch was restored from a state whose noise was (the state stores it: flag bit 1 of
        :mod:`privstream.window.state`; restoring with the CSPRNG does not make such tables private)."""
        if self._noise is not None or self._injected_before:
            return True
        return (
            self._noise_key is None
            and self._rng is not None
            and not isinstance(self._rng, CryptoRandomSource)
        )

    @property
    def live_substreams(self) -> list[int]:
        return sorted(self._substreams)

    def live_pcms(self) -> int:
        return sum(len(s.tables) for s in self._substreams.values())

    def memory_bytes(self) -> int:
        """Bytes of counters held (int64 each)."""
        return sum(s.tables.nbytes for s in self._substreams.values())

    def substreams(self) -> Iterator[Substream]:
        for k in sorted(self._substreams):
            yield self._substreams[k]

    # ---------------------------------------------------------------- bytes (privstream.window.state)
    def to_bytes(self) -> bytes:
        from privstream.window.state import encode_state

        return encode_state(self)

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        domain: Domain | DeclaredDomain | None = None,
        rng: RandomSource | None = None,
        noise: NoiseSampler | None = None,
    ) -> DPSWSketch:
        from privstream.window.state import decode_state

        return decode_state(data, domain=domain, rng=rng, noise=noise)

    def _restore(
        self,
        next_index: int,
        clock: int,
        items: int,
        insertions: int,
        subs: list[Substream],
        *,
        injected: bool = False,
    ) -> None:
        self._next, self._clock, self.items, self.insertions = next_index, clock, items, insertions
        self._substreams = {s.index: s for s in subs}
        self._injected_before = injected

    @property
    def noise_key(self) -> bytes | None:
        return self._noise_key


def _domain_chunks(universe: DeclaredDomain) -> Iterator[list[Item]]:
    for lo in range(0, universe.size, _DOMAIN_CHUNK):
        yield [universe.item(i) for i in range(lo, min(lo + _DOMAIN_CHUNK, universe.size))]
