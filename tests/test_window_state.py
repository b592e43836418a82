"""DPSW-Sketch state bounds: the event-time horizon, exactly the reachable states decode, float
event times refused, the noise calibration of every table, the noise key's context."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from privstream.noise import SeededRandomSource
from privstream.sketches import SketchFormatError
from privstream.window import DPSWSketch, Windowing, dpsw_params
from privstream.window.pcms import pcms_variance


def event_sketch(**kw: object) -> DPSWSketch:
    p = dpsw_params(
        window=100, substream=10, alpha=0.5, rho=0.1, depth=2, width=8, windowing=Windowing.EVENT_TIME
    )
    return DPSWSketch(p, rng=SeededRandomSource(3), **kw)  # type: ignore[arg-type]


def test_an_event_one_substream_ahead_round_trips() -> None:
    """The repro: w = 100, W = 10, clock 104, one event at 112 (substream 11, the one after the
    clock's): 12 live substreams, a reachable state that must decode."""
    sketch = event_sketch()
    for t in (3, 50, 90):
        sketch.advance_to(t - 1)
        sketch.update(t % 7, t)
    sketch.advance_to(104)
    sketch.update(7, 112)
    assert len(sketch.live_substreams) == 12 == sketch.params.max_live_substreams + 1
    data = sketch.to_bytes()
    restored = DPSWSketch.from_bytes(data)
    assert restored.to_bytes() == data
    assert (restored.estimate_batch([3, 1, 6, 7]) == sketch.estimate_batch([3, 1, 6, 7])).all()


@pytest.mark.parametrize("far", [120, 10**6, 2**62])
def test_a_far_future_event_is_refused_without_allocating(far: int) -> None:
    sketch = event_sketch()
    sketch.advance_to(104)
    before, live = sketch.to_bytes(), sketch.live_substreams
    assert sketch.horizon == 119
    with pytest.raises(ValueError, match="more than one substream ahead of the clock"):
        sketch.update_batch([1, 2], [105, far])
    assert sketch.live_substreams == live and sketch.to_bytes() == before
    sketch.update(1, 119)  # the horizon itself is accepted
    sketch.advance_to(10**9)  # a punctuation moves the horizon; a gap creates only the window's substreams
    assert len(sketch.live_substreams) == 11


def test_the_horizon_before_the_first_punctuation() -> None:
    sketch = event_sketch()  # origin 0, clock −1: only substream 0 (times 0..9) may receive events
    assert sketch.horizon == 9
    with pytest.raises(ValueError, match="positions"):
        sketch.update(1, 10)
    sketch.update(1, 9)
    assert DPSWSketch.from_bytes(sketch.to_bytes()).live_substreams == [0]


@pytest.mark.parametrize("positions", [[5.0], [5.7], np.array([5.5]), [True], np.array([5], dtype=object)])
def test_float_or_non_integer_event_times_are_refused(positions: object) -> None:
    sketch = event_sketch()
    with pytest.raises(ValueError, match="positions"):
        sketch.update_batch([1], positions)  # type: ignore[arg-type]
    assert sketch.items == 0


def forged(sketch: DPSWSketch, **fields: object) -> bytes:
    """The bytes of ``sketch`` with internal fields replaced (a state maintenance cannot reach)."""
    saved = {k: getattr(sketch, k) for k in fields}
    for k, v in fields.items():
        setattr(sketch, k, v)
    try:
        return sketch.to_bytes()
    finally:
        for k, v in saved.items():
            setattr(sketch, k, v)


def test_unreachable_states_are_refused_with_a_clear_error() -> None:
    sketch = event_sketch()
    sketch.update_batch([1, 2], [3, 5])
    sketch.advance_to(104)
    cases = {
        "clock": forged(sketch, _clock=250),  # live substreams no longer those of the clock
        "next": forged(sketch, _next=14),  # beyond the horizon
        "complete": forged(sketch, _clock=109),  # substream 10 ends at 109: complete there
        "counters": forged(sketch, insertions=10**6),
    }
    for name, data in cases.items():
        with pytest.raises(SketchFormatError, match="DPSW state"):
            DPSWSketch.from_bytes(data)
            pytest.fail(name)
    count = DPSWSketch(dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8))
    count.update_batch(list(range(35)))
    with pytest.raises(SketchFormatError, match="DPSW state"):
        DPSWSketch.from_bytes(forged(count, items=34))
    with pytest.raises(SketchFormatError, match="DPSW state"):  # a substream dropped: no KeyError later
        count._substreams.pop(2)
        DPSWSketch.from_bytes(count.to_bytes())


def test_every_table_gets_the_variance_of_its_role() -> None:
    """A recording sampler marks each table with its call; the table layout
    [prefix_1 … prefix_|I|, suffix_2 … suffix_|I|] must carry a/ρ_j of its j, and a query must
    read the tables Alg. 3 names with those variances."""
    calls: list[Fraction] = []

    def recording(sigma2: Fraction, count: int) -> np.ndarray:
        calls.append(sigma2)
        return np.full(count, len(calls) - 1, dtype=np.int64)

    p = dpsw_params(
        window=40, substream=10, alpha=0.5, rho=Fraction(1, 10), depth=3, width=4, budget_ratio=0.3
    )
    sketch = DPSWSketch(p, noise=recording)
    n = len(p.checkpoints)
    sketch.update_batch([0] * 5)  # inside substream 0: all 2|I| − 1 tables live
    (sub,) = sketch.substreams()
    roles = [*range(1, n + 1), *range(2, n + 1)]  # j of each table
    assert len(calls) == len(roles) == len(sub.tables)
    for k, j in enumerate(roles):
        call = int(sub.tables[k].min())  # untouched counters hold the call index
        assert calls[call] == pcms_variance(3, p.budgets[j - 1]), (k, j)
    for k in range(n):
        assert sub.prefix(k + 1) == k
    for j in range(2, n + 1):
        assert calls[int(sub.tables[sub.suffix(j, n)].min())] == pcms_variance(3, p.budgets[j - 1])
    sketch.update_batch([1] * 30)
    for use in sketch.query_plan():  # every table read has the variance of its (kind, j)
        table = sketch._substreams[use.substream].tables[use.table]
        assert calls[int(table.min())] == pcms_variance(3, p.budgets[use.j - 1]), use


def test_event_time_heavy_hitters_need_a_public_items_bound() -> None:
    """w is in time units for EVENT_TIME: (γ − ζ)·w would compare counts with a time span."""
    sketch = event_sketch(domain=range(8))
    sketch.update_batch([1] * 5, [1, 2, 3, 4, 5])
    sketch.advance_to(9)
    with pytest.raises(ValueError, match="window_items"):
        sketch.heavy_threshold(0.5)
    with pytest.raises(ValueError, match="window_items"):
        sketch.heavy_hitters(0.5)
    zeta = sketch.params.zeta
    bar = sketch.heavy_threshold(0.5, window_items=40)
    assert bar == math.ceil((Fraction(1, 2) - zeta) * 40)
    assert isinstance(sketch.heavy_hitters(0.5, window_items=40), list)
    count = DPSWSketch(dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8))
    assert count.heavy_threshold(0.5) == count.heavy_threshold(0.5, window_items=40)
    with pytest.raises(ValueError, match="window_items"):
        count.heavy_threshold(0.5, window_items=41)


def test_the_noise_key_context_binds_every_parameter() -> None:
    """One key under two parameter sets (here only ζ, or only the windowing, differ; the variances
    are equal) must not give the same noise."""
    key = bytes(range(32))
    base = {"window": 40, "substream": 10, "alpha": 0.5, "rho": 0.1, "depth": 2, "width": 8, "origin": 1}
    a = DPSWSketch(dpsw_params(**base, zeta=0.1), noise_key=key)
    b = DPSWSketch(dpsw_params(**base, zeta=0.2), noise_key=key)
    c = DPSWSketch(dpsw_params(**base, windowing=Windowing.EVENT_TIME), noise_key=key)
    c.advance_to(1)
    for s in (a, b):
        s.update(1)
    tables = [next(s.substreams()).tables for s in (a, b, c)]
    assert not (tables[0] == tables[1]).all() and not (tables[0] == tables[2]).all()
    assert a.noise_context(0) != b.noise_context(0)


@pytest.mark.parametrize("epsilon", [0.1, 0.3, 0.7, 1.0, 1.6, 2.0, 3.3])
def test_rho_from_is_the_checked_float_exactly(epsilon: float) -> None:
    """The ρ returned is exactly the float whose conversion was checked to be <= ε (a decimal
    reading of it may lie above it)."""
    from privstream.accounting import zcdp_to_dp
    from privstream.window import rho_from

    rho = rho_from(epsilon, 1e-7)
    assert rho == Fraction(float(rho))
    assert zcdp_to_dp(float(rho), 1e-7).epsilon <= epsilon


def test_the_shard_relation_is_the_count_epoch_relation() -> None:
    """Count windows: the same-shard replacement of count epochs (privstream.privacy), word for
    word; event time: add/remove with the exact ρ_all/2."""
    from privstream.privacy import SAME_SHARD_REPLACEMENT, Change, NeighbourRelation, Scope, Unit
    from privstream.window.params import shard_relation

    count = dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8)
    text = shard_relation(count)
    assert f"replace one event at a fixed position of {SAME_SHARD_REPLACEMENT}" in text
    epochs = NeighbourRelation(unit=Unit.EVENT, change=Change.REPLACE, scope=Scope.SHARD).render()
    assert SAME_SHARD_REPLACEMENT in epochs and "not the last w items of the whole stream" in text
    event = dpsw_params(
        window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8, windowing=Windowing.EVENT_TIME
    )
    assert "rho_all/2" in shard_relation(event)


# ---------------------------------------------------------------------------- keyed noise: re-keying

KEY, NEW_KEY = bytes(range(32)), bytes(range(1, 33))


def keyed(key: bytes = KEY, windowing: Windowing = Windowing.COUNT) -> DPSWSketch:
    p = dpsw_params(
        window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8, windowing=windowing, origin=1
    )
    return DPSWSketch(p, noise_key=key)


def test_rekey_redraws_exactly_the_incomplete_substreams() -> None:
    """DPSWSketch.rekey: the old key's noise is regenerated and subtracted exactly, so an incomplete
    substream then holds what a sketch keyed with the new key from the start holds (its counters
    plus the new key's noise); complete substreams keep their tables; later substreams draw from the
    new key; the re-keyed state round-trips with the new key."""
    items = [i % 5 for i in range(35)]  # substreams 0..2 complete, 3 half built
    old, fresh = keyed(), keyed(NEW_KEY)
    old.update_batch(items)
    fresh.update_batch(items)
    before = {s.index: s.tables.copy() for s in old.substreams()}
    old.rekey(NEW_KEY)
    assert old.noise_key == NEW_KEY
    for sub, ref in zip(old.substreams(), fresh.substreams(), strict=True):
        if sub.complete:
            assert sub.tables.tobytes() == before[sub.index].tobytes(), sub.index
        else:
            assert sub.index == 3 and sub.tables.tobytes() == ref.tables.tobytes()
            assert sub.tables.tobytes() != before[3].tobytes()
    for s in (old, fresh):
        s.update_batch(items)  # substreams 4..6 created after the re-key: the new key's noise
    assert [s.tables.tobytes() for s in old.substreams()] == [s.tables.tobytes() for s in fresh.substreams()]
    restored = DPSWSketch.from_bytes(old.to_bytes())
    assert restored.noise_key == NEW_KEY and restored.to_bytes() == old.to_bytes()


def test_rekey_in_event_time_redraws_the_current_and_the_next_substream() -> None:
    old, fresh = keyed(windowing=Windowing.EVENT_TIME), keyed(NEW_KEY, Windowing.EVENT_TIME)
    for s in (old, fresh):
        s.update(1, 5)
        s.advance_to(14)
        s.update_batch([2, 3], [15, 25])  # 25 lies one substream ahead of the clock 14
    complete = {s.index: s.tables.tobytes() for s in old.substreams() if s.complete}
    old.rekey(NEW_KEY)
    subs = list(old.substreams())
    assert [s.index for s in subs if not s.complete] == [1, 2]
    for sub, ref in zip(subs, fresh.substreams(), strict=True):
        expected = complete[sub.index] if sub.complete else ref.tables.tobytes()
        assert sub.tables.tobytes() == expected


def test_rekey_to_the_same_key_and_at_a_substream_end() -> None:
    sketch = keyed()
    sketch.update_batch(list(range(17)))
    data = sketch.to_bytes()
    sketch.rekey(KEY)  # the same key: a failover of the same run, nothing changes
    assert sketch.to_bytes() == data
    sketch.update_batch(list(range(3)))  # clock 20: a substream end, nothing under construction
    tables = [s.tables.tobytes() for s in sketch.substreams()]
    sketch.rekey(NEW_KEY)
    assert [s.tables.tobytes() for s in sketch.substreams()] == tables and sketch.noise_key == NEW_KEY
    new = keyed()
    new.rekey(NEW_KEY)  # before any substream: only the key changes
    assert new.to_bytes() == keyed(NEW_KEY).to_bytes()


def zero(sigma2: Fraction, count: int) -> np.ndarray:
    return np.zeros(count, dtype=np.int64)


def test_rekey_refuses_what_cannot_be_regenerated_and_changes_nothing() -> None:
    """Unkeyed noise (CSPRNG, a seeded rng, an injected sampler) cannot be regenerated; a bad key is
    named; a state of another noise version (the sampler's bit-to-sample mapping or the context
    changed) cannot be re-keyed: start afresh."""
    p = keyed().params
    for sketch in (DPSWSketch(p), DPSWSketch(p, rng=SeededRandomSource(1)), DPSWSketch(p, noise=zero)):
        sketch.update_batch([1, 2, 3])
        data = sketch.to_bytes()
        with pytest.raises(ValueError, match="only a keyed sketch"):
            sketch.rekey(NEW_KEY)
        assert sketch.to_bytes() == data
    with pytest.raises(ValueError, match="noise"):
        DPSWSketch(p, noise=zero, noise_key=KEY)  # an injected sampler would shadow the key
    sketch = keyed()
    sketch.update_batch([1, 2, 3])
    data = sketch.to_bytes()
    with pytest.raises(ValueError, match="key"):
        sketch.rekey(b"short")
    old = DPSWSketch.from_bytes(forged(sketch, noise_version="v2"))
    assert old.noise_version == "v2"
    with pytest.raises(ValueError, match="start afresh"):
        old.rekey(NEW_KEY)
    assert old.to_bytes() == forged(sketch, noise_version="v2") and sketch.to_bytes() == data
    old.rekey(KEY)  # the same key: nothing to regenerate, nothing refused
    with pytest.raises(SketchFormatError, match="noise version"):
        DPSWSketch.from_bytes(forged(sketch, noise_version="x"))


def test_a_layout_1_state_is_refused_naming_what_to_do() -> None:
    """Layout 1 did not record the noise version (v1 or v2 was drawn): strictly refused."""
    from privstream.sketches.binary_format import decode_envelope, encode_envelope
    from privstream.window.state import DPSW_STATE_CODE

    sketch = keyed()
    sketch.update_batch([1, 2, 3])
    head, payload = decode_envelope(sketch.to_bytes(), DPSW_STATE_CODE, 11, "DPSW state")
    old = encode_envelope(DPSW_STATE_CODE, [1, *head[1:]], payload)
    with pytest.raises(SketchFormatError, match="layout 1.*start afresh"):
        DPSWSketch.from_bytes(old)


# ---------------------------------------------------------------------------- keyed noise: independence


def test_keyed_noise_tables_are_pairwise_distinct_within_and_across_substreams() -> None:
    """Every PCMS of every substream must get its own noise (Lemma 4.1 composes independent
    Gaussian mechanisms). With no data, the tables are pure keyed noise: the 2|I| − 1 tables of the
    substreams under construction and the |I| kept tables of the complete ones must be pairwise
    different. This catches a substream-independent DRBG context (every substream the same noise)
    and a generator restarted per table (prefix_j = suffix_j, the same variance, equal tables).

    False failure: two independent tables of a·b = 48 discrete Gaussians with σ² = a/ρ_j >= 30
    are equal with probability <= (max pmf)^48 <= (1/√(2π·30))^48 < 10^-50 per pair; there are fewer
    than 10^3 pairs here (and the key is fixed, so the outcome is deterministic)."""
    p = dpsw_params(
        window=40, substream=10, alpha=0.5, rho=0.1, depth=3, width=16, windowing=Windowing.EVENT_TIME
    )
    assert min(pcms_variance(3, rho) for rho in p.budgets) >= 30
    sketch = DPSWSketch(p, noise_key=KEY)
    sketch.advance_to(34)  # substreams 0..2 complete, 3 under construction
    sketch.update(1, 45)  # and 4, one substream ahead (one event: +1 in 3 counters of its tables)
    tables = [t.tobytes() for s in sketch.substreams() for t in s.tables]
    assert len(tables) == 3 * len(p.checkpoints) + 2 * (2 * len(p.checkpoints) - 1)
    assert len(set(tables)) == len(tables)
    sketch.rekey(NEW_KEY)  # the re-drawn tables too, against each other and the kept ones
    tables = [t.tobytes() for s in sketch.substreams() for t in s.tables]
    assert len(set(tables)) == len(tables)


# ---------------------------------------------------------------------------- γ vs ζ; the guarantee


def test_gamma_must_exceed_zeta_and_the_default_zeta_must_be_below_one() -> None:
    """DPSW Alg. 3 line 8: the threshold (γ − ζ)·w; γ <= ζ would report the whole domain."""
    with pytest.raises(ValueError, match="zeta.*width 2"):
        dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=2)  # e/2 = 1.36
    p = dpsw_params(window=40, substream=10, alpha=0.5, rho=0.1, depth=2, width=8)  # ζ = e/8 ≈ 0.34
    sketch = DPSWSketch(p, domain=range(4), noise=zero)
    sketch.update_batch([1] * 40)
    for gamma in (0.3, p.zeta, float(p.zeta)):
        for query in (sketch.heavy_threshold, sketch.heavy_hitters):
            with pytest.raises(ValueError, match="gamma: must exceed zeta"):
                query(gamma)
    assert sketch.heavy_threshold(p.zeta + Fraction(1, 40)) == 1
    assert sketch.heavy_hitters(0.5) == [(1, 40)]


def test_injected_noise_states_no_dp_guarantee() -> None:
    """Follows the continual protocols' NOT PRIVATE / NO DP GUARANTEE: a sketch with an injected
    sampler or a seeded rng (tests only) gives no guarantee; the CSPRNG and a noise key do."""
    from privstream.noise.rng import CryptoRandomSource

    p = dpsw_params(window=40, substream=10, alpha=0.5, epsilon=1.0, delta=1e-6, depth=2, width=8)
    full = p.guarantee()
    assert full.private and full.epsilon is not None
    for sketch in (DPSWSketch(p), DPSWSketch(p, noise_key=KEY), DPSWSketch(p, rng=CryptoRandomSource())):
        assert sketch.guarantee() == full
    for sketch in (DPSWSketch(p, noise=zero), DPSWSketch(p, rng=SeededRandomSource(1))):
        g = sketch.guarantee()
        assert not g.private and (g.epsilon, g.delta) == (None, None)
        assert g.theorem.startswith("NO DP GUARANTEE") and "injected" in g.theorem
        state = DPSWSketch.from_bytes(sketch.to_bytes(), rng=SeededRandomSource(2))
        assert not state.guarantee().private


def _with_flags(data: bytes, flags: int) -> bytes:
    """The state ``data`` with its flags parameter replaced (the envelope re-sealed)."""
    from privstream.sketches.binary_format import decode_envelope, encode_envelope
    from privstream.window.state import DPSW_STATE_CODE

    head, payload = decode_envelope(data, DPSW_STATE_CODE, 11, "DPSW state")
    return encode_envelope(DPSW_STATE_CODE, [*head[:10], flags], payload)


def test_no_dp_guarantee_survives_save_and_restore() -> None:
    """The review's repro: a sketch built with injected noise (zero noise: its tables hold exact
    counts), saved and restored WITHOUT an injected source, reported private = True and ε = 1. The
    state's flag bit 1 keeps NO DP GUARANTEE across any number of restores, whatever noise the
    restored sketch draws later (the CSPRNG here); production and keyed states stay private; a state
    claiming both a key and injected noise (unreachable) and unknown flag bits are refused."""
    from privstream.noise.rng import CryptoRandomSource

    p = dpsw_params(window=40, substream=10, alpha=0.5, epsilon=1.0, delta=1e-6, depth=2, width=8)
    for injected in (DPSWSketch(p, noise=zero), DPSWSketch(p, rng=SeededRandomSource(1))):
        injected.update_batch([1, 2, 3] * 5)
        data = injected.to_bytes()
        for restored in (DPSWSketch.from_bytes(data), DPSWSketch.from_bytes(data, rng=CryptoRandomSource())):
            g = restored.guarantee()
            assert restored.injected_noise and not g.private and (g.epsilon, g.delta) == (None, None)
            assert g.theorem.startswith("NO DP GUARANTEE")
            restored.update_batch([4] * 30)  # new substreams with CSPRNG noise: still no guarantee
            again = DPSWSketch.from_bytes(restored.to_bytes())
            assert not again.guarantee().private and again.to_bytes() == restored.to_bytes()
    full = p.guarantee()
    for sketch in (DPSWSketch(p), DPSWSketch(p, noise_key=KEY)):
        sketch.update_batch([1, 2, 3] * 5)
        data = sketch.to_bytes()
        restored = DPSWSketch.from_bytes(data)
        assert restored.guarantee() == full and not restored.injected_noise and restored.to_bytes() == data
    keyed = DPSWSketch(p, noise_key=KEY).to_bytes()
    assert DPSWSketch.from_bytes(_with_flags(keyed, 1)).noise_key == KEY
    for flags in (3, 4, 6):
        with pytest.raises(SketchFormatError, match="bad DPSW state header"):
            DPSWSketch.from_bytes(_with_flags(keyed, flags))
    with pytest.raises(SketchFormatError, match="noise key presence"):
        DPSWSketch.from_bytes(_with_flags(keyed, 2))
