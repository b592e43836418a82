"""PCC: private continual heavy hitters over a sliding window of one stream (Chan, Li, Shi, Xu,
"Differentially Private Continual Monitoring of Heavy Hitters from Distributed Streams", §3.3 and
Lemma 3; PMG is their §3.2, Alg. 1).

A step takes one item (:meth:`PCC.step`, the paper's Remark 1) or any number of items
(:meth:`PCC.step_items`, see "Many items per step" below). Each level i = 0..ℓ keeps the Misra–Gries
core (β_i counters; :class:`~privstream.sketches.StandardMisraGries` is exactly the MG of PMG lines
4–9) of its under-construction block. When block (i, j) completes at t = jW_i it is released ONCE
with PMG(ε_i, β_i) (Alg. 1 lines 12–24, :func:`pmg_release`): Geom(exp(ε_i/(β_i+1))) on every element
of the declared universe, clamp at 0, keep the β_i largest (ties: uniform fresh randomness, which
depends on the noisy vector only). The noisy block vectors are kept until the block expires; the
window estimate 𝒫_t sums the blocks of :func:`~privstream.continual.blocks.window_cover` and keeps
the positive entries. 𝒫_t is post-processing of the block releases and is never re-randomised.

Privacy (Lemma 3): an item lies in one block per level and a level-i release is ε_i-DP (Lemma 1,
with Lemma 2's sensitivity β_i + 1 for replacing one item), so the whole transcript (𝒫_t)_t is
Σ_i ε_i = ε(1 − 2^−(ℓ+1)) < ε event-level DP, δ = 0, for replacing one item at one time step.

Many items per step (:meth:`PCC.step_items`). The steps must be cut by data-independent
punctuations (a clock or a public schedule, never by counting the items), and a step's items enter
every level's under-construction MG core in the order given (``update_batch``, exactly item by item).
Neighbours then differ by one event (item) replaced, added or removed within one step; the block
grid is a function of t only, so such a change touches exactly one block per level. Lemma 2's bound
(ℓ1 sensitivity of the MG counts <= β + 1 under a replacement; <= β under adding or removing one item,
Lebeda–Tětek) holds for a block of any length, so each level-i release is still ε_i-DP and the
transcript Σ_i ε_i < ε event-level DP, δ = 0, for either relation, exactly as with one item per step.
What is lost is the accuracy statement: Lemma 3 measures the error in units of W (items per window).
With many items per step its bound is read in items: a window of m items has error about λm (so
λW only if m <= W), provided the items are spread over the window roughly as the steps are (PMG's
per-block error is λ_i times the block's items, and the up to 2(W_0 − 1) boundary steps the cover
leaves out hold <= λm/2 items only if arrivals are not bursty; with one item per step both are
automatic). Thresholds and release bars that the
paper writes as λW must then use a public bound on the items per window (``window_items`` in
:mod:`privstream.continual.lazy_update`), never the true count, which is private.

Noise: a block's noise comes from a :class:`~privstream.noise.rng.KeyedRandomSource` keyed by a
256-bit secret (drawn from the OS CSPRNG unless given) with a context binding the block id, the
parameters and a SHA-256 of the block's MG core. A restored PCC that replays the same items therefore
draws identical noise for the same block, and a replay on different data draws independent noise
(never the same noise on two inputs). Tests may instead inject one :class:`RandomSource` for all
blocks. ``noiseless=True`` releases the exact MG counts: NOT PRIVATE, for tests and the paper's
noiseless baselines (DCH-LU, DCH-BF) only.

State bytes (:meth:`PCC.to_bytes`) hold the secret noise key and the exact counts of the blocks
under construction: protect them like the raw stream.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypedDict, Unpack

import numpy as np

from privstream.accounting.budget import exact_value
from privstream.continual.blocks import (
    PCC_STATE_CODE,
    BlockId,
    PccParams,
    completed_at,
    is_expired,
    pcc_params,
    window_cover,
)
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain, noisy_top_k
from privstream.noise.rng import KeyedRandomSource, RandomSource, new_noise_key
from privstream.privacy import Change, Scope, Unit
from privstream.sketches import Dummy, Item, StandardMisraGries, item_order_key, normalize_item
from privstream.sketches.binary_format import (
    SketchFormatError,
    decode_counters,
    decode_envelope,
    encode_counters,
    encode_envelope,
    require,
)

logger = logging.getLogger(__name__)

NOT_PRIVATE = "NOT PRIVATE: noiseless baseline (exact MG counts; the paper's DCH-LU/DCH-BF), for tests only"


def pmg_release(
    counts: Mapping[Item, int], epsilon: Fraction, beta: int, domain: DeclaredDomain, rng: RandomSource
) -> dict[Item, int]:
    """PMG's release (Alg. 1 lines 12–24) of an MG count vector with β counters: Geom(exp(ε/(β+1)))
    on every element of ``domain``, clamp at 0, keep the β largest positive values (Lemma 1).

    The exact fast sampler :func:`~privstream.mechanisms.domain_topk.noisy_top_k` draws noise only
    for the values that can reach the top β; its output law is the naive one's. Stored items outside
    ``domain`` are dropped before noising (a data-independent restriction)."""
    scale = (beta + 1) / Fraction(epsilon)
    return dict(noisy_top_k(counts, domain, beta, scale, rng, min_value=1))


@dataclass(frozen=True)
class ContinualGuarantee:
    """What a continual protocol's whole transcript guarantees (``epsilon`` None: not private)."""

    epsilon: Fraction | None
    delta: Fraction
    unit: Unit
    change: Change
    scope: Scope
    neighbour_relation: str
    privacy_unit: str
    theorem: str

    @property
    def private(self) -> bool:
        return self.epsilon is not None


def continual_guarantee(p: PccParams, noiseless: bool, theorem: str) -> ContinualGuarantee:
    """The event-level guarantee of a transcript that is post-processing of PCC's block releases.

    The relation is Chan et al.'s Def. 3 (replace one item at one time step); it is stated here
    rather than through :meth:`privstream.privacy.NeighbourRelation.render`, whose replacement text
    claims a calibration by group privacy, whereas PMG is calibrated for a replacement directly
    (Lemma 2: sensitivity β + 1)."""
    return ContinualGuarantee(
        epsilon=None if noiseless else p.total_epsilon,
        delta=Fraction(0),
        unit=Unit.EVENT,
        change=Change.REPLACE,
        scope=Scope.ONE_STREAM,
        neighbour_relation=(
            "replace one item at one time step of this stream (event-level, Chan et al. Def. 3); "
            "one item per step, so stream lengths are public. With several items per step "
            "(step_items; steps cut by data-independent punctuations): replace, add or remove one "
            "item of one step, the same epsilon for each (Lemma 2 for any block length)"
        ),
        privacy_unit="one event (one item at one time step) of one node's stream",
        theorem=NOT_PRIVATE if noiseless else theorem,
    )


def _fraction_text(value: Fraction) -> bytes:
    return f"{value.numerator}/{value.denominator}".encode()


def _parse_fraction(blob: bytes, what: str) -> Fraction:
    try:
        value = Fraction(blob.decode("ascii"))
    except (UnicodeDecodeError, ValueError, ZeroDivisionError):
        raise SketchFormatError(f"bad {what}") from None
    require(value > 0, f"{what} must be > 0")
    return value


def pack_blobs(blobs: Sequence[bytes]) -> bytes:
    """``u32 count``, then each blob as ``u32 length`` + bytes."""
    return struct.pack("<I", len(blobs)) + b"".join(struct.pack("<I", len(b)) + bytes(b) for b in blobs)


def unpack_blobs(payload: bytes) -> list[bytes]:
    """Inverse of :func:`pack_blobs`; SketchFormatError on truncation or trailing bytes."""
    at, out = 4, []
    require(len(payload) >= 4, "payload truncated")
    (count,) = struct.unpack_from("<I", payload)
    for _ in range(count):
        require(len(payload) >= at + 4, "payload truncated")
        (size,) = struct.unpack_from("<I", payload, at)
        require(len(payload) >= at + 4 + size, "payload truncated")
        out.append(payload[at + 4 : at + 4 + size])
        at += 4 + size
    require(at == len(payload), "trailing bytes in payload")
    return out


def domain_fingerprint(domain: Domain | None) -> bytes:
    """A digest of the declared universe (public), bound into the state and the noise context."""
    if domain is None:
        return b"none"
    if isinstance(domain, range):
        return f"range({domain.start},{domain.stop},{domain.step})".encode()
    digest = hashlib.sha256()
    for x in domain:
        digest.update(repr(normalize_item(x)).encode() + b"\x00")
    return digest.hexdigest().encode()


class NoiseOptions(TypedDict, total=False):
    """How a PCC draws its noise (keyword arguments of :class:`PCC` and of the protocols on it)."""

    noise_key: bytes | None  #: the secret of the per-block keyed noise (default: fresh, CSPRNG)
    rng: RandomSource | None  #: TESTS ONLY: one injected source for every block
    noiseless: bool  #: NOT PRIVATE: exact MG counts (tests, the DCH baselines)


_FLAG_NOISELESS, _FLAG_KEYED, _FLAG_MANY = 1, 2, 4
_BLOCK_HEAD = struct.Struct("<IQ")


class PCC:
    """PCC(ε, λ) on one stream with windows of W steps (module docstring; Lemma 3).

    ``domain``: the declared universe U (required unless ``noiseless``). ``noise_key``: the secret
    of the per-block keyed noise (default: fresh from the OS CSPRNG). ``rng``: TESTS ONLY, one
    injected source for every block instead of the keyed sources. ``noiseless``: NOT PRIVATE (tests
    and the noiseless DCH baselines)."""

    def __init__(
        self,
        epsilon: object,
        lam: object,
        window: object,
        domain: Domain | None = None,
        **options: Unpack[NoiseOptions],
    ) -> None:
        noise_key, rng = options.get("noise_key"), options.get("rng")
        noiseless = options.get("noiseless", False)
        self.params = pcc_params(epsilon, lam, window)
        if domain is None and not noiseless:
            raise ValueError("domain: PCC adds noise to every element of a declared universe; give one")
        if noiseless and (noise_key is not None or rng is not None):
            raise ValueError("noiseless: a noiseless PCC draws no noise; give no noise_key or rng")
        if rng is not None and noise_key is not None:
            raise ValueError("rng: give either an injected source (tests) or a noise_key, not both")
        self._domain = None if domain is None else declared_domain(domain)
        self._fingerprint = domain_fingerprint(domain)
        self._noiseless = noiseless
        self._rng = rng
        self._key = None if noiseless or rng is not None else noise_key
        if self._key is None and not noiseless and rng is None:
            self._key = new_noise_key()
        if self._key is not None and (
            not isinstance(self._key, bytes) or len(self._key) < KeyedRandomSource.MIN_KEY_BYTES
        ):
            raise ValueError(
                f"noise_key: must be at least {KeyedRandomSource.MIN_KEY_BYTES} secret random bytes"
            )
        self._t = 0
        self._many = False  # whether some step had != 1 items (relaxes the restore check)
        self._cores: list[StandardMisraGries | None] = [None] * (self.params.levels + 1)
        self._store: dict[BlockId, dict[Item, int]] = {}
        self._lowest = [1] * (self.params.levels + 1)  # per level: the oldest index maybe stored
        self._cache: tuple[tuple[BlockId, ...], dict[Item, int]] | None = None

    # ---------------------------------------------------------------- stepping
    @property
    def t(self) -> int:
        """The last time step processed (0 before the first)."""
        return self._t

    def step(self, item: object) -> list[BlockId]:
        """Advance one time step with its one item (Remark 1); returns the blocks released at this
        step. Exactly ``step_items([item])``."""
        return self.step_items([item])

    def step_items(self, items: Sequence[object] | np.ndarray) -> list[BlockId]:
        """Advance one time step whose items (zero or more) enter every level's under-construction
        MG core in the given order; returns the blocks released at this step (completion and garbage
        collection depend on t only, as in :meth:`step`). The steps must be cut by data-independent
        punctuations; the privacy guarantee is then unchanged (module docstring, "Many items per
        step"). Items are validated before any state changes."""
        xs = [normalize_item(x) for x in items]
        # one int64 array for every level's core when all items are ints (its inlined MG loop)
        feed: list[Item] | np.ndarray = (
            np.array(xs, dtype=np.int64) if xs and all(type(x) is int for x in xs) else xs
        )
        p = self.params
        if len(xs) != 1:
            self._many = True
        self._t = t = self._t + 1
        for i, core in enumerate(self._cores):
            if core is None:  # t = (j−1)W_i + 1: block j of level i starts
                core = self._cores[i] = StandardMisraGries(p.level_beta(i))
            core.update_batch(feed)  # StandardMisraGries: exactly item by item
        released = completed_at(p, t)
        for block in released:
            core = self._cores[block.level]
            assert core is not None
            self._store[block] = self._release(block, core)
            self._cores[block.level] = None
        self._collect(t)
        return released

    def _collect(self, t: int) -> None:
        """Garbage collection: drop every stored block whose first step has left the window.
        Per level, the stored indices are contiguous and expire oldest first."""
        p = self.params
        for i, lowest in enumerate(self._lowest):
            block = BlockId(i, lowest)
            while block in self._store and is_expired(p, block, t):
                del self._store[block]
                block = BlockId(i, block.index + 1)
            self._lowest[i] = block.index

    def _release(self, block: BlockId, core: StandardMisraGries) -> dict[Item, int]:
        """The block's released vector, drawn once, at its completion."""
        counts = core.counters()
        if self._noiseless:
            dom = self._domain
            return {x: c for x, c in counts.items() if dom is None or dom.position(x) is not None}
        assert self._domain is not None
        p = self.params
        values = pmg_release(
            counts,
            p.level_epsilon(block.level),
            p.level_beta(block.level),
            self._domain,
            self._block_rng(block, core),
        )
        logger.debug("PCC released block %s with %d non-zeros", block, len(values))
        return values

    def _block_rng(self, block: BlockId, core: StandardMisraGries) -> RandomSource:
        if self._rng is not None:  # tests only
            return self._rng
        assert self._key is not None
        p = self.params
        context = (
            f"privstream PCC block level {block.level} index {block.index} epsilon {p.epsilon} "
            f"lambda {p.lam} window {p.window} domain {self._fingerprint.decode()} "
            f"core {hashlib.sha256(core.to_bytes()).hexdigest()}"
        )
        return KeyedRandomSource(self._key, context)

    # ---------------------------------------------------------------- queries
    def estimates(self) -> dict[Item, int]:
        """𝒫_t: Σ over the window cover of the released block vectors, positive entries only, in
        the universe's order (a fresh dict)."""
        cover = tuple(window_cover(self.params, self._t))
        if self._cache is None or self._cache[0] != cover:
            total: dict[Item, int] = {}
            for block in cover:
                for x, v in self._store[block].items():
                    total[x] = total.get(x, 0) + v
            keys = sorted((x for x, v in total.items() if v > 0), key=item_order_key)
            self._cache = cover, {x: total[x] for x in keys}
        return dict(self._cache[1])

    def estimate(self, item: object) -> int:
        """𝒫_t(x) (0 if x is not listed)."""
        return self.estimates().get(normalize_item(item), 0)

    def heavy_hitters(self, theta: object) -> set[Item]:
        """{x : 𝒫_t(x) >= (θ − λ)W} with the rounded λ: a 2λ-approximation of the θ-heavy hitters
        whenever 𝒫_t is a λ-approximate count (the paper's Observation; for t >= W)."""
        bar = heavy_hitter_bar(theta, self.params.lam, self.params.window)
        return {x for x, v in self.estimates().items() if v >= bar}

    @property
    def guarantee(self) -> ContinualGuarantee:
        """ε = Σ_i ε_i < ε, δ = 0 for the whole transcript (Lemma 3); not private if noiseless."""
        return continual_guarantee(
            self.params,
            self._noiseless,
            "Chan-Li-Shi-Xu Lemma 3 (PCC): each level-i block is PMG(eps_i, lambda_i), eps_i-DP by "
            "Lemma 1 with Lemma 2's sensitivity beta_i + 1; an item lies in one block per level; "
            "sequential composition over the levels",
        )

    @property
    def noiseless(self) -> bool:
        return self._noiseless

    @property
    def blocks_released(self) -> dict[int, int]:
        """Blocks released so far per level: ⌊t/W_i⌋ (each exactly once, at its completion)."""
        p = self.params
        return {i: self._t // p.level_size(i) for i in range(p.levels + 1)}

    @property
    def stored_blocks(self) -> list[BlockId]:
        """The released blocks still stored (completed and not expired), sorted."""
        return sorted(self._store)

    def block_values(self, block: BlockId) -> dict[Item, int]:
        """A stored block's released vector (KeyError if it is not stored)."""
        return dict(self._store[block])

    def memory(self) -> dict[str, int]:
        """Words held: stored blocks, their non-zeros, and the under-construction MG counters."""
        return {
            "stored_blocks": len(self._store),
            "stored_counters": sum(len(v) for v in self._store.values()),
            "core_counters": sum(len(c.counters()) for c in self._cores if c is not None),
        }

    # ---------------------------------------------------------------- bytes
    def to_bytes(self) -> bytes:
        """The checkpointable state in the core's binary envelope (type byte ``PCC_STATE_CODE``).
        SECRET: it holds the noise key and exact under-construction counts. A PCC with an injected
        ``rng`` (tests) stores no source: :meth:`from_bytes` must be given one."""
        p = self.params
        flags = (
            (_FLAG_NOISELESS if self._noiseless else 0)
            | (_FLAG_KEYED if self._key is not None else 0)
            | (_FLAG_MANY if self._many else 0)
        )
        blobs = [_fraction_text(p.epsilon), _fraction_text(p.lam), self._fingerprint, self._key or b""]
        blobs += [b"" if core is None else core.to_bytes() for core in self._cores]
        for block in sorted(self._store):
            blobs.append(_BLOCK_HEAD.pack(block.level, block.index) + encode_counters(self._store[block]))
        return encode_envelope(
            PCC_STATE_CODE, [self._t, p.window, flags, len(self._store)], pack_blobs(blobs)
        )

    @classmethod
    def from_bytes(cls, data: bytes, domain: Domain | None = None, *, rng: RandomSource | None = None) -> PCC:
        """Restore :meth:`to_bytes`; ``domain`` must be the declared universe the state was built
        with (checked against its fingerprint). SketchFormatError (a ValueError) on corrupt bytes
        or any state PCC cannot reach."""
        (t, window, flags, n_store), payload = decode_envelope(data, PCC_STATE_CODE, 4, "PCC state")
        blobs = unpack_blobs(payload)
        require(flags < 8 and len(blobs) >= 4, "bad PCC state header")
        eps, lam = _parse_fraction(blobs[0], "epsilon"), _parse_fraction(blobs[1], "lam")
        try:
            params = pcc_params(eps, lam, window)
        except ValueError as exc:
            raise SketchFormatError(f"bad PCC parameters: {exc}") from None
        require(params.lam == lam, "lam must be a power of 1/2")
        require(blobs[2] == domain_fingerprint(domain), "domain differs from the state's declared universe")
        noiseless, keyed = bool(flags & _FLAG_NOISELESS), bool(flags & _FLAG_KEYED)
        require(not (noiseless and keyed), "a noiseless PCC has no noise key")
        require(keyed == bool(blobs[3]), "noise key presence disagrees with the flags")
        require(noiseless or keyed or rng is not None, "this state used an injected source: pass rng")
        levels = params.levels + 1
        require(len(blobs) == 4 + levels + n_store, "wrong number of state sections")
        pcc = cls(
            eps,
            lam,
            window,
            domain,
            noise_key=blobs[3] if keyed else None,
            rng=None if noiseless or keyed else rng,
            noiseless=noiseless,
        )
        pcc._t = t
        pcc._many = bool(flags & _FLAG_MANY)
        for i in range(levels):
            pcc._cores[i] = _restore_core(blobs[4 + i], params, i, t, pcc._many)
        for blob in blobs[4 + levels :]:
            require(len(blob) >= _BLOCK_HEAD.size, "block record truncated")
            block = BlockId(*_BLOCK_HEAD.unpack_from(blob))
            require(block.level < levels and block not in pcc._store, "bad or repeated block id")
            values = decode_counters(blob[_BLOCK_HEAD.size :])
            require(all(type(x) is not Dummy and v > 0 for x, v in values.items()), "values must be > 0")
            require(len(values) <= params.level_beta(block.level), "more than beta_i non-zeros")
            pcc._store[block] = values  # type: ignore[assignment]
        stored = stored_at(params, t)
        require(set(pcc._store) == set(stored), "stored blocks must be the unexpired ones")
        for i in range(levels):
            pcc._lowest[i] = min(
                (b.index for b in stored if b.level == i), default=t // params.level_size(i) + 1
            )
        return pcc


def _restore_core(blob: bytes, p: PccParams, level: int, t: int, many: bool) -> StandardMisraGries | None:
    """Level ``level``'s under-construction core at ``t``: none right after a block completed. With
    one item per step so far its item count is the block's elapsed steps; otherwise (``many``) any
    count is possible."""
    size = p.level_size(level)
    if t % size == 0:
        require(blob == b"", f"level {level} has no block under construction at t={t}")
        return None
    core = StandardMisraGries.from_bytes(blob)
    require(core.k == p.level_beta(level), f"level {level} core mismatch")
    require(many or core.n == t % size, f"level {level} core mismatch")
    return core


def stored_at(p: PccParams, t: int) -> list[BlockId]:
    """The blocks PCC stores at ``t``: every completed block that has not expired (brute force over
    the blocks that can still be unexpired)."""
    out = []
    for i in range(p.levels + 1):
        size = p.level_size(i)
        first = max(1, (t - p.window) // size)
        out += [BlockId(i, j) for j in range(first, t // size + 1) if not is_expired(p, BlockId(i, j), t)]
    return sorted(out)


def heavy_hitter_bar(theta: object, lam: Fraction, total: int) -> Fraction:
    """(θ − λ)·total, the release bar of the Observation; ValueError naming ``theta`` unless
    0 < θ < 1."""
    if isinstance(theta, bool) or not isinstance(theta, int | float | Fraction) or not 0 < theta < 1:
        raise ValueError(f"theta: must be a number in (0, 1), got {theta!r}")
    return (exact_value(theta) - lam) * total
