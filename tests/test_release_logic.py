"""The job's release step without Flink: replay-stable keyed noise and the count-epoch guarantee."""

from __future__ import annotations

import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
from privstream.operators.shard_logic import MergedEpoch
from privstream.operators.sketch_spec import SketchSpec

from privstream.noise.rng import KeyedRandomSource, new_noise_key
from privstream.sketches import MisraGries, merge_misra_gries

CONFIG = ReleaseConfig(epsilon=1.0, delta=1e-6, total_epsilon=2.0, total_delta=2e-6, ledger_id="hh/test")
SPEC = SketchSpec("mg", 16)


def _merged(epoch: int) -> MergedEpoch:
    shards = []
    for part in ([1] * 900 + [2] * 500 + list(range(3, 80)), [1] * 300 + [5] * 700):
        shard = MisraGries(16)
        shard.update_batch(part)
        shards.append(shard)
    return MergedEpoch(epoch, merge_misra_gries(shards).to_bytes(), len(shards))


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
    assert record["error_bound"] > timed["error_bound"]  # half the ε per step: more noise


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
    data-driven-watermark assumption; punctuation-closed epochs carry none."""
    from privstream.operators.epochs import DATA_DRIVEN_WATERMARK_ASSUMPTION

    window = TimeEpochs(1000, neighbour_assumption=DATA_DRIVEN_WATERMARK_ASSUMPTION)
    plain = _release(TimeEpochs(1000), new_noise_key())["neighbour_relation"]
    assert DATA_DRIVEN_WATERMARK_ASSUMPTION not in plain
    shards = SPEC.shard_relation
    assert plain.endswith(shards)
    assert (
        _release(window, new_noise_key())["neighbour_relation"]
        == plain.removesuffix(shards) + DATA_DRIVEN_WATERMARK_ASSUMPTION + shards
    )
