"""PCC (Chan, Li, Shi, Xu §3.3, Lemma 3): noise drawn once per block, garbage collection, the
noiseless error envelope, the guarantee, keyed per-block noise and the binary state."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import pytest

import privstream.continual.pcc as pcc_module
from privstream.continual import PCC, BlockId, completed_at
from privstream.continual.blocks import PCC_STATE_CODE, is_expired
from privstream.continual.pcc import pack_blobs, pmg_release, stored_at, unpack_blobs
from privstream.mechanisms.domain_topk import declared_domain
from privstream.noise import SeededRandomSource
from privstream.privacy import Change, Scope, Unit
from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import decode_envelope, encode_envelope

KEY = bytes(range(32))
DOMAIN = range(40)


def skewed_stream(seed: int, length: int, universe: int = 40) -> list[int]:
    """Half the steps from 3 hot items, the rest uniform: MG cores decrement at every level."""
    r = random.Random(seed)
    return [r.choice((0, 1, 2)) if r.random() < 0.5 else r.randrange(universe) for _ in range(length)]


class CountingSource:
    """A RandomSource wrapper that counts its calls."""

    def __init__(self, seed: int) -> None:
        self.inner = SeededRandomSource(seed)
        self.calls = 0

    def randbits(self, n: int) -> int:
        self.calls += 1
        return self.inner.randbits(n)

    def randbelow(self, n: int) -> int:
        self.calls += 1
        return self.inner.randbelow(n)


def test_noise_is_drawn_exactly_once_per_block_at_its_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Fraction, int]] = []

    def counting(counts, epsilon, beta, domain, rng):  # type: ignore[no-untyped-def]
        calls.append((epsilon, beta))
        return pmg_release(counts, epsilon, beta, domain, rng)

    monkeypatch.setattr(pcc_module, "pmg_release", counting)
    source = CountingSource(3)
    pcc = PCC(1, Fraction(1, 8), 96, DOMAIN, rng=source)
    p = pcc.params
    for t, x in enumerate(skewed_stream(1, 500), start=1):
        before_calls, before_draws = len(calls), source.calls
        released = pcc.step(x)
        assert released == completed_at(p, t)
        new = calls[before_calls:]
        assert new == [(p.level_epsilon(b.level), p.level_beta(b.level)) for b in released]
        assert (source.calls > before_draws) == bool(released)  # randomness only at t = jW_i
        draws = source.calls
        first = pcc.estimates()
        assert pcc.estimates() == first and pcc.estimate(0) == first.get(0, 0)
        assert source.calls == draws  # queries never re-randomise
    assert pcc.blocks_released == {i: 500 // p.level_size(i) for i in range(p.levels + 1)}
    assert len(calls) == sum(pcc.blocks_released.values())


def test_pmg_release_is_calibrated_to_beta_plus_one_over_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def spy(values, domain, k, scale, rng, *, min_value=None):  # type: ignore[no-untyped-def]
        seen.append((k, scale, min_value))
        return [(x, v) for x, v in values.items() if v >= 1][:k]

    monkeypatch.setattr(pcc_module, "noisy_top_k", spy)
    pcc = PCC(1, Fraction(1, 4), 24, DOMAIN, rng=SeededRandomSource(0))
    p = pcc.params
    for x in skewed_stream(2, 48):
        pcc.step(x)
    expected = [
        (p.level_beta(b.level), p.level_scale(b.level), 1) for t in range(1, 49) for b in completed_at(p, t)
    ]
    assert seen == expected


def test_pmg_release_output_shape() -> None:
    counts = {x: 50 + x for x in range(10)} | {999: 80}  # 999 is outside the declared universe
    dom = declared_domain(range(30))
    for seed in range(20):
        out = pmg_release(counts, Fraction(1, 2), 4, dom, SeededRandomSource(seed))
        assert len(out) <= 4 and all(v >= 1 for v in out.values())
        assert set(out) <= set(range(30))


@pytest.mark.parametrize(
    ("lam", "window", "universe"), [(Fraction(1, 2), 40, 12), (Fraction(1, 4), 96, 30), (0.1, 200, 60)]
)
def test_garbage_collection_keeps_exactly_the_unexpired_completed_blocks(
    lam: object, window: int, universe: int
) -> None:
    pcc = PCC(1, lam, window, noiseless=True)
    p = pcc.params
    for t, x in enumerate(skewed_stream(5, 4 * window, universe), start=1):
        pcc.step(x)
        brute = sorted(
            BlockId(i, j)
            for i in range(p.levels + 1)
            for j in range(1, t // p.level_size(i) + 1)
            if not is_expired(p, BlockId(i, j), t)
        )
        assert pcc.stored_blocks == brute == stored_at(p, t)


@pytest.mark.parametrize(
    ("lam", "window", "universe", "seed"),
    [
        (Fraction(1, 2), 40, 12, 0),
        (Fraction(1, 2), 64, 20, 1),
        (Fraction(1, 4), 96, 30, 2),
        (0.1, 150, 60, 3),
    ],
)
def test_noiseless_pcc_undercounts_by_at_most_3_w0_minus_2(
    lam: object, window: int, universe: int, seed: int
) -> None:
    """0 <= count_x(W_t) − 𝒫_t(x) <= 2(W_0 − 1) + W_0 for every t and x (boundary loss plus MG
    decrements over the cover < W_0)."""
    pcc = PCC(1, lam, window, noiseless=True)
    w0 = pcc.params.w0
    stream = skewed_stream(seed, 5 * window, universe)
    worst = 0
    for t, x in enumerate(stream, start=1):
        pcc.step(x)
        true = Counter(stream[max(0, t - window) : t])
        est = pcc.estimates()
        for y in set(true) | set(est):
            gap = true[y] - est.get(y, 0)
            assert 0 <= gap <= 3 * w0 - 2, (t, y, gap)
            worst = max(worst, gap)
    assert worst > 0


def test_noiseless_boundary_loss_reaches_2_w0_minus_2() -> None:
    """One repeated item (MG exact): the gap is only the boundary loss, which reaches 2(W_0 − 1)."""
    pcc = PCC(1, Fraction(1, 2), 38, noiseless=True)  # W_0 = 5, W = −2 mod W_0: both ends can lose 4
    gaps = []
    for t in range(1, 200):
        pcc.step(7)
        gaps.append(min(t, 38) - pcc.estimate(7))
    assert max(gaps[38:]) == 2 * (pcc.params.w0 - 1) == 8


def test_memory_and_output_size_envelopes() -> None:
    pcc = PCC(1, Fraction(1, 4), 128, DOMAIN, rng=SeededRandomSource(9))
    p = pcc.params
    betas = sum(p.level_beta(i) for i in range(p.levels + 1))
    for x in skewed_stream(4, 700):
        pcc.step(x)
        mem = pcc.memory()
        assert len(pcc.estimates()) <= 2 * betas  # |𝒫_t| = O((1/λ)log(1/λ))
        assert mem["core_counters"] <= betas
        limit = sum((p.window // p.level_size(i) + 1) * p.level_beta(i) for i in range(p.levels + 1))
        assert mem["stored_counters"] <= limit  # O((1/λ)log²(1/λ))
        for b in pcc.stored_blocks:
            assert len(pcc.block_values(b)) <= p.level_beta(b.level)


def test_with_little_noise_the_error_is_within_lambda_w() -> None:
    """A sanity check of utility with a large ε (the Lemma 3 condition on W is astronomically large at
    ε = 1): |𝒫_t(x) − count| <= λW for every t >= W and x (fixed seed)."""
    window = 256
    pcc = PCC(4000, Fraction(1, 4), window, range(10), rng=SeededRandomSource(11))
    stream = skewed_stream(6, 3 * window, 10)
    for t, x in enumerate(stream, start=1):
        pcc.step(x)
        if t >= window:
            true = Counter(stream[t - window : t])
            est = pcc.estimates()
            assert all(abs(true[y] - est.get(y, 0)) <= pcc.params.lam * window for y in range(10))


def test_heavy_hitters_use_the_observation_bar() -> None:
    pcc = PCC(1, Fraction(1, 8), 64, noiseless=True)
    for x in [0] * 30 + [1] * 20 + list(range(2, 16)):
        pcc.step(x)
    est = pcc.estimates()
    for theta in (0.2, 0.3, Fraction(1, 2), 0.9):
        bar = (Fraction(theta) - Fraction(1, 8)) * 64
        assert pcc.heavy_hitters(theta) == {x for x, v in est.items() if v >= bar}
    assert pcc.heavy_hitters(0.3) == {0, 1} and pcc.heavy_hitters(0.5) == {0}
    for bad in (0, 1, -0.1, 1.5, "0.3", True):
        with pytest.raises(ValueError, match="^theta: "):
            pcc.heavy_hitters(bad)


def test_guarantee() -> None:
    pcc = PCC(1, Fraction(1, 64), 2**20, DOMAIN)
    g = pcc.guarantee
    assert g.private and g.epsilon == Fraction(0.998046875) and g.epsilon < 1 and g.delta == 0
    assert (g.unit, g.change, g.scope) == (Unit.EVENT, Change.REPLACE, Scope.ONE_STREAM)
    assert "replace one item at one time step" in g.neighbour_relation and "Def. 3" in g.neighbour_relation
    assert g.privacy_unit == "one event (one item at one time step) of one node's stream"
    assert "Lemma 3" in g.theorem
    baseline = PCC(1, Fraction(1, 64), 2**20, noiseless=True).guarantee
    assert not baseline.private and baseline.epsilon is None and baseline.theorem.startswith("NOT PRIVATE")


def test_constructor_refusals() -> None:
    with pytest.raises(ValueError, match="^domain: "):
        PCC(1, 0.25, 10)
    with pytest.raises(ValueError, match="^noiseless: "):
        PCC(1, 0.25, 10, noiseless=True, rng=SeededRandomSource(1))
    with pytest.raises(ValueError, match="^rng: "):
        PCC(1, 0.25, 10, DOMAIN, rng=SeededRandomSource(1), noise_key=KEY)
    with pytest.raises(ValueError, match="^noise_key: "):
        PCC(1, 0.25, 10, DOMAIN, noise_key=b"short")
    with pytest.raises(ValueError, match="^epsilon: "):
        PCC(0, 0.25, 10, DOMAIN)


def run(pcc: PCC, items: list[int]) -> list[tuple[list[BlockId], dict]]:
    return [(pcc.step(x), pcc.estimates()) for x in items]


def test_keyed_noise_is_per_block_and_replay_stable() -> None:
    stream = skewed_stream(7, 300)
    a, b = (
        PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY),
        PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY),
    )
    assert run(a, stream) == run(b, stream)  # same key, same stream: identical transcript
    other = PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=bytes(32))
    run(other, stream)
    assert other.estimates() != a.estimates()
    # a stream differing only at step 1: the same noise for every block not containing step 1
    c, changed = (
        PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY),
        PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY),
    )
    first_blocks = []
    for x, y in zip(stream, [39, *stream[1:]], strict=True):
        released = c.step(x)
        assert changed.step(y) == released
        for block in released:
            if block.start(c.params) == 1:
                first_blocks.append(c.block_values(block) == changed.block_values(block))
            else:
                assert c.block_values(block) == changed.block_values(block)
    assert len(first_blocks) == c.params.levels + 1 and not all(first_blocks)


@pytest.mark.parametrize("mode", ["keyed", "noiseless"])
def test_binary_round_trip_continues_with_identical_outputs(mode: str) -> None:
    kwargs: dict = {"noise_key": KEY} if mode == "keyed" else {"noiseless": True}
    domain = DOMAIN if mode == "keyed" else None
    stream = skewed_stream(8, 600)
    reference = PCC(1, Fraction(1, 8), 100, domain, **kwargs)
    expected = run(reference, stream)
    for cut in (0, 1, 13, 100, 257, 399):
        first = PCC(1, Fraction(1, 8), 100, domain, **kwargs)
        run(first, stream[:cut])
        data = first.to_bytes()
        restored = PCC.from_bytes(data, domain)
        assert restored.to_bytes() == data and restored.t == cut
        assert restored.estimates() == first.estimates()
        assert run(restored, stream[cut:]) == expected[cut:]


def test_injected_source_state_needs_a_source_to_restore() -> None:
    pcc = PCC(1, 0.25, 40, DOMAIN, rng=SeededRandomSource(1))
    run(pcc, skewed_stream(1, 50))
    with pytest.raises(SketchFormatError, match="pass rng"):
        PCC.from_bytes(pcc.to_bytes(), DOMAIN)
    restored = PCC.from_bytes(pcc.to_bytes(), DOMAIN, rng=SeededRandomSource(2))
    assert restored.estimates() == pcc.estimates()


def reencode(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    """The state with its sections edited and a valid envelope (CRC) again."""
    params, payload = decode_envelope(data, PCC_STATE_CODE, 4, "PCC state")
    new_params, blobs = edit(list(params), unpack_blobs(payload))
    return encode_envelope(PCC_STATE_CODE, new_params, pack_blobs(blobs))


def test_corrupt_or_inconsistent_state_is_refused() -> None:
    pcc = PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY)
    run(pcc, skewed_stream(3, 150))
    data = pcc.to_bytes()
    for at in range(0, len(data), max(1, len(data) // 97)):
        corrupt = bytearray(data)
        corrupt[at] ^= 0x10
        with pytest.raises(SketchFormatError):
            PCC.from_bytes(bytes(corrupt), DOMAIN)
    with pytest.raises(SketchFormatError, match="truncated"):
        PCC.from_bytes(data[:-5], DOMAIN)
    with pytest.raises(SketchFormatError, match="domain differs"):
        PCC.from_bytes(data, range(41))
    n_levels = pcc.params.levels + 1
    edits = {
        "stored blocks must be the unexpired ones": lambda p, b: ([*p[:3], p[3] - 1], b[:-1]),
        "core mismatch": lambda p, b: ([p[0] + 1, *p[1:]], b),
        "power of 1/2": lambda p, b: (p, [b[0], b"3/16", *b[2:]]),
        "values must be > 0": lambda p, b: (p, [*b[:-1], b[-1][:12] + _negate_first_count(b[-1][12:])]),
        "wrong number of state sections": lambda p, b: (p, b[: 4 + n_levels]),
        "noise key presence": lambda p, b: (p, [*b[:3], b"", *b[4:]]),
    }
    for message, edit in edits.items():
        with pytest.raises(SketchFormatError, match=message):
            PCC.from_bytes(reencode(data, edit), DOMAIN)
    assert PCC.from_bytes(reencode(data, lambda p, b: (p, b)), DOMAIN).to_bytes() == data


def _negate_first_count(counters: bytes) -> bytes:
    """A counter payload with its first int count negated (a: u32, keys, counts)."""
    a = int.from_bytes(counters[:4], "little")
    at = 4 + 8 * a
    first = int.from_bytes(counters[at : at + 8], "little", signed=True)
    return counters[:at] + (-first).to_bytes(8, "little", signed=True) + counters[at + 8 :]
