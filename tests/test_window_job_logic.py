"""The ``sliding-window`` job's Flink-free logic (operators/window_logic.py): over a small sharded
stream, every release equals the core DPSW-Sketch (Wang–Wang–Chen KDD 2024, Alg. 2–3) fed the
shard's items directly under the shard's key, at every substream end; the state is byte-identical
to the core's and resumes byte-identically; misrouted and malformed messages are dead-lettered;
bad parameters are refused naming their option."""

from __future__ import annotations

import argparse
import hashlib
import hmac

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.jobs.sliding_window import SlidingWindowConfig, config_from_args, configure
from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

from privstream.partitioning import partition_for
from privstream.window import DPSWSketch

KEY = bytes(range(32))
SHARDS, W, WINDOW, DOMAIN, GAMMA = 2, 50, 200, 60, 0.1
QUERIES = (0, 1, 2, 3, 17)


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
    logic = WindowShardLogic(settings, shard, state, expose_states=True)
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
        ({"shards": 0}, "shards"),
        ({"queries": (1, DOMAIN)}, "queries"),
        ({"shard_key": "position"}, "shard_key"),
        ({"submission_key": b"short"}, "submission_key"),
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
        SlidingWindowConfig(_settings(), "127.0.0.1:1", ledger_id="")
