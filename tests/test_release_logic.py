"""The job's release step without Flink: replay-stable keyed noise and the count-epoch guarantee."""

from __future__ import annotations

import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.release_logic import EpochReleaser, ReleaseConfig, noise_error
from privstream.operators.shard_logic import MergedEpoch
from privstream.operators.sketch_spec import SketchSpec

from privstream.noise.rng import KeyedRandomSource, new_noise_key
from privstream.sketches import MisraGries, merge_in_order

CONFIG = ReleaseConfig(epsilon=1.0, delta=1e-6, total_epsilon=2.0, total_delta=2e-6, ledger_id="hh/test")
SPEC = SketchSpec("mg", 16)


def _merged(epoch: int) -> MergedEpoch:
    shards = []
    for part in ([1] * 900 + [2] * 500 + list(range(3, 80)), [1] * 300 + [5] * 700):
        shard = MisraGries(16)
        shard.update_batch(part)
        shards.append(shard)
    return MergedEpoch(epoch, merge_in_order(shards).to_bytes(), len(shards))


def _release(policy, key: bytes | None) -> dict:
    data, _ = EpochReleaser(CONFIG, SPEC, policy, noise_key=key).release(_merged(0))
    assert data is not None
    return decode(data)[1]


def test_keyed_noise_replays_identically_and_differs_across_keys() -> None:
    """A restored operator (same checkpointed key) redraws the same release; another key does not
    (the chance that two independent GSHM releases of 3+ keys coincide is far below 1e-6)."""
    key = new_noise_key()
    first, replay = _release(TimeEpochs(1000), key), _release(TimeEpochs(1000), key)
    assert first["items"] == replay["items"]
    assert _release(TimeEpochs(1000), new_noise_key())["items"] != first["items"]


def test_keyed_noise_is_bound_to_the_merged_sketch_and_the_release_parameters() -> None:
    """Same key and epoch but another merged sketch, or other options after a restore: the noise
    stream is independent, never the same noise on a different input (equal 128-bit prefixes of
    two independent streams: probability 2^-128)."""
    from dataclasses import replace

    key = new_noise_key()
    merged = _merged(0)
    other = MergedEpoch(0, merged.data[:-8] + bytes(8), merged.shards)  # any other bytes
    releaser = EpochReleaser(CONFIG, SPEC, TimeEpochs(1000), noise_key=key)
    base = releaser._rng(merged).randbits(128)
    assert releaser._rng(merged).randbits(128) == base  # identical replay
    assert releaser._rng(other).randbits(128) != base
    for config, policy in [(replace(CONFIG, epsilon=0.5), TimeEpochs(1000)), (CONFIG, CountEpochs(1000))]:
        assert EpochReleaser(config, SPEC, policy, noise_key=key)._rng(merged).randbits(128) != base


def test_keyed_source_refuses_short_keys() -> None:
    with pytest.raises(ValueError, match="key"):
        KeyedRandomSource(b"short", "epoch 0")


def test_count_epochs_state_the_replace_relation_with_group_calibration() -> None:
    record = _release(CountEpochs(1000), new_noise_key())
    assert record["neighbour_relation"].startswith("replace one event at a fixed position")
    assert "group privacy" in record["neighbour_relation"]
    assert (record["epsilon"], record["delta"]) == (1.0, 1e-6)
    timed = _release(TimeEpochs(1000), new_noise_key())
    assert timed["neighbour_relation"].startswith("add/remove one event")
    assert noise_error(record["error_bound"]) > noise_error(timed["error_bound"])  # half the ε per step


def test_restored_ledger_is_reconciled_with_the_more_advanced_topic_state() -> None:
    """Restoring an older savepoint must not forget charges the ledger topic recorded later."""
    from privstream.operators.release_logic import reconcile_ledgers

    from privstream.accounting import Budget, PrivacyLedger

    old = PrivacyLedger(Budget(3.0, 3e-6), composition="parallel_epochs", ledger_id="hh/r")
    old.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=0)
    newer = PrivacyLedger.from_bytes(old.to_bytes())
    newer.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=1)
    for stored, topic in ((old, newer), (newer, old)):
        got = PrivacyLedger.from_bytes(reconcile_ledgers(stored.to_bytes(), topic.to_bytes()))
        assert len(got.entries) == 2
    assert reconcile_ledgers(None, old.to_bytes()) == old.to_bytes()
    assert reconcile_ledgers(old.to_bytes(), None) == old.to_bytes()


def test_window_variant_releases_state_the_data_driven_watermark_assumption() -> None:
    """``--operator window --trust-event-time``: the release's neighbour relation carries the
    data-driven-watermark assumption and the unchecked routing, which replaces the job's verified
    routing (composition never strengthens a claim); punctuation-closed epochs carry neither."""
    from privstream.operators.epochs import DATA_DRIVEN_WATERMARK_ASSUMPTION

    window = TimeEpochs(1000, neighbour_assumption=DATA_DRIVEN_WATERMARK_ASSUMPTION)
    plain = _release(TimeEpochs(1000), new_noise_key())["neighbour_relation"]
    windowed = _release(window, new_noise_key())["neighbour_relation"]
    watermark, routing = (c.render() for c in DATA_DRIVEN_WATERMARK_ASSUMPTION)
    assert watermark.startswith("ASSUMES") and routing.startswith("ASSUMES")
    assert watermark not in plain and routing not in plain and "ASSUMES" not in plain
    assert watermark in windowed and routing in windowed
    assert "releases nothing more" in plain and "releases nothing more" not in windowed
    assert "closed by Flink's data-driven watermark" in windowed and "punctuations" in plain
    assert "hash of the item" in plain and "hash of the item" in windowed


def test_avro_release_carries_the_whole_error_bound_and_old_messages_still_decode() -> None:
    """``Release.error_bound`` is an ``ErrorBound`` record (β, the symbolic sketch term, the
    systematic coefficient …), and messages written with ``Release.v1`` (one double) decode to that
    double through the kept v1 schema (Avro resolution into the union's double branch)."""
    import json
    from importlib import resources

    from privstream.connectors.avro_codec import SchemaRegistry, fingerprint

    record = _release(TimeEpochs(1000), new_noise_key())
    bound = record["error_bound"]
    assert set(bound) == {"below", "above", "beta", "sketch_term", "systematic", "derivation"}
    assert bound["beta"] == 0.05 and "N/(k+1)" in bound["sketch_term"] and bound["systematic"] == 0.0
    assert noise_error(bound) == max(bound["below"], bound["above"]) > 0
    v1_text = (resources.files("privstream.connectors") / "schemas" / "Release.v1.avsc").read_text()
    v1 = SchemaRegistry()
    v1.register(json.loads(v1_text))
    assert v1.current("Release").fingerprint != fingerprint("Release")
    old = {**record, "error_bound": 12.5}
    assert decode(v1.encode("Release", old)) == ("Release", old)
    assert noise_error(decode(v1.encode("Release", old))[1]["error_bound"]) == 12.5
