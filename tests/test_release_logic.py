"""The job's release step without Flink: replay-stable keyed noise and the count-epoch guarantee,
for both release modes: merged (the shards' fixed-order merge, GSHM / thresholded Laplace) and per
shard (every shard's Alg. 1 sketch released with the same calibration by ``release_disjoint``)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.release_logic import BUDGET_EXHAUSTED, EpochReleaser, ReleaseConfig, noise_error
from privstream.operators.shard_logic import EpochReleaseInput
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks

from privstream.accounting import Budget
from privstream.mechanisms import release_disjoint
from privstream.noise.rng import KeyedRandomSource, SeededRandomSource, new_noise_key
from privstream.partitioning import partition_for
from privstream.sketches import MisraGries, merge_in_order

CONFIG = ReleaseConfig(epsilon=1.0, delta=1e-6, total_epsilon=2.0, total_delta=2e-6, ledger_id="hh/test")
SPEC = SketchSpec("mg", 16, release_mode="merged")  #: the merged path (the fixture below is merged)
PER_SHARD = SketchSpec("mg", 16)  #: the MG default


def _merged(epoch: int) -> EpochReleaseInput:
    shards = []
    for part in ([1] * 900 + [2] * 500 + list(range(3, 80)), [1] * 300 + [5] * 700):
        shard = MisraGries(16)
        shard.update_batch(part)
        shards.append(shard)
    return EpochReleaseInput(epoch, merge_in_order(shards).to_bytes(), len(shards))


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
    other = EpochReleaseInput(0, merged.data[:-8] + bytes(8), merged.shards)  # any other bytes
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

    from privstream.accounting import Budget, LedgerFormatError, PrivacyLedger

    old = PrivacyLedger(Budget(3.0, 3e-6), composition="parallel_epochs", ledger_id="hh/r")
    old.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=0)
    newer = PrivacyLedger.from_bytes(old.to_bytes())
    newer.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=1)
    for stored, topic in ((old, newer), (newer, old)):
        topic.writer = "this-start-up"
        got = PrivacyLedger.from_bytes(reconcile_ledgers(stored.to_bytes(), topic.to_bytes()))
        assert got.sequence == 2 and got.writer == "this-start-up"  # it writes from now on
        topic.writer = ""
    fork = PrivacyLedger.from_bytes(old.to_bytes())
    fork.charge(Budget(0.5, 0.0), mechanism="gshm", epoch=1)
    with pytest.raises(LedgerFormatError, match="divergent"):
        reconcile_ledgers(fork.to_bytes(), newer.to_bytes())
    assert reconcile_ledgers(None, old.to_bytes()) == old.to_bytes()
    assert reconcile_ledgers(old.to_bytes(), None) == old.to_bytes()


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


# ---------------------------------------------------------------------------- per-shard release

SHARDS = 3


def _hash_shards(seed: int, n: int = 6000, empty: int | None = 2) -> list[MisraGries]:
    """A zipf stream routed by the job's partitioner (a hash of the item) into SHARDS Alg. 1
    sketches, batch by batch; shard ``empty`` gets no events (its sketch is empty)."""
    rng = np.random.default_rng(seed)
    items = (rng.zipf(1.3, n) % 400).astype(np.int64)
    parts = partition_for(items, SHARDS)
    shards = []
    for s in range(SHARDS):
        mine = items[parts == s] if s != empty else items[:0]
        sketch = MisraGries(16)
        for start in range(0, len(mine), 97):
            sketch.update_batch(mine[start : start + 97])
        shards.append(sketch)
    return shards


def _per_shard_epoch(epoch: int, shards: list[MisraGries], *, drop_empty: bool = True) -> EpochReleaseInput:
    """What the EpochMerger emits per shard: every shard's bytes (a shard that sent nothing is
    filled with an empty sketch by ``combine``)."""
    sent = {s: sk.to_bytes() for s, sk in enumerate(shards) if not (drop_empty and sk.n == 0)}
    return EpochReleaseInput(epoch, PER_SHARD.combine(sent, SHARDS), SHARDS)


@pytest.mark.parametrize("policy", [TimeEpochs(1000), CountEpochs(5000)], ids=["time", "count"])
def test_per_shard_release_equals_core_release_disjoint(policy) -> None:  # noqa: ANN001
    """The job's per-shard release is core ``release_disjoint`` of the core shard sketches (the
    empty shard included) with the same seeded noise, the public per-shard n_bound of count epochs
    (the epoch size; none for time epochs) and the policy's group size: same items, mechanism (PMG:
    each shard's sketch is a sequential Alg. 1 sketch), error bound and budget, charged once."""
    shards = _hash_shards(5)
    assert [s.n == 0 for s in shards] == [False, False, True]
    config, hooks = CONFIG, TestHooks(noise_seed=11)
    releaser = EpochReleaser(config, PER_SHARD, policy, hooks=hooks)
    data, _ = releaser.release(_per_shard_epoch(4, shards))
    assert data is not None
    record = decode(data)[1]
    n_bound = None if isinstance(policy, TimeEpochs) else policy.size
    assert policy.shard_events_bound == n_bound
    core = release_disjoint(
        shards,
        Budget(config.epsilon, config.delta),
        keys_disjoint=True,
        rng=SeededRandomSource(f"privstream-test-noise:{hooks.noise_seed}:4"),
        epoch=4,
        group_size=policy.group_size,
        n_bound=n_bound,
    )
    assert record["mechanism"] == core.mechanism == "pmg"
    assert [(i["item"], i["count"]) for i in record["items"]] == list(core.items)
    assert len(core.items) >= 3  # heavy items of both non-empty shards are released
    assert record["error_bound"] == core.error_bound.to_dict()
    assert (record["epsilon"], record["delta"]) == (config.epsilon, config.delta)
    assert "of the item's partition" in record["error_bound"]["sketch_term"]
    assert "released on its own and the releases summed" in record["neighbour_relation"]
    assert "parallel composition over partitions" in record["neighbour_relation"]
    head = releaser.ledger.head
    assert head is not None and releaser.ledger.sequence == 1
    assert (head.budget, head.epoch, head.mechanism) == (
        Budget(1.0, 1e-6),
        4,
        "pmg",
    )  # once for the epoch, not once per shard
    # the merged path releases the same epoch with GSHM / thresholded Laplace (PMG is refused there)
    merged_data = SPEC.combine({s: sk.to_bytes() for s, sk in enumerate(shards)}, SHARDS)
    merged, _ = EpochReleaser(config, SPEC, policy, hooks=hooks).release(
        EpochReleaseInput(4, merged_data, SHARDS)
    )
    assert merged is not None and decode(merged)[1]["mechanism"] in ("gshm", "laplace_threshold")


def test_per_shard_input_with_or_without_the_empty_shards_bytes_is_the_same() -> None:
    """A shard that sent no sketch and a shard that sent an empty one give identical release input
    (so identical keyed noise and release)."""
    shards = _hash_shards(6)
    assert _per_shard_epoch(0, shards).data == _per_shard_epoch(0, shards, drop_empty=False).data
    key = new_noise_key()
    a, _ = EpochReleaser(CONFIG, PER_SHARD, TimeEpochs(1000), noise_key=key).release(
        _per_shard_epoch(0, shards)
    )
    b, _ = EpochReleaser(CONFIG, PER_SHARD, TimeEpochs(1000), noise_key=key).release(
        _per_shard_epoch(0, shards, drop_empty=False)
    )
    assert a is not None and b is not None
    assert decode(a)[1]["items"] == decode(b)[1]["items"]  # (release_time may differ)


def test_per_shard_refusals_fail_closed_and_charge_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A refused epoch (misrouted input) publishes nothing and charges nothing in per-shard mode
    too; an epoch beyond the ledger total is refused whole (one charge per epoch, never per shard):
    a "budget exhausted" ReleaseRefused takes its place, no ledger entry, an error logged once."""
    from privstream.connectors.ledger_topic import record_state

    shards = _hash_shards(7, empty=None)
    tight = ReleaseConfig(1.0, 1e-6, 1.5, 1.5e-6, f"hh/tight-{uuid.uuid4().hex[:8]}")
    releaser = EpochReleaser(tight, PER_SHARD, CountEpochs(100), hooks=TestHooks(noise_seed=1))
    refused = EpochReleaseInput(0, _per_shard_epoch(0, shards).data, SHARDS, "partition 1: misrouted")
    assert releaser.release(refused) == (None, None) and releaser.ledger.sequence == 0
    first, entry = releaser.release(_per_shard_epoch(1, shards))
    assert first is not None and releaser.ledger.sequence == 1  # three shards, one charge
    assert entry is not None and record_state(decode(entry)[1]) == releaser.ledger.head
    assert releaser.ledger.spent().epsilon == pytest.approx(1.0)
    # the event-level ledger composes epochs in parallel: releasing the *same* epoch again would
    # spend 2 > 1.5 and is refused before any noise is drawn; so is every later one
    with caplog.at_level("INFO", logger="privstream.operators.release_logic"):
        for _ in range(3):
            notice, entry = releaser.release(_per_shard_epoch(1, shards))
            assert notice is not None and entry is None and releaser.ledger.sequence == 1
            schema, record = decode(notice)
            assert schema == "ReleaseRefused" and record["reason"] == BUDGET_EXHAUSTED
            assert record["epoch"] == 1 and record["epsilon_spent"] == 1.0 and record["epsilon_total"] == 1.5
            assert "--ledger-id" in record["detail"]
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "budget exhausted" in r.message]
    assert len(errors) == 1  # once, not per epoch


def test_per_shard_keyed_noise_replays_identically() -> None:
    shards = _hash_shards(8)
    key = new_noise_key()
    first, replay = (
        EpochReleaser(CONFIG, PER_SHARD, TimeEpochs(1000), noise_key=key).release(
            _per_shard_epoch(2, shards)
        )[0]
        for _ in range(2)
    )
    assert first is not None and replay is not None
    assert decode(first)[1]["items"] == decode(replay)[1]["items"]
    other = EpochReleaser(CONFIG, PER_SHARD, TimeEpochs(1000), noise_key=new_noise_key())
    assert decode(other.release(_per_shard_epoch(2, shards))[0])[1]["items"] != decode(first)[1]["items"]


def test_the_noise_seed_is_a_test_hook_not_a_release_setting() -> None:
    """``ReleaseConfig`` (a production signature) has no test-only field: the seed comes only through
    :class:`TestHooks`, and gives the noise it always gave (the public source
    ``privstream-test-noise:<seed>:<epoch>``): the seeded release equals core ``release_disjoint``
    drawn from that source, item for item; without hooks (and no key) the noise is the CSPRNG's."""
    from dataclasses import fields

    from privstream.jobs.config import TestHooks as ReExported

    assert "noise_seed" not in {f.name for f in fields(ReleaseConfig)}
    assert ReExported is TestHooks
    shards = _hash_shards(5)
    policy = TimeEpochs(1000)
    seeded = []
    for _ in range(2):  # a fresh releaser each time: the seed alone fixes the noise
        releaser = EpochReleaser(CONFIG, PER_SHARD, policy, hooks=TestHooks(noise_seed=11))
        data, _ = releaser.release(_per_shard_epoch(4, shards))
        assert data is not None
        seeded.append(decode(data)[1]["items"])
    core = release_disjoint(
        shards,
        Budget(CONFIG.epsilon, CONFIG.delta),
        keys_disjoint=True,
        rng=SeededRandomSource("privstream-test-noise:11:4"),
        epoch=4,
        group_size=policy.group_size,
    )
    assert seeded[0] == seeded[1] == [{"item": x, "count": c} for x, c in core.items] and core.items
    releaser = EpochReleaser(CONFIG, PER_SHARD, policy, hooks=TestHooks())  # hooks without a seed
    assert releaser._rng(_per_shard_epoch(4, shards)) is None  # the entry point's CSPRNG


def test_the_edge_record_states_the_releases_own_guarantee_and_window() -> None:
    """encode_outcome / release_record: the Avro ``Release`` carries the typed release's items, ε,
    δ, mechanism, relation, privacy unit and epoch, and a time epoch's [start, end) window (none
    for count epochs); a refusal goes out as a ``ReleaseRefused``; a release without its epoch is an
    error, never a message for the wrong epoch."""
    from dataclasses import replace

    from privstream.operators.release_logic import ReleaseRefusal, encode_outcome

    policy = TimeEpochs(1000)
    releaser = EpochReleaser(CONFIG, SPEC, policy, hooks=TestHooks(noise_seed=3))
    outcome, _ = releaser.decide(_merged(2))
    assert outcome is not None and outcome.epoch == 2
    import time

    before = int(time.time() * 1000)
    schema, record = decode(encode_outcome(outcome, policy))
    assert schema == "Release"
    assert before <= record["release_time"] <= int(time.time() * 1000)  # ms since the epoch
    assert record["items"] == [{"item": i, "count": int(c)} for i, c in outcome.items]
    assert (
        (record["epsilon"], record["delta"]) == (float(outcome.epsilon), float(outcome.delta)) == (1.0, 1e-6)
    )
    assert record["mechanism"] == str(outcome.mechanism) and record["mechanism"] in (
        "gshm",
        "laplace_threshold",
    )
    assert record["neighbour_relation"] == outcome.relation.render()
    assert record["privacy_unit"] == str(outcome.privacy_unit) == "event"
    assert (record["epoch"], record["window_start"], record["window_end"]) == (2, 2000, 3000)
    assert noise_error(record["error_bound"]) == pytest.approx(noise_error(outcome.error_bound.to_dict()))
    counted = decode(encode_outcome(outcome, CountEpochs(1000)))[1]
    assert (counted["epoch"], counted["window_start"], counted["window_end"]) == (2, None, None)
    with pytest.raises(ValueError, match="epoch"):
        encode_outcome(replace(outcome, epoch=None), policy)
    refusal = ReleaseRefusal(BUDGET_EXHAUSTED, "d", "hh/x", 4, 4000, 5000, 1.0, 1e-6, 2.0, 2e-6, 2.0, 2e-6, 7)
    assert decode(encode_outcome(refusal, policy)) == ("ReleaseRefused", {**refusal.record(), "run_id": None})
