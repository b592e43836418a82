"""PCC's per-block release parameters, recorded where the noise is drawn, against Chan–Li–Shi–Xu.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py pcc``). The existing PCC
tests compare a release with :func:`privstream.continual.pcc.pmg_release` itself; a PCC that
noised a block with a smaller scale, fewer counters, another clamp, or the counts of the wrong
items would pass them. Here the call into the exact sampler
(:func:`privstream.mechanisms.domain_topk.noisy_top_k`) is recorded for every block and compared
with the paper's formulas written out below (§3.3 and Alg. 1):

* ℓ = log2(4/λ), W_0 = ⌈λW/4⌉, W_i = 2^i·W_0; block j of level i covers steps [(j−1)W_i+1, jW_i];
* ε_i = ε/2^(ℓ−i+1), β_i = 2^(i+1)(ℓ+1), noise Geom(exp(ε_i/(β_i+1))): discrete Laplace of scale
  (β_i+1)/ε_i, clamped at 0 (only values >= 1 kept), the β_i largest;
* the counts noised are the Misra–Gries counts (β_i counters) of exactly the block's items.

Deterministic (no statistical assertion): the recorder either forwards to the real sampler with a
:class:`SeededRandomSource` or returns the exact counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction

import pytest

import privstream.continual.pcc as pcc_module
from privstream.continual import PCC, BlockId
from privstream.continual.blocks import PCC_STATE_CODE
from privstream.continual.pcc import _BLOCK_HEAD, heavy_hitter_bar, stored_at, unpack_blobs
from privstream.mechanisms.domain_topk import noisy_top_k
from privstream.noise import SeededRandomSource
from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import decode_envelope, encode_counters, encode_envelope
from privstream.sketches.order import Dummy
from tests.test_continual_pcc import KEY, reencode, run, skewed_stream

DOMAIN = range(30)


def stream(length: int) -> list[int]:
    """A fixed skewed stream (no randomness): three hot items and a sweep of cold ones."""
    out = []
    for t in range(length):
        out.append((0, 1, 2)[t % 3] if t % 5 < 3 else (7 * t) % 30)
    return out


def misra_gries(items: list[int], counters: int) -> dict[int, int]:
    """Textbook Misra–Gries with ``counters`` counters (Chan et al. Alg. 1 lines 4–9)."""
    c: dict[int, int] = {}
    for x in items:
        if x in c:
            c[x] += 1
        elif len(c) < counters:
            c[x] = 1
        else:
            for y in list(c):
                c[y] -= 1
                if c[y] == 0:
                    del c[y]
    return c


class Recorder:
    def __init__(self, forward: bool) -> None:
        self.forward = forward
        self.calls: list[tuple[dict[object, int], int, Fraction, int | None]] = []

    def __call__(
        self,
        values: Mapping[object, int],
        domain: object,
        k: int,
        scale: Fraction,
        rng: object,
        *,
        min_value: int | None = None,
    ) -> list[tuple[object, int]]:
        self.calls.append(({x: c for x, c in values.items() if c}, k, scale, min_value))
        if self.forward:
            return noisy_top_k(values, domain, k, scale, rng, min_value=min_value)  # type: ignore[arg-type]
        return [(x, c) for x, c in values.items() if c > 0]


@pytest.mark.parametrize(
    ("epsilon", "lam", "window"), [(1, Fraction(1, 4), 64), (Fraction(3, 2), Fraction(1, 8), 96)]
)
def test_every_block_is_noised_with_the_paper_level_parameters(
    monkeypatch: pytest.MonkeyPatch, epsilon: object, lam: Fraction, window: int
) -> None:
    recorder = Recorder(forward=True)
    monkeypatch.setattr(pcc_module, "noisy_top_k", recorder)
    pcc = PCC(epsilon, lam, window, DOMAIN, rng=SeededRandomSource(5))
    ell = round(math.log2(4 / lam))
    w0 = math.ceil(lam * window / 4)
    items = stream(3 * window)
    expected = []
    for t in range(1, len(items) + 1):
        released = pcc.step(items[t - 1])
        for i in range(ell + 1):
            size = 2**i * w0
            if t % size == 0:
                j = t // size
                assert BlockId(i, j) in released
                beta = 2 ** (i + 1) * (ell + 1)
                eps_i = Fraction(epsilon) / 2 ** (ell - i + 1)  # type: ignore[arg-type]
                block_items = items[(j - 1) * size : j * size]
                expected.append((misra_gries(block_items, beta), beta, (beta + 1) / eps_i, 1))
        assert len(released) == sum(t % (2**i * w0) == 0 for i in range(ell + 1))
    assert recorder.calls == expected
    assert len(expected) > ell + 2


def test_the_estimate_is_the_positive_sum_of_the_window_cover_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the sampler returning the exact counts, 𝒫_t is Σ over the cover of the blocks' MG counts."""
    monkeypatch.setattr(pcc_module, "noisy_top_k", Recorder(forward=False))
    lam, window = Fraction(1, 4), 32
    pcc = PCC(1, lam, window, DOMAIN, rng=SeededRandomSource(1))
    ell, w0 = 4, math.ceil(lam * window / 4)
    items = stream(5 * window)
    for t in range(1, len(items) + 1):
        pcc.step(items[t - 1])
        # the dyadic cover of the active leaves, written out (Chan et al. §3.3)
        first = max(1, -(-(t - window) // w0) + 1)
        a, b = first, t // w0
        total: dict[int, int] = {}
        while a <= b:
            i = 0
            while i < ell and (a - 1) % 2 ** (i + 1) == 0 and a - 1 + 2 ** (i + 1) <= b:
                i += 1
            size, j = 2**i * w0, (a - 1) // 2**i + 1
            for x, c in misra_gries(items[(j - 1) * size : j * size], 2 ** (i + 1) * (ell + 1)).items():
                total[x] = total.get(x, 0) + c
            a += 2**i
        want = {x: v for x, v in total.items() if v > 0}
        assert pcc.estimates() == want, t
        assert pcc.estimate(0) == want.get(0, 0)


def test_stored_blocks_are_the_completed_unexpired_ones() -> None:
    pcc = PCC(1, Fraction(1, 4), 32, DOMAIN, rng=SeededRandomSource(2))
    p = pcc.params
    for t, x in enumerate(stream(200), start=1):
        pcc.step(x)
        want = sorted(
            BlockId(i, j)
            for i in range(p.levels + 1)
            for j in range(1, t // (2**i * p.w0) + 1)
            if (j - 1) * 2**i * p.w0 + 1 >= t - 32 + 1
        )
        assert stored_at(p, t) == want, t
        assert pcc.stored_blocks == want, t


def test_heavy_hitter_bar_is_theta_minus_lambda_times_the_total() -> None:
    assert heavy_hitter_bar(Fraction(1, 2), Fraction(1, 8), 64) == Fraction(3, 8) * 64
    assert heavy_hitter_bar(0.25, Fraction(1, 8), 80) == Fraction(1, 8) * 80
    for bad in (0, 1, 1.5, -0.1, True, "0.5", None):
        with pytest.raises(ValueError, match="theta"):
            heavy_hitter_bar(bad, Fraction(1, 8), 64)


def test_heavy_hitters_keep_estimates_at_or_above_the_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pcc_module, "noisy_top_k", Recorder(forward=False))
    pcc = PCC(1, Fraction(1, 4), 32, DOMAIN, rng=SeededRandomSource(3))
    for x in stream(96):
        pcc.step(x)
    est = pcc.estimates()
    for theta in (Fraction(1, 2), Fraction(5, 16), Fraction(3, 8)):
        bar = (theta - Fraction(1, 4)) * 32
        assert pcc.heavy_hitters(theta) == {x for x, v in est.items() if v >= bar}
    # one estimate exactly at the bar is kept
    top = max(est.values())
    theta = Fraction(top, 32) + Fraction(1, 4)
    if theta < 1:
        assert max(est, key=lambda x: est[x]) in pcc.heavy_hitters(theta)


def test_noiseless_is_a_bool_and_false_unless_asked() -> None:
    assert PCC(1, Fraction(1, 4), 32, DOMAIN, rng=SeededRandomSource(1)).noiseless is False
    assert PCC(1, Fraction(1, 4), 32, DOMAIN, noiseless=True).noiseless is True


def test_a_noiseless_release_keeps_only_the_declared_domain() -> None:
    """Stored items outside the declared universe are dropped (as the noisy release drops them)."""
    pcc = PCC(1, Fraction(1, 4), 32, range(5), noiseless=True)
    for t in range(64):
        pcc.step((0, 1, 9, 9, 9)[t % 5])  # 9 is the heaviest item but outside range(5)
    assert set(pcc.estimates()) == {0, 1}
    free = PCC(1, Fraction(1, 4), 32, None, noiseless=True)
    for t in range(64):
        free.step((0, 1, 9, 9, 9)[t % 5])
    assert 9 in free.estimates()


def test_estimates_are_in_the_universe_order_ints_before_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pcc_module, "noisy_top_k", Recorder(forward=False))
    universe = [3, "b", 1, "a", 2]
    pcc = PCC(1, Fraction(1, 4), 32, universe, rng=SeededRandomSource(4))
    for t in range(64):
        pcc.step(universe[t % 5])
    assert list(pcc.estimates()) == [1, 2, 3, "a", "b"]


def test_a_state_after_steps_of_several_items_restores() -> None:
    """A step of several items relaxes the restore check of the core's item count (its flag is saved)."""
    pcc = PCC(1, Fraction(1, 4), 32, DOMAIN, noise_key=bytes(range(32)))
    for t in range(21):
        pcc.step_items([t % 7, (t * 3) % 11])
    back = PCC.from_bytes(pcc.to_bytes(), DOMAIN)
    assert back.to_bytes() == pcc.to_bytes()
    assert back.estimates() == pcc.estimates()


def test_a_pcc_without_key_or_rng_draws_a_fresh_secret_key_and_releases() -> None:
    """The default (production) PCC keys its per-block noise with a fresh CSPRNG secret."""
    pcc = PCC(1, Fraction(1, 4), 32, DOMAIN)
    for x in stream(64):
        pcc.step(x)
    assert pcc.blocks_released[0] >= 1
    other = PCC(1, Fraction(1, 4), 32, DOMAIN)
    assert pcc.to_bytes() != other.to_bytes()  # two fresh 256-bit keys (equal w.p. 2^-256)


# ---- from_bytes: a restored PCC is the original (its keyed or injected source, its garbage collection),
# and every inconsistent state is refused with its own message ---------------------------------------


def _saved(seed: int = 3, steps: int = 150) -> tuple[PCC, bytes]:
    pcc = PCC(1, Fraction(1, 4), 64, range(40), noise_key=KEY)
    run(pcc, skewed_stream(seed, steps))
    return pcc, pcc.to_bytes()


def test_a_restored_pcc_expires_its_blocks_like_the_original() -> None:
    """Restored at several cuts and run on: the same releases and, at the end, the same state bytes
    (the blocks it still stores: a restored PCC must drop expired blocks from where the state
    leaves off, at every level)."""
    stream = skewed_stream(8, 700)
    reference = PCC(1, Fraction(1, 8), 100, range(40), noise_key=KEY)
    expected = run(reference, stream)
    for cut in (1, 13, 100, 257, 399):
        first = PCC(1, Fraction(1, 8), 100, range(40), noise_key=KEY)
        run(first, stream[:cut])
        restored = PCC.from_bytes(first.to_bytes(), range(40))
        assert run(restored, stream[cut:]) == expected[cut:]
        assert restored.to_bytes() == reference.to_bytes(), cut
        assert restored.memory() == reference.memory()


class CountingSource(SeededRandomSource):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.calls = 0

    def randbits(self, k: int) -> int:
        self.calls += 1
        return super().randbits(k)

    def randbelow(self, n: int) -> int:
        self.calls += 1
        return super().randbelow(n)


def test_a_source_given_to_a_keyed_or_noiseless_restore_is_not_used() -> None:
    """A keyed state draws from its key and a noiseless one draws nothing: an rng passed along is
    dropped (the constructor refuses a key or noiselessness together with a source)."""
    pcc, data = _saved()
    restored = PCC.from_bytes(data, range(40), rng=SeededRandomSource(5))
    assert restored.to_bytes() == data
    noiseless = PCC(1, Fraction(1, 4), 64, None, noiseless=True)
    run(noiseless, skewed_stream(3, 150))
    again = PCC.from_bytes(noiseless.to_bytes(), None, rng=SeededRandomSource(5))
    assert again.to_bytes() == noiseless.to_bytes()


def test_a_restored_injected_source_state_draws_from_the_source_given() -> None:
    pcc = PCC(1, Fraction(1, 4), 40, range(40), rng=SeededRandomSource(1))
    run(pcc, skewed_stream(1, 50))
    source = CountingSource(2)
    restored = PCC.from_bytes(pcc.to_bytes(), range(40), rng=source)
    run(restored, skewed_stream(2, 60))
    assert source.calls > 0


def _block(level: int, index: int, values: dict) -> bytes:
    return _BLOCK_HEAD.pack(level, index) + encode_counters(values)


def _inconsistent_states(pcc: PCC) -> dict[str, object]:
    levels = pcc.params.levels + 1
    beta0 = pcc.params.level_beta(0)
    first = 4 + levels  # the first stored block's section
    return {
        "bad PCC state header": [
            lambda p, b: ([p[0], p[1], 8, p[3]], b),  # an unknown flag
            lambda p, b: (p, b[:3]),  # fewer than the 4 fixed sections
        ],
        "wrong number of state sections": [
            lambda p, b: (p, b[:4]),  # the fixed sections only
            lambda p, b: (p, b[:-1]),
        ],
        "bad epsilon": [lambda p, b: (p, [b"1/0", *b[1:]])],
        "lam must be > 0": [lambda p, b: (p, [b[0], b"-1/4", *b[2:]])],
        "a noiseless PCC has no noise key": [lambda p, b: ([p[0], p[1], p[2] | 1, p[3]], b)],
        "noise key presence disagrees with the flags": [lambda p, b: (p, [*b[:3], b"", *b[4:]])],
        "this state used an injected source: pass rng": [
            lambda p, b: ([p[0], p[1], p[2] & ~2, p[3]], [*b[:3], b"", *b[4:]])
        ],
        "block record truncated": [lambda p, b: (p, [*b[:-1], b[-1][: _BLOCK_HEAD.size - 1]])],
        "payload truncated": [lambda p, b: (p, [*b[:-1], b[-1][: _BLOCK_HEAD.size]])],  # a head, no values
        "stored blocks must be the unexpired ones": [lambda p, b: ([*p[:3], p[3] - 1], b[:-1])],
        "lam must be a power of 1/2": [lambda p, b: (p, [b[0], b"3/16", *b[2:]])],
        "bad or repeated block id": [
            lambda p, b: ([*p[:3], p[3] + 1], [*b, b[first]]),  # a block twice
            lambda p, b: (p, [*b[:-1], _BLOCK_HEAD.pack(levels, 1) + b[-1][_BLOCK_HEAD.size :]]),
        ],
        "values must be > 0": [
            lambda p, b: (
                p,
                [*b[:first], _block(*_BLOCK_HEAD.unpack_from(b[first]), {1: 0}), *b[first + 1 :]],
            ),
            lambda p, b: (
                p,
                [*b[:first], _block(*_BLOCK_HEAD.unpack_from(b[first]), {Dummy(0): 2}), *b[first + 1 :]],
            ),
        ],
        "more than beta_i non-zeros": [
            lambda p, b: (
                p,
                [
                    *b[:first],
                    _block(0, _BLOCK_HEAD.unpack_from(b[first])[1], {i: 1 for i in range(beta0 + 1)}),
                    *b[first + 1 :],
                ],
            )
        ],
    }


def test_each_inconsistent_state_is_refused_with_its_own_message() -> None:
    """Exactly the message of the check that refuses it (anchored: a check that let the state through
    would fail a later check, with another message)."""
    pcc, data = _saved()
    assert _BLOCK_HEAD.unpack_from(unpack_sections(data)[4 + pcc.params.levels + 1])[0] == 0  # first: level 0
    for message, edits in _inconsistent_states(pcc).items():
        for edit in edits:
            with pytest.raises(SketchFormatError, match=f"^{re.escape(message)}$"):
                PCC.from_bytes(reencode(data, edit), range(40))
    with pytest.raises(SketchFormatError, match="^domain differs from the state's declared universe$"):
        PCC.from_bytes(data, range(41))
    other = encode_envelope(PCC_STATE_CODE + 1, [1, 2, 3, 4], b"")
    with pytest.raises(SketchFormatError, match="^wrong sketch type: expected PCC state, got"):
        PCC.from_bytes(other, range(40))


def unpack_sections(data: bytes) -> list[bytes]:
    _, payload = decode_envelope(data, PCC_STATE_CODE, 4, "PCC state")
    return unpack_blobs(payload)
