"""Versioned binary format of a DPSW-Sketch's state, in the core's envelope.

The envelope is :mod:`privstream.sketches.binary_format`'s (magic, format version, type byte
:data:`DPSW_STATE_CODE` from the state-record range 200..255, u64 parameters, payload, CRC-32).
A DPSW-Sketch is not a mergeable stream sketch, so it is not in the sketch registry.

Parameters (u64): layout version (2), windowing code, w, W, a, b, hash seed, |I|, live substreams,
next substream index, flags (bit 0: a noise key is stored; bit 1: the noise was injected, an
injected sampler or a seeded rng, tests only: :attr:`DPSWSketch.injected_noise`, so the restored
sketch still states NO DP GUARANTEE; never both bits, a keyed sketch's noise is never injected).
Payload (:func:`privstream.continual.pcc.pack_blobs`): ``<qqqq`` origin, clock, items, insertions;
I as int64s; ρ, q, ζ, ε, δ as exact fractions in text (ε, δ empty when not given); the noise key
(or empty); the keyed-noise version (ASCII, e.g. ``v3``: :data:`privstream.window.dpsw.NOISE_VERSION`
of the code that drew the noise, which :meth:`DPSWSketch.rekey` needs to regenerate it); then one
blob per live substream: ``<qB`` index and completeness, then its (K, a, b)
int64 tables, K = |I| if complete else 2|I| − 1.

Layout 1 (before the noise version was stored; it was drawn as v1 or v2) is refused: its noise
cannot be regenerated, so such a state cannot be re-keyed; start afresh.

SECRET: the bytes hold noisy counters of PCMSs still under construction (not releasable) and the
noise key; protect them like the raw stream.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from fractions import Fraction

import numpy as np

from privstream.continual.pcc import pack_blobs, unpack_blobs
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain
from privstream.noise.rng import RandomSource
from privstream.sketches.binary_format import SketchFormatError, decode_envelope, encode_envelope, require
from privstream.window.dpsw import DPSWSketch, Substream
from privstream.window.params import Windowing, dpsw_params
from privstream.window.pcms import NoiseSampler

#: Type byte of a DPSW-Sketch state record (state-record range; 230..239 continual, 240..241 operators).
DPSW_STATE_CODE = 245
LAYOUT_VERSION = 2
_BLOBS = 9  #: blobs before the substreams' (head, I, rho, q, zeta, eps, delta, key, noise version)
_NOISE_VERSION = re.compile(rb"v[0-9]{1,6}")
_HEAD = struct.Struct("<qqqq")
_SUB = struct.Struct("<qB")
_FLAG_KEY = 1
_FLAG_INJECTED = 2


def _text(value: Fraction | None) -> bytes:
    return b"" if value is None else f"{value.numerator}/{value.denominator}".encode()


def _fraction(blob: bytes, name: str, *, optional: bool = False) -> Fraction | None:
    if not blob and optional:
        return None
    try:
        return Fraction(blob.decode("ascii"))
    except (ValueError, ZeroDivisionError, UnicodeDecodeError):
        raise SketchFormatError(f"bad {name} in DPSW state") from None


def encode_state(sketch: DPSWSketch) -> bytes:
    p = sketch.params
    subs = list(sketch.substreams())
    key = sketch.noise_key
    params = [
        LAYOUT_VERSION,
        p.windowing.code,
        p.window,
        p.substream,
        p.depth,
        p.width,
        p.seed,
        len(p.checkpoints),
        len(subs),
        sketch._next,
        (_FLAG_KEY if key is not None else 0) | (_FLAG_INJECTED if sketch.injected_noise else 0),
    ]
    blobs = [
        _HEAD.pack(p.origin, sketch.clock, sketch.items, sketch.insertions),
        np.array(p.checkpoints, dtype="<i8").tobytes(),
        _text(p.rho),
        _text(p.budget_ratio),
        _text(p.zeta),
        _text(p.epsilon),
        _text(p.delta),
        key or b"",
        sketch.noise_version.encode("ascii"),
    ]
    blobs += [
        _SUB.pack(s.index, int(s.complete)) + s.tables.astype("<i8", copy=False).tobytes() for s in subs
    ]
    return encode_envelope(DPSW_STATE_CODE, params, pack_blobs(blobs))


def decode_state(
    data: bytes,
    *,
    domain: Domain | DeclaredDomain | None = None,
    rng: RandomSource | None = None,
    noise: NoiseSampler | None = None,
) -> DPSWSketch:
    """Inverse of :func:`encode_state`; SketchFormatError (a ValueError) on corrupt bytes or on a
    state no DPSW-Sketch can reach."""
    head, payload = decode_envelope(data, DPSW_STATE_CODE, 11, "DPSW state")
    version, wcode, window, length, depth, width, seed, n_points, n_subs, next_index, flags = head
    require(
        version == LAYOUT_VERSION,
        f"unsupported DPSW state layout {version} (this code reads {LAYOUT_VERSION}; a layout-1 state, "
        "written before the noise version was stored, cannot be resumed: start afresh)",
    )
    require(wcode < len(Windowing) and flags in (0, _FLAG_KEY, _FLAG_INJECTED), "bad DPSW state header")
    blobs = unpack_blobs(payload)
    require(len(blobs) == _BLOBS + n_subs, "DPSW state: wrong number of blobs")
    require(_NOISE_VERSION.fullmatch(blobs[8]) is not None, "DPSW state: bad noise version")
    require(len(blobs[0]) == _HEAD.size and len(blobs[1]) == 8 * n_points, "DPSW state: bad header blobs")
    origin, clock, items, insertions = _HEAD.unpack(blobs[0])
    points = np.frombuffer(blobs[1], dtype="<i8").tolist()
    eps, delta = _fraction(blobs[5], "epsilon", optional=True), _fraction(blobs[6], "delta", optional=True)
    try:
        params = dpsw_params(
            window=window,
            substream=length,
            checkpoints=points,
            budget_ratio=_fraction(blobs[3], "budget_ratio"),
            rho=_fraction(blobs[2], "rho"),
            delta=delta,
            depth=depth,
            width=width,
            seed=seed,
            zeta=_fraction(blobs[4], "zeta"),
            windowing=list(Windowing)[wcode],
            origin=origin,
        )
    except ValueError as exc:
        raise SketchFormatError(f"bad DPSW parameters: {exc}") from None
    params = dataclasses.replace(params, epsilon=eps)
    key = blobs[7] or None
    require(
        (key is not None) == bool(flags & _FLAG_KEY), "DPSW state: noise key presence disagrees with flags"
    )
    try:
        sketch = DPSWSketch(params, domain=domain, rng=rng, noise_key=key, noise=noise)
    except ValueError as exc:
        raise SketchFormatError(f"bad DPSW state: {exc}") from None
    n = len(points)
    subs: list[Substream] = []
    sketch.noise_version = blobs[8].decode("ascii")
    for blob in blobs[_BLOBS:]:
        require(len(blob) >= _SUB.size, "DPSW state: truncated substream")
        index, complete = _SUB.unpack_from(blob)
        require(complete <= 1 and 0 <= index < next_index, "DPSW state: bad substream header")
        k = n if complete else 2 * n - 1
        require(len(blob) - _SUB.size == 8 * k * depth * width, "DPSW state: substream size mismatch")
        tables = np.frombuffer(blob, dtype="<i8", offset=_SUB.size).reshape(k, depth, width).astype(np.int64)
        subs.append(Substream(index, tables, bool(complete)))
    require(origin - 1 <= clock < 2**62, "DPSW state: clock before the origin")
    _require_reachable(sketch, clock, next_index, items, insertions, subs)
    sketch._restore(next_index, clock, items, insertions, subs, injected=bool(flags & _FLAG_INJECTED))
    return sketch


def _require_reachable(
    sketch: DPSWSketch, clock: int, next_index: int, items: int, insertions: int, subs: list[Substream]
) -> None:
    """Accept exactly the states maintenance can reach at ``clock``: the live substreams are every
    index from the window's oldest substream to ``next_index − 1`` (COUNT: the clock's substream;
    EVENT_TIME: at most one beyond it, :attr:`DPSWSketch.horizon`), each complete iff it ends by the
    clock; the item and insertion counters agree (a state failing here would otherwise fail with a
    KeyError at query time, or hold more substreams than maintenance ever keeps)."""
    p = sketch.params
    count = p.windowing is Windowing.COUNT
    started = clock >= p.origin
    current = sketch.substream_of(clock)  # −1 before the origin
    oldest = sketch.substream_of(sketch.window_start(clock))
    if count:
        ok_next = next_index == (current + 1 if started else 0)
    else:
        ok_next = (current + 1 if started else 0) <= next_index <= current + 2
    require(ok_next, f"DPSW state: next substream {next_index} unreachable at clock {clock}")
    indices = [s.index for s in subs]
    require(
        indices == list(range(oldest, next_index)),
        f"DPSW state: live substreams {indices[:3]}... are not those of clock {clock} "
        f"({oldest}..{next_index - 1})",
    )
    length = p.substream
    require(
        all(s.complete == (sketch.substream_start(s.index) + length - 1 <= clock) for s in subs),
        "DPSW state: a substream's completeness disagrees with the clock",
    )
    n = len(p.checkpoints)
    require(
        0 <= items <= insertions <= (2 * n - 1) * items and (not count or items == clock - p.origin + 1),
        "DPSW state: bad counters",
    )
