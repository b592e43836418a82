"""The ``sliding-window`` job's Flink-free logic (operators/window_logic.py): over a small sharded
stream, every release equals the core DPSW-Sketch (Wang–Wang–Chen KDD 2024, Alg. 2–3) fed the
shard's items directly under the shard's key, at every substream end; the state is byte-identical
to the core's and resumes byte-identically; misrouted and malformed messages are dead-lettered;
bad parameters are refused naming their option."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.jobs.sliding_window import SlidingWindowConfig, config_from_args, configure
from privstream.operators.test_hooks import TestHooks
from privstream.operators.window_logic import COMPOSITION, LedgerCharge, WindowSettings, WindowShardLogic

from privstream.partitioning import partition_for
from privstream.window import DPSWSketch
from privstream.window.params import shard_relation

KEY = bytes(range(32))
SHARDS, W, WINDOW, DOMAIN, GAMMA = 2, 50, 200, 60, 0.1
QUERIES = (0, 1, 2, 3, 17)
STATES = TestHooks(expose_states_topic="window-states")  #: TESTS ONLY: the state after every release


def _settings(**overrides: object) -> WindowSettings:
    base: dict[str, object] = dict(
        window=WINDOW, substream=W, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=DOMAIN,
        gamma=GAMMA, shards=SHARDS, checkpoints=(W, 8, 1), budget_ratio=0.5, queries=QUERIES,
        charge=LedgerCharge("sliding-window/t", 3, "abc"), submission_key=KEY,
    )  # fmt: skip
    base.update(overrides)
    return WindowSettings(**base)  # type: ignore[arg-type]


def _stream(n: int = 1500, seed: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(1.6, n) - 1, DOMAIN - 1).astype(np.int64)


def _message(items: np.ndarray) -> bytes:
    events = [{"item": int(i), "user_id": None, "event_time": 1} for i in items]
    return encode("EventBatch", {"events": events})


def _reference(settings: WindowSettings, shard: int) -> DPSWSketch:
    """The core sketch with the shard's key derived here independently (HMAC-SHA256)."""
    key = hmac.new(KEY, f"privstream sliding-window shard {shard}".encode(), hashlib.sha256).digest()
    return DPSWSketch(settings.params, domain=range(DOMAIN), noise_key=key)


def _run(settings: WindowSettings, shard: int, items: np.ndarray, cuts: int, state: bytes | None = None):
    logic = WindowShardLogic(settings, shard, state, hooks=STATES)
    outputs = []
    for offset, chunk in enumerate(np.array_split(items, cuts)):
        outputs += logic.process(_message(chunk), offset, "events")
    return logic, outputs


def test_releases_equal_the_core_sketch_at_every_substream_end() -> None:
    settings = _settings()
    items = _stream()
    parts = partition_for(items, SHARDS)
    for shard in range(SHARDS):
        mine = items[parts == shard]
        logic, outputs = _run(settings, shard, mine, cuts=23)  # batch cuts unrelated to W
        releases = [decode(b)[1] for kind, b in outputs if kind == "release"]
        states = [decode(b)[1] for kind, b in outputs if kind == "state"]
        assert len(releases) == len(states) == len(mine) // W > 3
        ref = _reference(settings, shard)
        for k, (release, state) in enumerate(zip(releases, states, strict=True)):
            ref.update_batch(mine[k * W : (k + 1) * W])
            assert state["data"] == ref.to_bytes()  # the exposed state at the release: byte-identical
            assert (state["shard"], state["epoch"], state["n"]) == (shard, k, (k + 1) * W)
            assert (release["shard"], release["substream"], release["position"]) == (shard, k, (k + 1) * W)
            assert release["window_start"] == max(1, (k + 1) * W - WINDOW + 1)
            assert [e["item"] for e in release["estimates"]] == list(QUERIES)
            assert [e["estimate"] for e in release["estimates"]] == ref.estimate_batch(QUERIES).tolist()
            assert [(h["item"], h["estimate"]) for h in release["heavy_hitters"]] == ref.heavy_hitters(GAMMA)
            assert release["heavy_threshold"] == ref.heavy_threshold(GAMMA)
            g = ref.guarantee()
            assert (release["rho"], release["epsilon"]) == (float(g.rho), g.epsilon)
            assert "replace one event" in release["neighbour_relation"]
            assert "same shard" in release["neighbour_relation"]
            assert "parallel composition" in release["composition"]
            assert (release["ledger_id"], release["ledger_sequence"]) == ("sliding-window/t", 3)
        ref.update_batch(mine[len(releases) * W :])
        assert logic.to_bytes() == ref.to_bytes()  # also between substream ends


def test_restored_logic_resumes_byte_identically() -> None:
    settings = _settings()
    items = _stream(1500, seed=9)
    items = items[partition_for(items, SHARDS) == 0][:700]
    whole, _ = _run(settings, 0, items, cuts=7)
    first, out1 = _run(settings, 0, items[:333], cuts=3)
    resumed, out2 = _run(settings, 0, items[333:], cuts=4, state=first.to_bytes())
    assert resumed.to_bytes() == whole.to_bytes()
    assert resumed.sketch.noise_key == whole.sketch.noise_key  # the key travels in the state
    releases = [decode(b)[1]["estimates"] for k, b in out1 + out2 if k == "release"]
    assert len(releases) == len(items) // W > 5 and not whole.refused


def test_other_shards_and_submissions_get_other_noise() -> None:
    a, b = _settings(), _settings(submission_key=bytes(32))
    assert len({a.shard_noise_key(0), a.shard_noise_key(1), b.shard_noise_key(0)}) == 3
    defaults = _settings(queries=None, checkpoints=None, budget_ratio=None)
    assert len(defaults.query_items) == DOMAIN and defaults.params.checkpoints == (50, 25, 13, 7, 4, 2, 1)


def test_malformed_misrouted_and_punctuation_messages() -> None:
    logic = WindowShardLogic(_settings(), 0)
    assert [k for k, _ in logic.process(b"\x00not avro", 0, "events")] == ["dead-letter"]
    punctuation = encode("EpochWatermark", {"producer_id": "p", "watermark_ms": 5})
    assert logic.process(punctuation, 1, "events") == []
    items = np.arange(DOMAIN)
    wrong = items[partition_for(items, SHARDS) == 1][:3]
    [(kind, letter)] = logic.process(_message(wrong), 2, "events")
    assert kind == "dead-letter" and "misrouted" in decode(letter)[1]["error"]
    assert logic.sketch.items == 0 and logic.refused  # nothing counted; the shard closes (fail closed)
    right = items[partition_for(items, SHARDS) == 0][:3]
    assert [k for k, _ in logic.process(_message(right), 3, "events")] == ["dead-letter"]
    assert logic.sketch.items == 0


@pytest.mark.parametrize(
    ("override", "name"),
    [
        ({"window": 0}, "window"),
        ({"substream": 500}, "substream"),
        ({"checkpoints": (W, 60, 1)}, "checkpoints"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 2.0}, "delta"),
        ({"width": 0}, "width"),
        ({"domain_size": 0}, "domain_size"),
        ({"gamma": 1.5}, "gamma"),
        ({"gamma": 0.04}, "--gamma.*zeta"),  # ζ = e/64 ≈ 0.042: threshold (γ − ζ)w <= 0
        ({"gamma": 0.04, "width": 2}, "zeta"),  # the default ζ = e/2 >= 1
        ({"shards": 0}, "shards"),
        ({"queries": (1, DOMAIN)}, "queries"),
        ({"shard_key": "position"}, "shard_key"),
        ({"submission_key": b"short"}, "submission_key"),
        ({"windowing": "sliding"}, "--windowing"),
        ({"windowing": "event-time"}, "--window-items"),  # event-time heavy hitters need the bound
        ({"windowing": "event-time", "window_items": 0}, "--window-items"),
        ({"windowing": "event-time", "window_items": 9, "origin": 2**63}, "origin"),
        ({"window_items": 50}, "--window-items"),  # event time only
        ({"origin": 0}, "--origin"),
    ],
)
def test_bad_parameters_are_named(override: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _settings(**override)


def test_cli_options_are_parsed_and_named() -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(
        "--window 200 --substream 50 --checkpoints 50,8,1 --epsilon 1 --delta 1e-6 --domain-size 60 "
        "--gamma 0.1 --queries 1,2 --topic ev".split()
    )
    config = config_from_args(args, shards=2)
    assert config.settings.checkpoints == (50, 8, 1) and config.settings.queries == (1, 2)
    assert (config.ledger_id, config.dlq_topic) == ("sliding-window/ev", "ev-dlq")
    args.queries = "1,x"
    with pytest.raises(ValueError, match="--queries"):
        config_from_args(args, shards=2)
    with pytest.raises(ValueError, match="--ledger-id"):
        SlidingWindowConfig(_settings(), bootstrap="127.0.0.1:1", ledger_id="")


# ---------------------------------------------------------------------------- event-time windows

TW, TWINDOW, TITEMS = 100, 400, 120  #: event-time W and w (ms), the public bound on items per window


def _event_settings(**overrides: object) -> WindowSettings:
    base: dict[str, object] = dict(
        window=TWINDOW,
        substream=TW,
        checkpoints=(TW, 8, 1),
        windowing="event-time",
        window_items=TITEMS,
        queries=None,
    )
    base.update(overrides)
    return _settings(**base)


def _timed(items: np.ndarray, times: np.ndarray) -> bytes:
    events = [
        {"item": int(i), "user_id": None, "event_time": int(t)} for i, t in zip(items, times, strict=True)
    ]
    return encode("EventBatch", {"events": events})


def _tick(watermark_ms: int) -> bytes:
    """The producers' punctuation (EventProducer.punctuate): no more events with time < watermark_ms."""
    return encode("EpochWatermark", {"producer_id": "p", "watermark_ms": watermark_ms})


def _timed_stream(
    shard: int, n: int = 1200, end_ms: int = 1000, seed: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """Shard ``shard``'s events of a Zipf stream with sorted event times in [0, end_ms)."""
    rng = np.random.default_rng(seed)
    items = _stream(n, seed)
    times = np.sort(rng.integers(0, end_ms, n)).astype(np.int64)
    mine = partition_for(items, SHARDS) == shard
    return items[mine], times[mine]


def _punctuated(
    items: np.ndarray, times: np.ndarray, every: int, end_ms: int
) -> list[tuple[bytes, int | None]]:
    """Messages as the punctuation schedule writes them: each tick (a multiple of ``every``) just
    before the first event at or after it; ``(bytes, watermark or None)``."""
    out: list[tuple[bytes, int | None]] = []
    begin = 0
    for tick in range(every, end_ms + 1, every):
        cut = int(np.searchsorted(times, tick, side="left"))
        for lo in range(begin, cut, 37):  # batches cut unrelated to W
            hi = min(cut, lo + 37)
            out.append((_timed(items[lo:hi], times[lo:hi]), None))
        out.append((_tick(tick), tick))
        begin = cut
    return out


def test_event_time_releases_once_per_punctuation_that_completes_a_substream() -> None:
    """Ticks every W/2: only those completing a substream release (T = tick − 1 a substream end),
    each equal to the core sketch fed the same events at their times and advanced to T; a tick
    jumping over three boundaries releases once, at its T."""
    settings = _event_settings()
    for shard in range(SHARDS):
        items, times = _timed_stream(shard)
        logic = WindowShardLogic(settings, shard, hooks=STATES)
        ref = _reference(settings, shard)
        releases, expected_t = [], []
        messages = _punctuated(items, times, TW // 2, 1000) + [(_tick(1400), 1400)]  # 1000 -> 1399: 4 ends
        for offset, (message, tick) in enumerate(messages):
            out = logic.process(message, offset, "events")
            if tick is None:
                assert out == []
                ref.update_batch(
                    *(lambda r: ([e["item"] for e in r], [e["event_time"] for e in r]))(
                        decode(message)[1]["events"]
                    )
                )
                continue
            ref.advance_to(tick - 1)
            if tick % TW:
                assert out == []  # T = tick - 1 completes no substream: no release
                continue
            [(kind, data), (skind, sdata)] = out
            assert (kind, skind) == ("release", "state")
            assert decode(sdata)[1]["data"] == ref.to_bytes()  # byte-identical state at every release
            releases.append(decode(data)[1])
            expected_t.append(tick - 1)
        assert [r["position"] for r in releases] == expected_t == [*range(TW - 1, 1000, TW), 1399]
        for release in releases:
            t = release["position"]
            assert (release["windowing"], release["window_end"], release["window"]) == (
                "event-time",
                t,
                TWINDOW,
            )
            assert release["window_start"] == max(0, t - TWINDOW + 1)
            assert release["substream"] == t // TW and release["window_items"] == TITEMS
        assert [e["estimate"] for e in releases[-1]["estimates"]] == ref.estimate_batch(
            range(DOMAIN)
        ).tolist()
        assert [(h["item"], h["estimate"]) for h in releases[-1]["heavy_hitters"]] == ref.heavy_hitters(
            GAMMA, range(DOMAIN), window_items=TITEMS
        )
        assert releases[-1]["heavy_threshold"] == ref.heavy_threshold(GAMMA, window_items=TITEMS)
        assert logic.to_bytes() == ref.to_bytes() and logic.sketch.items == len(items)


def test_event_time_release_states_the_add_remove_relation_and_its_charge() -> None:
    settings = _event_settings()
    logic = WindowShardLogic(settings, 0)
    [(_, data)] = logic.process(_tick(TW), 0, "events")
    release = decode(data)[1]
    g = settings.params.guarantee()
    assert "add/remove one event" in release["neighbour_relation"]
    assert shard_relation(settings.params) in release["neighbour_relation"]
    assert "replace one event" not in release["neighbour_relation"]
    assert "parallel composition" in release["composition"] and "punctuation" in release["composition"]
    assert (release["rho"], release["epsilon"], release["theorem"]) == (float(g.rho), g.epsilon, g.theorem)
    assert (release["ledger_id"], release["ledger_sequence"], release["ledger_entry_hash"]) == (
        "sliding-window/t",
        3,
        "abc",
    )


def test_late_and_beyond_horizon_events_go_to_the_dead_letter_topic_with_the_reason() -> None:
    settings = _event_settings()
    logic, ref = WindowShardLogic(settings, 0), _reference(settings, 0)
    items = np.array([i for i in range(DOMAIN) if partition_for(np.array([i]), SHARDS)[0] == 0][:4])
    assert len(logic.process(_tick(200), 0, "events")) == 1  # clock 199; horizon: end of substream 2
    ref.advance_to(199)
    assert logic.sketch.horizon == 299
    # a late event (150 <= 199), two counted ones (out of order in the message), one beyond 299
    out = logic.process(_timed(items, np.array([250, 150, 300, 210])), 1, "events")
    reasons = [decode(b)[1]["error"] for kind, b in out if kind == "dead-letter"]
    assert len(out) == len(reasons) == 2
    assert "1 of 4 event(s) late" in reasons[0] and "clock 199" in reasons[0]
    assert "1 of 4 event(s) beyond the horizon 299" in reasons[1] and "not counted" in reasons[1]
    assert all(decode(b)[1]["offset"] == 1 for _, b in out)
    ref.update_batch([items[3], items[0]], [210, 250])
    assert logic.to_bytes() == ref.to_bytes() and logic.sketch.items == 2  # only the accepted events
    assert logic.process(_tick(150), 2, "events") == []  # an older punctuation never moves the clock back
    [(kind, letter)] = logic.process(_tick(2**62 + 5), 3, "events")  # never crashes the shard
    assert kind == "dead-letter" and "punctuation refused" in decode(letter)[1]["error"]
    assert logic.to_bytes() == ref.to_bytes()
    end = encode("EndMarker", {"producer_id": "p", "events_sent": 4})
    assert logic.process(end, 4, "events") == []  # nothing to flush: releases come with punctuations


def test_event_time_state_resumes_byte_identically_also_after_a_bare_punctuation() -> None:
    settings = _event_settings()
    items, times = _timed_stream(1)
    messages = [m for m, _ in _punctuated(items, times, TW, 1000)]
    whole = WindowShardLogic(settings, 1)
    expected = [whole.process(m, k, "events") for k, m in enumerate(messages)]
    cut = next(k for k, m in enumerate(messages) if decode(m)[0] == "EpochWatermark" and k > 5) + 1
    first = WindowShardLogic(settings, 1)
    got = [first.process(m, k, "events") for k, m in enumerate(messages[:cut])]
    resumed = WindowShardLogic(settings, 1, first.to_bytes())  # the state right after a punctuation
    got += [resumed.process(m, k + cut, "events") for k, m in enumerate(messages[cut:])]

    def fields(outputs: list) -> list:
        return [
            [(k, {f: v for f, v in decode(b)[1].items() if f != "release_time"}) for k, b in o]
            for o in outputs
        ]

    assert fields(got) == fields(expected) and resumed.to_bytes() == whole.to_bytes()


def _tables(logic: WindowShardLogic) -> dict[int, np.ndarray]:
    return {s.index: s.tables.copy() for s in logic.sketch.substreams()}


def test_removing_one_early_event_changes_only_its_substream_unlike_count_windows() -> None:
    """The adversarial neighbouring pair of the event-time relation (DPSW Lemma 4.1 per substream):
    D and D' = D without its first event (time in substream 0). Under the same keyed noise, at every
    punctuation every other substream's tables (noise + counters, so the counters before noise) are
    byte-identical and substream 0's differ by exactly one count in each row of each PCMS whose
    range holds the event; releases whose window no longer reads substream 0 are identical. In
    count windows the same removal shifts every later item, and later substreams differ too."""
    settings = _event_settings()
    items, times = _timed_stream(0, n=1500, end_ms=800, seed=8)
    assert times[0] < TW
    pairs = []
    for drop in (False, True):
        keep = np.arange(len(items)) != 0 if drop else np.ones(len(items), bool)
        logic = WindowShardLogic(settings, 0)
        snapshots, releases = [], []
        for offset, (message, tick) in enumerate(_punctuated(items[keep], times[keep], TW, 800)):
            out = logic.process(message, offset, "events")
            if tick is not None:
                snapshots.append(_tables(logic))
                releases += [decode(b)[1] for k, b in out if k == "release"]
        pairs.append((snapshots, releases))
    (tables, rel), (tables_d, rel_d) = pairs
    assert len(tables) == len(tables_d) == 8 and len(rel) == len(rel_d) == 8
    n = len(settings.params.checkpoints)
    for before, after in zip(tables, tables_d, strict=True):
        assert sorted(before) == sorted(after)
        for index in before:
            if index != 0:
                assert before[index].tobytes() == after[index].tobytes(), index
            else:  # complete: [whole, suffix_2 .. suffix_|I|]; the event (offset < W - 8) is in the whole only
                diff = before[0] - after[0]
                assert diff.shape[0] == n and int(diff[0].sum()) == settings.depth and not diff[1:].any()
                assert set(np.unique(diff[0]).tolist()) == {0, 1}
    for a, b in zip(rel, rel_d, strict=True):
        if a["window_start"] >= TW:  # the window no longer reads substream 0
            assert {k: v for k, v in a.items() if k != "release_time"} == {
                k: v for k, v in b.items() if k != "release_time"
            }
    count = _settings(window=200, substream=50)
    full, less = WindowShardLogic(count, 0), WindowShardLogic(count, 0)
    full.add(items[:400])
    less.add(items[1:401])  # the same stream without its first item, one more item to keep lengths
    a, b = _tables(full), _tables(less)
    assert sorted(a) == sorted(b) and any(a[k].tobytes() != b[k].tobytes() for k in a if k != 0)


def test_count_windows_keep_their_release_and_ignore_punctuations() -> None:
    settings = _settings()
    items = _stream()
    mine = items[partition_for(items, SHARDS) == 0][: 2 * W]
    logic = WindowShardLogic(settings, 0)
    assert logic.process(_tick(10**9), 0, "events") == []
    out = logic.process(_message(mine), 1, "events")
    releases = [decode(b)[1] for k, b in out if k == "release"]
    assert [(r["windowing"], r["position"], r["window_end"], r["window_items"]) for r in releases] == [
        ("count", W, W, None),
        ("count", 2 * W, 2 * W, None),
    ]
    assert releases[0]["composition"] == COMPOSITION


def test_event_time_cli_options() -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    line = (
        "--windowing event-time --window 4s --substream 1000 --origin 500 --window-items 80 --alpha 0.5 "
        "--epsilon 1 --delta 1e-6 --domain-size 60 --gamma 0.1"
    )
    settings = config_from_args(parser.parse_args(line.split()), shards=2).settings
    assert (settings.windowing, settings.window, settings.substream) == ("event-time", 4000, 1000)
    assert (settings.params.origin, settings.window_items) == (500, 80)
    assert (
        config_from_args(parser.parse_args(line.replace("4s", "4000").split()), shards=2).settings.window
        == 4000
    )
    with pytest.raises(ValueError, match="--window-items"):
        config_from_args(parser.parse_args(line.replace("--window-items 80", "").split()), shards=2)
    with pytest.raises(ValueError, match="--window"):
        config_from_args(parser.parse_args(line.replace("4s", "4q").split()), shards=2)
    count = line.replace("--windowing event-time ", "").replace("--origin 500 --window-items 80 ", "")
    with pytest.raises(ValueError, match="--window: an integer"):
        config_from_args(parser.parse_args(count.split()), shards=2)
    assert (
        config_from_args(parser.parse_args(count.replace("4s", "4000").split()), shards=2).settings.windowing
        == "count"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(line.replace("event-time", "session").split())


def test_window_release_v1_messages_decode_as_count_windows() -> None:
    """The schema gained windowing/window_end/window_items with defaults; messages written with the
    kept ``WindowRelease.v1`` schema still decode (as count windows)."""
    import json
    from importlib import resources

    from privstream.connectors.avro_codec import SchemaRegistry, fingerprint

    text = (resources.files("privstream.connectors") / "schemas" / "WindowRelease.v1.avsc").read_text()
    v1 = SchemaRegistry()
    v1.register(json.loads(text))
    assert v1.current("WindowRelease").fingerprint != fingerprint("WindowRelease")
    logic = WindowShardLogic(_settings(), 0)
    logic.add(_stream(4 * W)[partition_for(_stream(4 * W), SHARDS) == 0][:W])
    record = logic.release_record()
    old = {k: v for k, v in record.items() if k not in ("windowing", "window_end", "window_items")}
    name, value = decode(v1.encode("WindowRelease", old))
    assert name == "WindowRelease" and value == {
        **old,
        "windowing": "count",
        "window_end": None,
        "window_items": None,
        "run_id": None,
    }


def test_a_state_of_other_parameters_is_refused_on_restore() -> None:
    count = WindowShardLogic(_settings(), 0)
    count.add(_stream(10))
    with pytest.raises(ValueError, match="other parameters"):
        WindowShardLogic(_event_settings(), 0, count.to_bytes())


# ---------------------------------------------------------------------------- restores


def _estimates(outputs: list) -> list[tuple[int, np.ndarray]]:
    releases = [decode(b)[1] for k, b in outputs if k == "release"]
    return [(r["position"], np.array([e["estimate"] for e in r["estimates"]])) for r in releases]


def test_two_new_submissions_resuming_one_state_share_no_noise() -> None:
    """The audit's reuse scenario: one saved state (w = 40, W = 10, 15 items: substream 1 half
    built) resumed by two new submissions (each its own submission key) with different
    continuations. Before re-keying both added the old key's noise to the half-built and every
    later substream, so at T = 40 and 50 (windows [1, 40] and [11, 50], after the restore) the
    difference of their estimates was exactly the difference of their counts. Re-keyed, it differs
    on most items (each differs by a difference of independent noise; fixed keys: deterministic).
    A resume by the same submission (a failover) still replays the uninterrupted run exactly.

    Every release is checked, T = 20 and 30 too: at T = 20 (window [1, 20]) the difference is that
    of the re-keyed half-built substream 1 alone (substream 0 is shared data and noise), so a
    re-key that kept its old noise (only later substreams fresh) gave all 20 equal there. Threshold:
    the 20 items have distinct buckets (asserted; depth 1), so over the keys the coincidences are
    independent, each with probability P(N = N') = Σ_k P(k)² ≈ 0.0163 for two independent discrete
    Gaussians of variance a/ρ_1 = 300 (T = 20; later releases add more independent tables, so less);
    P(more than 6 of 20) ≈ 2.0e-8 per release, < 1e-7 for the four (union bound): the false-failure
    probability of a correct re-key were the keys or the noise version changed (fixed keys here)."""
    base = dict(window=40, substream=10, depth=1, width=4096, epsilon=0.5, delta=1e-6, domain_size=20,
                gamma=0.2, shards=1, queries=None, checkpoints=None, budget_ratio=None)  # fmt: skip
    rng = np.random.default_rng(1)
    prefix, a, b = rng.integers(0, 20, 15), rng.integers(0, 20, 40), rng.integers(0, 20, 40)
    first = WindowShardLogic(_settings(**base), 0)
    first.add(prefix)
    saved = first.to_bytes()
    assert len(set(first.sketch._hashes.buckets(np.arange(20))[0].tolist())) == 20
    runs = []
    for more, key in ((a, bytes([1]) * 32), (b, bytes([2]) * 32)):
        resumed = WindowShardLogic(_settings(**base, submission_key=key), 0, saved)
        assert resumed.sketch.noise_key == resumed.settings.shard_noise_key(0) != first.sketch.noise_key
        runs.append(_estimates(resumed.add(more)))
    full_a, full_b = np.concatenate([prefix, a]), np.concatenate([prefix, b])
    released = []
    for (t, est_a), (t_b, est_b) in zip(*runs, strict=True):
        assert t == t_b
        lo = max(t - 40, 0)
        exact = np.bincount(full_a[lo:t], minlength=20) - np.bincount(full_b[lo:t], minlength=20)
        same = int(((est_a - est_b) == exact).sum())
        assert same <= 6, (t, same)  # 20 items: with shared noise all 20 were equal (docstring)
        released.append(t)
    assert released == [20, 30, 40, 50]
    failover = WindowShardLogic(_settings(**base), 0, saved)  # the same submission: no re-key
    whole = WindowShardLogic(_settings(**base), 0)
    expected = _estimates(whole.add(full_a))
    got = _estimates(failover.add(a))
    assert len(got) == 4 and all(
        t == u and (x == y).all() for (t, x), (u, y) in zip(got, expected[1:], strict=True)
    )
    assert failover.to_bytes() == whole.to_bytes()


def test_a_state_of_other_settings_or_binding_is_refused_on_restore() -> None:
    """The audit's repro (built with ε = 4, w = 40, W = 10; resumed with ε = 0.5, w = 20, W = 5)
    is refused naming the parameters; so is a state bound to another shard count, shard key or
    domain (the operator stores the binding next to the sketch)."""
    built = _settings(window=40, substream=10, epsilon=4.0, checkpoints=None, budget_ratio=None)
    logic = WindowShardLogic(built, 0)
    logic.add(list(range(15)))
    state = logic.to_bytes()
    other = _settings(window=20, substream=5, epsilon=0.5, checkpoints=None, budget_ratio=None,
                      submission_key=bytes(32 * [7]))  # fmt: skip
    with pytest.raises(ValueError, match="other parameters: window 40 .now 20.; substream 10 .now 5.") as err:
        WindowShardLogic(other, 0, state)
    assert "epsilon 4 (now 1/2)" in str(err.value) and "start afresh" in str(err.value)
    binding = built.binding(0)
    assert WindowShardLogic(built, 0, state, binding=binding).to_bytes() == state
    for change in ({"shards": 3}, {"shard_key": "user"}, {"domain_size": DOMAIN + 1}):
        with pytest.raises(ValueError, match="other parameters: 'shard 0 of 2"):
            WindowShardLogic(dataclasses.replace(built, **change), 0, state, binding=binding)
    with pytest.raises(ValueError, match="none stored"):
        WindowShardLogic(built, 0, state, binding="(none stored)")


# ---------------------------------------------------------------------------- heavy hitters (default)


def zero_noise(sigma2: object, count: int) -> np.ndarray:
    """Noise disabled (tests only): estimates equal the counts where no bucket collides."""
    return np.zeros(count, dtype=np.int64)


def test_default_heavy_hitters_filter_the_estimates_as_the_core() -> None:
    """With no --queries (the CLI default) the release filters its estimates of the whole domain
    instead of asking the core again: the result must equal the core's heavy_hitters, at every
    release, keyed noise."""
    settings = _settings(queries=None)
    items = _stream(900, seed=3)
    mine = items[partition_for(items, SHARDS) == 1]
    logic, ref = WindowShardLogic(settings, 1), _reference(settings, 1)
    releases = [decode(b)[1] for k, b in logic.add(mine) if k == "release"]
    assert len(releases) >= 4
    for k, release in enumerate(releases):
        ref.update_batch(mine[k * W : (k + 1) * W])
        heavy = [(h["item"], h["estimate"]) for h in release["heavy_hitters"]]
        assert heavy == ref.heavy_hitters(GAMMA) and release["heavy_threshold"] == ref.heavy_threshold(GAMMA)
    assert any(release["heavy_hitters"] for release in releases)


def test_default_heavy_hitters_include_an_estimate_exactly_at_the_threshold() -> None:
    """Zero noise and items in distinct buckets: counts bar − 1, bar, bar + 1 in the window; the
    threshold ⌈(γ − ζ)w⌉ is inclusive (Alg. 3 line 8: f̂ >= (γ − ζ)w)."""
    settings = _settings(queries=None, width=512)
    logic = WindowShardLogic(settings, 0)
    logic.sketch = DPSWSketch(settings.params, domain=range(DOMAIN), noise=zero_noise)
    bar = logic.sketch.heavy_threshold(GAMMA)
    buckets = logic.sketch._hashes.buckets(np.arange(DOMAIN))
    alone = [i for i in range(DOMAIN) if all((row == row[i]).sum() == 1 for row in buckets)]
    below, at, above, filler = alone[:4]
    counts = {below: bar - 1, at: bar, above: bar + 1}
    window = [x for x, c in counts.items() for _ in range(c)]
    window += [filler] * (WINDOW - len(window))
    assert 0 < bar <= WINDOW // 4 and filler != at
    [*_, (kind, data)] = logic.add(np.array(window))
    release = decode(data)[1]
    heavy = dict((h["item"], h["estimate"]) for h in release["heavy_hitters"])
    assert kind == "release" and release["heavy_threshold"] == bar
    assert heavy == {at: bar, above: bar + 1, filler: WINDOW - 3 * bar}  # not below (bar − 1)
    assert heavy == dict(logic.sketch.heavy_hitters(GAMMA))


def test_a_release_without_dp_guarantee_claims_no_epsilon() -> None:
    """Injected noise (tests only), also restored from its state (the state keeps the flag): the
    release writes ε = δ = ρ = 0.0 (the schema's doubles are not nullable), never the settings' ε,
    and its theorem and neighbour relation say NO DP GUARANTEE; the production release is unchanged."""
    settings = _settings()
    zeroed = DPSWSketch(settings.params, domain=range(DOMAIN), noise=zero_noise)
    items = _stream(400)[: 3 * W]
    zeroed.update_batch(items[: W + 5])
    for sketch in (zeroed, DPSWSketch.from_bytes(zeroed.to_bytes(), domain=range(DOMAIN))):
        logic = WindowShardLogic(settings, 0)
        logic.sketch = sketch
        [(kind, data)] = logic.add(items[W + 5 : 2 * W])
        release = decode(data)[1]
        assert kind == "release" and (release["epsilon"], release["delta"], release["rho"]) == (0.0, 0.0, 0.0)
        assert release["theorem"].startswith("NO DP GUARANTEE")
        assert release["neighbour_relation"].startswith("NO DP GUARANTEE")
        assert settings.neighbour_relation() in release["neighbour_relation"]
    logic = WindowShardLogic(settings, 0)
    [(_, data)] = logic.add(items[:W])
    release, g = decode(data)[1], settings.params.guarantee()
    assert (release["epsilon"], release["delta"], release["rho"]) == (g.epsilon, g.delta, float(g.rho))
    assert release["neighbour_relation"] == settings.neighbour_relation() and release["theorem"] == g.theorem


def test_test_only_settings_are_test_hooks_not_job_config_fields() -> None:
    """Issue 24 item 6: the injected failure and the sketch states topic are :class:`TestHooks`
    fields (one switch, validated), not fields of the job configs; without the hook (production,
    or hooks that do not name the states topic) no ``state`` output is made."""
    from privstream.jobs.ldp_heavy_hitters import LdpJobConfig

    for config in (SlidingWindowConfig, LdpJobConfig):
        names = {f.name for f in dataclasses.fields(config)}
        assert "hooks" in names and not names & {"faults", "expose_states_topic", "noise_seed"}
    assert TestHooks(expose_states_topic="t-states").expose_states_topic == "t-states"
    with pytest.raises(ValueError, match="^expose_states_topic: "):
        TestHooks(expose_states_topic="bad topic")
    settings, items = _settings(), _stream()
    items = items[partition_for(items, SHARDS) == 0][: 2 * W]
    kinds = {}
    for name, hooks in (("none", None), ("other", TestHooks(fail_after=3)), ("states", STATES)):
        logic = WindowShardLogic(settings, 0, hooks=hooks)
        kinds[name] = [kind for kind, _ in logic.process(_message(items), 0, "events")]
    assert kinds["none"] == kinds["other"] == ["release", "release"]
    assert kinds["states"] == ["release", "state", "release", "state"]
