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
