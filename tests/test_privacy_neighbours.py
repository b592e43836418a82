"""Issue 9: the neighbour relation a release states holds on every path from events to the release.

Adversarial neighbouring pairs — one event removed early in a long stream, so that every later
position shifts — through every build path: count-cut micro-batches (``update_batch``), hash-routed
shards merged in a fixed order, PAMG batches of users, and the job's own shard → merge → release
logic (``ShardSketcher`` → ``EpochMerger`` → ``EpochReleaser``) with both epoch kinds.

Every check is *structural* and comes before any check of a ``Build`` label or an API refusal: the
two neighbouring sketches must differ as the cited lemma says (per-counter difference at most 1,
one sign, at most k keys, nested key sets: ``one_signed_step``), and the job-level tests also assert
that the pair does differ, so they cannot pass by comparing a sketch with itself.

The job-level pairs put every item of the adversarial pattern into **one** shard (items picked with
``partition_for``), so removing the early event shifts every later message boundary of that shard;
messages are cut over the shard's whole stream (a message may straddle an epoch boundary), so the
shift reaches every later epoch. Count epochs (replace one event at a fixed position) are checked
as two add/remove steps through the job's own sketch of the epoch without the event: the fixed
position alone would not shift any boundary.

Checked by hand, not part of the suite: with ``update_batch`` reverted to the old path (merge each
batch's exact histogram into the sketch), the 2- and 5-event job tests, both exhaustive job tests
and the audit test fail their structural assertion (counter differences of up to 7, 10, 1 and 41).
1-event messages cannot tell the two apart (merging a one-event histogram is the standard MG step),
and the job's PAMG path has no batches (one user's set per message): old PAMG batches are caught by
``test_pamg_batches_of_users_keep_lemma_8_9_on_the_adversarial_pair``.

The pair ``PATTERN`` is the one that broke the old batch path: with k = 4 and 2-event batches whose
histograms were merged, removing the first event changed one counter by 40 (the audit measured
ε ≥ 5 at a claimed ε = 1). ``old_batch_semantics`` re-creates that path (per-batch summaries merged
in order) to show the pair is adversarial and that the audit has the power to see the leak.

Privacy audit: ``tests/test_privacy_audit.py``'s harness; a correct (ε, δ)-DP mechanism fails one
audit with probability at most 1e-3 (union bound over its one-sided Clopper–Pearson intervals), and
with the fixed seeds here the outcome is deterministic.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.epochs import CountEpochs, EpochPolicy, ShardProgress, TimeEpochs
from privstream.operators.payloads import EventPayload, UserSetPayload, WatermarkPayload
from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
from privstream.operators.shard_logic import EpochMerger, EpochReleaseInput, Misrouted, ShardSketcher
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.state_records import unpack_shard_sketches
from privstream.operators.test_hooks import TestHooks

from privstream.accounting import Budget
from privstream.mechanisms import release, release_disjoint
from privstream.noise import SeededRandomSource
from privstream.partitioning import partition_for
from privstream.sketches import (
    Build,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    merge_in_order,
)
from tests.test_privacy_audit import audit, runs, threshold_events, total_value
from tests.test_sketch_reference import lemma2_case

K = 4
#: [0,0,1,1,2,2,3,3,f,f+1] x 40 with fresh fillers f, plus one early event (removed in the neighbour)
PATTERN = [7] + [x for r in range(40) for x in (0, 0, 1, 1, 2, 2, 3, 3, 100 + 2 * r, 101 + 2 * r)]


def batched_alg1(stream: list[int], k: int, batch: int) -> MisraGries:
    sketch = MisraGries(k)
    for start in range(0, len(stream), batch):
        sketch.update_batch(np.array(stream[start : start + batch], dtype=np.int64))
    return sketch


def old_batch_semantics(stream: list[int], k: int, batch: int) -> StandardMisraGries:
    """What ``update_batch`` used to compute: each count-cut batch summarised, merged in order."""
    parts = []
    for start in range(0, len(stream), batch):
        part = StandardMisraGries(max(k, batch))
        for x in stream[start : start + batch]:
            part.update(x)
        parts.append(part)
    return merge_in_order(parts, k=k)


def max_counter_gap(a: Mapping, b: Mapping) -> int:
    return max((abs(a.get(x, 0) - b.get(x, 0)) for x in a.keys() | b.keys()), default=0)


def one_signed_step(a: Mapping, b: Mapping, k: int) -> int:
    """Assert the structure of one add/remove step between (merged) sketches' counters: Lebeda–Tětek
    Lemma 7.1 / Cor. 7.2 (MG) and Lemma 8.9 / Cor. 8.10 (PAMG) — every difference ``a[x] - b[x]`` is
    in {0, +1}, or every one in {0, -1}, on at most k keys, the key sets nested accordingly. (Lemma 2
    for sequential Alg. 1 sketches implies the same of their positive counters.) Returns how many
    counters differ."""
    diff = {x: a.get(x, 0) - b.get(x, 0) for x in a.keys() | b.keys()}
    changed = {x: d for x, d in diff.items() if d}
    gap = max_counter_gap(a, b)
    assert gap <= 1, f"max counter difference {gap} > 1: {changed}"
    assert len(set(changed.values())) <= 1, f"differences of both signs: {changed}"
    assert len(changed) <= k, f"{len(changed)} counters differ, more than k = {k}"
    if changed:
        smaller, larger = (b, a) if next(iter(changed.values())) > 0 else (a, b)
        assert smaller.keys() <= larger.keys(), "key sets not nested"
    return len(changed)


# ---------------------------------------------------------------- core: one stream, any batching


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 1000])
def test_count_cut_batches_keep_lemma_2_on_the_adversarial_pair(batch: int) -> None:
    """Removing the first event shifts every later batch boundary; the sketch must not care."""
    a, b = batched_alg1(PATTERN, K, batch), batched_alg1(PATTERN[1:], K, batch)
    assert one_signed_step(a.counters(), b.counters(), K) >= 1
    assert a.build is b.build is Build.ALG1_SEQUENTIAL  # PMG's Lemma 2 applies, and is checked:
    lemma2_case(dict(a.slots()), dict(b.slots()), K)


def test_the_adversarial_pair_broke_the_old_batch_path() -> None:
    """The same pair through the old semantics differs by far more than 1 on one counter."""
    old_a, old_b = old_batch_semantics(PATTERN, K, 2), old_batch_semantics(PATTERN[1:], K, 2)
    assert max_counter_gap(old_a.counters(), old_b.counters()) >= 20


def _streams(alphabet: Sequence[int] | int, max_len: int):
    symbols = range(alphabet) if isinstance(alphabet, int) else alphabet
    for n in range(1, max_len + 1):
        yield from itertools.product(symbols, repeat=n)


def test_exhaustive_lemma_2_for_every_deletion_and_batching() -> None:
    """Every stream of length <= 7 over 3 items, k = 1 and 2, every deletion, 2-event batches: the
    counters keep the one-step structure, then the k slots Lemma 2. (k = 1 first: the old batch
    path breaks the structure there, e.g. [0, 0, 1, 2] without its first event.)"""
    pairs = []
    for k in (1, 2):
        for stream in _streams(3, 7):
            s = list(stream)
            full = batched_alg1(s, k, 2)
            for i in range(len(s)):
                minus = batched_alg1(s[:i] + s[i + 1 :], k, 2)
                one_signed_step(full.counters(), minus.counters(), k)
                pairs.append((full, minus, k))
    assert len(pairs) == 2 * sum(n * 3**n for n in range(1, 8))
    for full, minus, k in pairs:
        lemma2_case(dict(full.slots()), dict(minus.slots()), k)


def _hash_shards(stream: list[int], shards: int, keys: list[object] | None = None) -> list[list[int]]:
    parts = partition_for(np.asarray(keys if keys is not None else stream), shards)
    return [[x for x, p in zip(stream, parts.tolist(), strict=True) if p == s] for s in range(shards)]


def test_exhaustive_cor_7_2_for_hash_routed_shards() -> None:
    """Every stream of length <= 6 over 4 items, 2 shards by a hash of the item, 2-event batches per
    shard, merged in shard order: one-signed, <= 1 per counter, <= k keys (Cor. 7.2)."""
    for stream in _streams(4, 6):
        s = list(stream)
        merged = merge_in_order([batched_alg1(p, 2, 2) for p in _hash_shards(s, 2)], k=2).counters()
        for i in range(len(s)):
            t = s[:i] + s[i + 1 :]
            other = merge_in_order([batched_alg1(p, 2, 2) for p in _hash_shards(t, 2)], k=2).counters()
            one_signed_step(merged, other, 2)


def test_user_hash_routed_shards_on_the_adversarial_pair() -> None:
    """Events keyed by user (each event its own user here) in 3 shards: removing the early event
    changes one shard only, and the merged sketches keep the Cor. 7.2 structure."""
    users = list(range(len(PATTERN)))
    big = merge_in_order([batched_alg1(p, K, 2) for p in _hash_shards(PATTERN, 3, users)], k=K).counters()
    small = merge_in_order(
        [batched_alg1(p, K, 2) for p in _hash_shards(PATTERN[1:], 3, users[1:])], k=K
    ).counters()
    one_signed_step(big, small, K)


def _user_sets() -> list[tuple[int, ...]]:
    return [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]


def test_exhaustive_lemma_8_9_for_pamg_batches_of_users() -> None:
    """PAMG, k = 3, m = 2: every stream of <= 4 users' sets, every user removed, batches of 2 users
    through both batch paths: nested keys, differences in {0, +1} (Lemma 8.9)."""
    k, m = 3, 2

    def sketches(us: tuple[tuple[int, ...], ...]) -> tuple[PrivacyAwareMisraGries, PrivacyAwareMisraGries]:
        a, b = PrivacyAwareMisraGries(k, m), PrivacyAwareMisraGries(k, m)
        for start in range(0, len(us), 2):
            chunk = us[start : start + 2]
            a.update_batch(chunk)
            flat = np.array([x for u in chunk for x in u], dtype=np.int64)
            b.update_batch_flat(flat, np.cumsum([0, *map(len, chunk)]))
        return a, b

    for n in range(1, 5):
        for users in itertools.product(_user_sets(), repeat=n):
            full, full_flat = sketches(users)
            for i in range(n):
                minus, minus_flat = sketches(users[:i] + users[i + 1 :])
                one_signed_step(full.counters(), minus.counters(), k)
                one_signed_step(full_flat.counters(), minus_flat.counters(), k)
            assert full.counters() == full_flat.counters()
            assert full.build is full_flat.build is Build.PAMG


@pytest.mark.parametrize("batch", [2, 5])
def test_pamg_batches_of_users_keep_lemma_8_9_on_the_adversarial_pair(batch: int) -> None:
    """PATTERN as users of one item each (m = 1), count-cut batches of users through both batch
    paths: removing the first user shifts every later batch boundary; Lemma 8.9 must hold (the old
    path, which merged each batch's histogram, changed four counters by 40 here)."""
    users = [(x,) for x in PATTERN]

    def both(us: list[tuple[int, ...]]) -> tuple[dict, dict]:
        a, b = PrivacyAwareMisraGries(K, 1), PrivacyAwareMisraGries(K, 1)
        for start in range(0, len(us), batch):
            chunk = us[start : start + batch]
            a.update_batch(chunk)
            b.update_batch_flat(np.array([u[0] for u in chunk], dtype=np.int64), np.arange(len(chunk) + 1))
        return a.counters(), b.counters()

    (big, big_flat), (small, small_flat) = both(users), both(users[1:])
    assert one_signed_step(big, small, K) >= 1
    assert one_signed_step(big_flat, small_flat, K) >= 1
    assert big == big_flat and small == small_flat


def test_pamg_user_hash_shards_merged_keep_cor_8_10() -> None:
    rng = np.random.default_rng(9)
    users = [tuple(sorted({int(x) for x in rng.integers(0, 12, 3)})) for _ in range(300)]
    ids = list(range(len(users)))

    def merged(us: list[tuple[int, ...]], uid: list[int]) -> dict:
        parts = partition_for(np.asarray(uid), 3).tolist()
        shards = []
        for s in range(3):
            sk = PrivacyAwareMisraGries(6, 3)
            sk.update_batch([u for u, p in zip(us, parts, strict=True) if p == s])
            shards.append(sk)
        return merge_in_order(shards).counters()

    one_signed_step(merged(users, ids), merged(users[1:], ids[1:]), 6)


# ---------------------------------------------------------------- the job's shard -> merge -> release

SHARDS = 3
EPOCH_MS = 1000


def keys_in_shard(shard: int, shards: int, n: int, start: int = 0) -> list[int]:
    """The first ``n`` ints >= ``start`` that the job's partitioner puts in ``shard`` of ``shards``."""
    candidates = np.arange(start, start + 20 * shards * n + 100, dtype=np.int64)
    found = candidates[partition_for(candidates, shards) == shard][:n].tolist()
    assert len(found) == n
    return found


#: A job input record: ``(item, event time ms)`` (MG) or ``(user, items, event time ms)`` (PAMG).
Record = tuple


def run_job(
    records: Sequence[Record],
    spec: SketchSpec,
    policy: EpochPolicy,
    *,
    shards: int = SHARDS,
    message: int = 2,
    horizon: int | None = None,
) -> dict[int, EpochReleaseInput]:
    """The job's Flink-free logic, ShardSketcher -> EpochMerger: records routed by the partitioner
    (a hash of the item; of the user for PAMG) and verified by the shards; each shard's stream cut
    *by position* into ``message``-event messages (PAMG: one user's set per message) over the whole
    shard stream, so a message may straddle an epoch. Time epochs: each shard is punctuated at 0,
    at each epoch end before the first message at or past it, and at ``horizon`` (public; pass the
    larger input's) before the end. Returns epoch -> merged epoch (the EpochReleaser's input)."""
    timed = isinstance(policy, TimeEpochs)
    length = policy.length_ms if isinstance(policy, TimeEpochs) else 0
    if timed and horizon is None:
        horizon = (max(r[-1] for r in records) // length + 1) * length
    parts = partition_for(np.asarray([r[0] for r in records]), shards).tolist()
    merger = EpochMerger(shards, spec)
    out: dict[int, EpochReleaseInput] = {}

    def collect(closed: list) -> None:
        for msg in closed:
            for merged in merger.add(msg):
                assert merged.epoch not in out
                out[merged.epoch] = merged

    step = 1 if spec.user_sets else message
    for s in range(shards):
        sketcher = ShardSketcher(s, spec, policy, {}, ShardProgress(), shards)
        mine = [r for r, p in zip(records, parts, strict=True) if p == s]
        clock = 0
        if timed:
            collect(sketcher.add(WatermarkPayload("producer", 0))[0])
        for start in range(0, len(mine), step):
            chunk = mine[start : start + step]
            while timed and clock + length <= min(horizon, chunk[0][-1]):  # type: ignore[type-var]
                clock += length
                collect(sketcher.add(WatermarkPayload("producer", clock))[0])
            if spec.user_sets:
                payload: EventPayload | UserSetPayload = UserSetPayload(*chunk[0])
            else:
                items, times = zip(*chunk, strict=True)
                payload = EventPayload(np.array(items, dtype=np.int64), np.array(times, dtype=np.int64))
            closed, late = sketcher.add(payload)
            assert late == 0
            collect(closed)
        if timed:
            collect(sketcher.add(WatermarkPayload("producer", horizon))[0])  # type: ignore[arg-type]
        collect(sketcher.finish())
    return out


def counters_of(merged: Mapping[int, EpochReleaseInput], spec: SketchSpec) -> dict[int, dict]:
    """Each epoch's counters, decoded as the EpochReleaser decodes its input."""
    return {e: spec.load_merged(m.data).counters() for e, m in merged.items()}


def release_all(merged: Mapping[int, EpochReleaseInput], spec: SketchSpec, policy: EpochPolicy) -> list[dict]:
    """Release every merged epoch through the job's EpochReleaser (seeded test noise)."""
    config = ReleaseConfig(1.0, 1e-6, 100.0, 1e-3, "hh/neighbours")
    releaser = EpochReleaser(config, spec, policy, hooks=TestHooks(noise_seed=9))
    out = []
    for epoch in sorted(merged):
        data, _ = releaser.release(merged[epoch])
        assert data is not None
        out.append(decode(data)[1])
    return out


MG = SketchSpec("mg", K, release_mode="merged")  #: the merged release path (Cor. 7.2)
_SHARD0 = keys_in_shard(0, SHARDS, 85)
#: all in shard 0: four heavy items, the early event, 80 fresh fillers
HEAVY, EARLY, FILLERS = _SHARD0[:4], _SHARD0[4], _SHARD0[5:85]
OTHER = keys_in_shard(1, SHARDS, 1)[0]  #: an item of another shard


def blocks(rep: int, fillers: int, n: int = 40) -> list[int]:
    """The early event, then ``n`` blocks of each heavy item ``rep`` times and ``fillers`` fresh
    fillers (OTHER after every 4th block): all but OTHER in shard 0, so removing the early event
    shifts every later message boundary of shard 0."""
    items = [EARLY]
    for r in range(n):
        items += [h for h in HEAVY for _ in range(rep)] + FILLERS[fillers * r : fillers * (r + 1)]
        items += [OTHER] if r % 4 == 0 else []
    return items


#: event i at 10 i ms: 100 events per 1000 ms epoch, epochs 0-4; the early event is at time 0
JOB_EVENTS = [(x, 10 * i) for i, x in enumerate(blocks(2, 2))]
JOB_HORIZON = 5 * EPOCH_MS


def test_the_job_patterns_are_in_one_shard() -> None:
    """Without this the pairs are not adversarial: hash routing would split them across shards."""
    items = np.asarray([x for x, _ in JOB_EVENTS])
    assert set(partition_for(items[items != OTHER], SHARDS).tolist()) == {0}
    assert partition_for(np.asarray([OTHER]), SHARDS).tolist() == [1]
    users = np.asarray([u for u, _, _ in JOB_USERS])
    assert set(partition_for(users, SHARDS).tolist()) == {0, 1}
    assert set(partition_for(users[:6], SHARDS).tolist()) == {0}


@pytest.mark.parametrize("message", [1, 2, 5])
def test_job_time_epochs_keep_cor_7_2_when_an_early_event_is_removed(message: int) -> None:
    """Removing the early event shifts every later message boundary of shard 0, in every epoch.
    Every epoch's merged sketches keep Cor. 7.2; exactly the removed event's epoch changes, on all
    k counters (the most Cor. 7.2 allows); the sketches do not depend on the message size; the
    releases state add/remove one event and the item-hash shards."""
    policy = TimeEpochs(EPOCH_MS)
    big = run_job(JOB_EVENTS, MG, policy, message=message, horizon=JOB_HORIZON)
    small = run_job(JOB_EVENTS[1:], MG, policy, message=message, horizon=JOB_HORIZON)
    a, b = counters_of(big, MG), counters_of(small, MG)
    assert sorted(a) == sorted(b) == [0, 1, 2, 3, 4]
    changed = {e: one_signed_step(a[e], b[e], K) for e in a}
    assert changed == {0: K, 1: 0, 2: 0, 3: 0, 4: 0}
    assert a == counters_of(run_job(JOB_EVENTS, MG, policy, message=1, horizon=JOB_HORIZON), MG)
    for record in release_all(big, MG, policy):
        assert record["mechanism"] == "gshm"
        assert record["neighbour_relation"].startswith("add/remove one event")
        assert "hash of the item" in record["neighbour_relation"]


def epoch_records(
    records: Sequence[Record], epoch: int, size: int, drop: int, shards: int = SHARDS
) -> list[Record]:
    """The records of every shard's count epoch ``epoch`` (size ``size``), without record ``drop``:
    run alone, the job's epoch 0 of these is its sketch of that epoch with the record removed."""
    parts = partition_for(np.asarray([r[0] for r in records]), shards).tolist()
    seen = [0] * shards
    out = []
    for i, (r, p) in enumerate(zip(records, parts, strict=True)):
        if seen[p] // size == epoch and i != drop:
            out.append(r)
        seen[p] += 1
    return out


def assert_replacement(a: Mapping, b: Mapping, mid: Mapping, k: int) -> None:
    """Count epochs, group size 2: ``a`` -> ``mid`` (remove) -> ``b`` (add), each step Cor. 7.2."""
    one_signed_step(a, mid, k)
    one_signed_step(mid, b, k)


@pytest.mark.parametrize("message", [1, 2, 5])
def test_job_count_epochs_keep_the_replace_relation(message: int) -> None:
    """Count epochs state "replace one event at a fixed position of one shard's stream by one routed
    to the same shard", calibrated for its remove + add (group size 2). Replacing the early event by
    a heavy item of shard 0 changes only epoch 0, and that pair is two add/remove steps that each
    keep Cor. 7.2, through the job's own sketch of epoch 0 with the event removed. Replacing it by
    an item of another shard is not covered by the relation: later epochs shift."""
    size = 100
    policy = CountEpochs(size)
    a_epochs = run_job(JOB_EVENTS, MG, policy, message=message)
    b_epochs = run_job([(HEAVY[0], 0), *JOB_EVENTS[1:]], MG, policy, message=message)
    mid_epochs = run_job(epoch_records(JOB_EVENTS, 0, size, drop=0), MG, policy, message=message)
    a, b, mid = counters_of(a_epochs, MG), counters_of(b_epochs, MG), counters_of(mid_epochs, MG)
    assert sorted(a) == sorted(b) == [0, 1, 2, 3, 4] and sorted(mid) == [0]
    assert_replacement(a[0], b[0], mid[0], K)
    assert a[0] != b[0] and all(a[e] == b[e] for e in range(1, 5))
    for record in release_all(a_epochs, MG, policy):
        assert record["neighbour_relation"].startswith("replace one event at a fixed position")
        assert "group privacy" in record["neighbour_relation"]
    cross = counters_of(run_job([(OTHER, 0), *JOB_EVENTS[1:]], MG, policy, message=message), MG)
    assert any(cross.get(e) != a[e] for e in range(1, 5))


PAMG = SketchSpec("pamg", K, 2)
_USERS0, _USERS1 = keys_in_shard(0, SHARDS, 201), keys_in_shard(1, SHARDS, 10)


def _job_user_sets() -> list[tuple[int, tuple[int, ...]]]:
    """An early user, then 40 blocks of five shard-0 users (four heavy pairs, two fresh fillers),
    a shard-1 user after every 4th block."""
    out = [(_USERS0[0], (EARLY, FILLERS[0]))]
    pairs = [(HEAVY[0], HEAVY[1]), (HEAVY[2], HEAVY[3]), (HEAVY[0], HEAVY[2]), (HEAVY[1], HEAVY[3])]
    for r in range(40):
        sets = [*pairs, (FILLERS[2 * r], FILLERS[2 * r + 1])]
        out += [(_USERS0[1 + 5 * r + j], s) for j, s in enumerate(sets)]
        out += [(_USERS1[r // 4], (HEAVY[0], OTHER))] if r % 4 == 0 else []
    return out


#: user set i at 10 i ms: epochs 0-2
JOB_USERS = [(u, items, 10 * i) for i, (u, items) in enumerate(_job_user_sets())]


@pytest.mark.parametrize("removed", [0, 3, 5])
def test_job_pamg_keeps_cor_8_10_when_an_early_user_is_removed(removed: int) -> None:
    """User-level job: user-hash routing (the early users all in shard 0), time epochs, one user's
    set per message. Removing an early user changes only its epoch, by a non-empty difference with
    the Lemma 8.9 / Cor. 8.10 structure (one sign, <= 1 per counter, <= k keys, nested key sets);
    the releases state the user-hash shards and Cor. 8.10. (A message is one user's set, so the
    job's PAMG path has no batches of users; those are the exhaustive Lemma 8.9 test's.)"""
    policy = TimeEpochs(EPOCH_MS)
    horizon = 3 * EPOCH_MS
    big = run_job(JOB_USERS, PAMG, policy, horizon=horizon)
    small = run_job(JOB_USERS[:removed] + JOB_USERS[removed + 1 :], PAMG, policy, horizon=horizon)
    a, b = counters_of(big, PAMG), counters_of(small, PAMG)
    assert sorted(a) == sorted(b) == [0, 1, 2]
    changed = {e: one_signed_step(a[e], b[e], K) for e in a}
    assert [e for e, n in changed.items() if n] == [0], changed
    for record in release_all(big, PAMG, policy):
        assert record["mechanism"] == "gshm"
        assert "hash of the user" in record["neighbour_relation"]
        assert "8.10" in record["neighbour_relation"]


# ---------------------------------------------------------------- exhaustive job-level pairs

#: k = 1, 2 shards: three items of shard 0 and one of shard 1; 2-event messages
EX = SketchSpec("mg", 1, release_mode="merged")
EX_ITEMS = [*keys_in_shard(0, 2, 3), keys_in_shard(1, 2, 1)[0]]


class _Job:
    """run_job on 2 shards with 2-event messages, memoised on what the job's output depends on
    (each record's item and epoch, for time epochs; the items in order, for count epochs)."""

    def __init__(self, policy: EpochPolicy) -> None:
        self.policy = policy
        self.cache: dict[tuple, dict[int, dict]] = {}

    def __call__(self, records: Sequence[Record], horizon: int | None = None) -> dict[int, dict]:
        length = self.policy.length_ms if isinstance(self.policy, TimeEpochs) else None
        key = (tuple((x, t // length if length else 0) for x, t in records), horizon)
        if key not in self.cache:
            merged = run_job(records, EX, self.policy, shards=2, message=2, horizon=horizon)
            self.cache[key] = counters_of(merged, EX)
        return self.cache[key]


def test_exhaustive_job_time_epochs_every_deletion() -> None:
    """Every stream of length <= 6 over EX_ITEMS, event i at 10 i ms, time epochs of 30 ms (three
    events) closed by punctuation, every deletion: every epoch's merged sketches keep Cor. 7.2 and
    only the deleted event's epoch changes."""
    job = _Job(TimeEpochs(30))
    pairs = changed = 0
    for stream in _streams(EX_ITEMS, 6):
        records = [(x, 10 * i) for i, x in enumerate(stream)]
        horizon = (10 * (len(records) - 1) // 30 + 1) * 30
        a = job(records, horizon)
        for i in range(len(records)):
            b = job(records[:i] + records[i + 1 :], horizon)
            diff = {e: one_signed_step(a[e], b[e], 1) for e in a}
            assert [e for e, n in diff.items() if n] in ([], [10 * i // 30]), (stream, i, a, b)
            pairs, changed = pairs + 1, changed + bool(sum(diff.values()))
    assert pairs == sum(n * 4**n for n in range(1, 7)) and changed > pairs // 2


def test_exhaustive_job_count_epochs_every_replacement() -> None:
    """Every stream of length <= 6 over EX_ITEMS, count epochs of 4 events per shard, every shard-0
    event replaced by each other shard-0 item: only its epoch changes, by a remove + add that each
    keep Cor. 7.2 (through the job's sketch of that epoch with the event removed)."""
    size = 4
    job = _Job(CountEpochs(size))
    shard0 = set(EX_ITEMS[:3])
    pairs = 0
    for stream in _streams(EX_ITEMS, 6):
        records = [(x, 0) for x in stream]
        a = job(records)
        for i, x in enumerate(stream):
            if x not in shard0:
                continue
            epoch = sum(1 for y in stream[:i] if y in shard0) // size
            mid = job(epoch_records(records, epoch, size, drop=i, shards=2)).get(0, {})
            for y in shard0 - {x}:
                b = job([*records[:i], (y, 0), *records[i + 1 :]])
                assert sorted(a) == sorted(b)
                assert_replacement(a[epoch], b[epoch], mid, 1)
                assert all(a[e] == b[e] for e in a if e != epoch), (stream, i, y)
                pairs += 1
    assert pairs > 0


# ---------------------------------------------------------------- the audit on the worst job pair

BUDGET = Budget(1.0, 1e-3)


def gshm(sketch: object, rng: SeededRandomSource):
    return release(sketch, BUDGET, mechanism="gshm", rng=rng).items


def test_audit_passes_on_the_worst_job_pair_and_catches_the_old_batch_path() -> None:
    """The worst job-level pair: removing the early event of blocks(3, 2) (2-event messages, one
    10 s time epoch holding the whole stream) changes all k counters of the merged epoch sketch by 1
    — the most Cor. 7.2 allows — at counts that GSHM releases. The job releases it with GSHM; the
    audit of GSHM on the two merged sketches finds no violation (false-failure rate <= 1e-3 per
    audit, deterministic with these seeds). Power: the same audit flags the old batch path's pair."""
    policy = TimeEpochs(10 * EPOCH_MS)
    records = [(x, 10 * i) for i, x in enumerate(blocks(3, 2))]
    big = run_job(records, MG, policy)
    small = run_job(records[1:], MG, policy, horizon=10 * EPOCH_MS)
    a_sk, b_sk = MG.load_merged(big[0].data), MG.load_merged(small[0].data)
    assert one_signed_step(a_sk.counters(), b_sk.counters(), K) == K
    assert release_all(big, MG, policy)[0]["mechanism"] == "gshm"
    n = 3000
    stat = total_value(sorted(a_sk.counters().keys() | b_sk.counters().keys()))
    events = threshold_events(stat, runs(gshm, a_sk, 31, 1000))
    outs_a = runs(gshm, a_sk, 32, n)
    violations, _ = audit(outs_a, runs(gshm, b_sk, 33, n), events)
    assert not violations, violations
    assert sum(1 for o in outs_a if len(o) == K) > n // 2  # the differing counters are released
    # power: the same audit on the old batch path's pair (the leak the issue measured) fails
    old_a, old_b = old_batch_semantics(PATTERN, K, 2), old_batch_semantics(PATTERN[1:], K, 2)
    stat = total_value(sorted(old_a.counters().keys() | old_b.counters().keys()))
    events = threshold_events(stat, runs(gshm, old_a, 34, 1000))
    violations, eps_lower = audit(runs(gshm, old_a, 35, n), runs(gshm, old_b, 36, n), events)
    assert violations and eps_lower > 3


# ---------------------------------------------------------------- per-shard release (the MG default)

#: the job's default for MG: every shard's Alg. 1 sketch released with PMG, the releases summed
PS = SketchSpec("mg", K)


def shard_bytes_of(merged: Mapping[int, EpochReleaseInput]) -> dict[int, list[bytes]]:
    """Each epoch's per-shard release input: every shard's sketch bytes, in shard order."""
    return {e: unpack_shard_sketches(m.data) for e, m in merged.items()}


def changed_shards(a: Mapping[int, list[bytes]], b: Mapping[int, list[bytes]]) -> set[tuple[int, int]]:
    """(epoch, shard) whose sketch bytes differ (both inputs must release the same epochs)."""
    assert sorted(a) == sorted(b)
    assert all(len(a[e]) == len(b[e]) for e in a)
    return {(e, s) for e in a for s in range(len(a[e])) if a[e][s] != b[e][s]}


def slots_of(data: bytes) -> dict:
    sketch = MisraGries.from_bytes(data)
    assert sketch.build is Build.ALG1_SEQUENTIAL  # PMG's Lemma 2 applies to exactly this build
    return dict(sketch.slots())


def test_the_per_shard_spec_is_the_mg_default() -> None:
    assert PS.per_shard and PS.keys_disjoint and not MG.per_shard and not PAMG.per_shard


@pytest.mark.parametrize("message", [1, 2, 5])
def test_job_per_shard_time_epochs_change_one_shard_by_lemma_2(message: int) -> None:
    """Per shard: removing the early event (hash-routed to shard 0, shifting every later message
    boundary of shard 0) changes exactly one shard's sketch of exactly one epoch — shard 0's epoch 0
    — and that pair is a Lemma 2 pair of sequential Alg. 1 sketches (one counter by 1, or all k by
    1, |T ∩ T'| >= k-2), what PMG's Thm 8 needs. Every other shard's bytes are identical in every
    epoch (parallel composition); the sketches do not depend on the message size; the releases are
    PMG's and state the partition relation and the item-hash shards."""
    policy = TimeEpochs(EPOCH_MS)
    big = run_job(JOB_EVENTS, PS, policy, message=message, horizon=JOB_HORIZON)
    small = run_job(JOB_EVENTS[1:], PS, policy, message=message, horizon=JOB_HORIZON)
    a, b = shard_bytes_of(big), shard_bytes_of(small)
    assert sorted(a) == [0, 1, 2, 3, 4] and all(len(v) == SHARDS for v in a.values())
    assert changed_shards(a, b) == {(0, 0)}
    lemma2_case(slots_of(a[0][0]), slots_of(b[0][0]), K)
    assert MisraGries.from_bytes(a[0][0]).n == MisraGries.from_bytes(b[0][0]).n + 1
    assert a == shard_bytes_of(run_job(JOB_EVENTS, PS, policy, message=1, horizon=JOB_HORIZON))
    for record in release_all(big, PS, policy):
        assert record["mechanism"] == "pmg"
        assert record["neighbour_relation"].startswith("add/remove one event in one of the partitions")
        assert "hash of the item" in record["neighbour_relation"]


@pytest.mark.parametrize("message", [1, 2, 5])
def test_job_per_shard_count_epochs_replace_changes_one_shard_one_epoch(message: int) -> None:
    """Count epochs per shard: replacing the early event by a heavy item of the same shard changes
    only shard 0's epoch 0 (the fixed position shifts nothing), by a remove + add that are each a
    Lemma 2 pair through the job's own shard-0 sketch of epoch 0 without the event. Replacing it by
    an item routed to another shard is not covered by the relation: later epochs shift."""
    size = 100
    policy = CountEpochs(size)
    a_epochs = run_job(JOB_EVENTS, PS, policy, message=message)
    b_epochs = run_job([(HEAVY[0], 0), *JOB_EVENTS[1:]], PS, policy, message=message)
    mid_epochs = run_job(epoch_records(JOB_EVENTS, 0, size, drop=0), PS, policy, message=message)
    a, b, mid = shard_bytes_of(a_epochs), shard_bytes_of(b_epochs), shard_bytes_of(mid_epochs)
    assert sorted(a) == [0, 1, 2, 3, 4] and sorted(mid) == [0]
    assert changed_shards(a, b) == {(0, 0)}
    lemma2_case(slots_of(a[0][0]), slots_of(mid[0][0]), K)  # remove the early event
    lemma2_case(slots_of(b[0][0]), slots_of(mid[0][0]), K)  # add the replacement at its position
    assert mid[0][1:] == a[0][1:]  # the other shards' epoch 0 is the job's, untouched
    for record in release_all(a_epochs, PS, policy):
        assert record["mechanism"] == "pmg"
        assert record["neighbour_relation"].startswith("replace one event at a fixed position")
    cross = shard_bytes_of(run_job([(OTHER, 0), *JOB_EVENTS[1:]], PS, policy, message=message))
    assert any(cross.get(e) != a[e] for e in range(1, 5))  # another shard's item: later epochs shift


class _ShardJob:
    """run_job per shard on 2 shards with 2-event messages (k = 1), memoised like :class:`_Job`."""

    def __init__(self, policy: EpochPolicy) -> None:
        self.policy = policy
        self.cache: dict[tuple, dict[int, list[bytes]]] = {}

    def __call__(self, records: Sequence[Record], horizon: int | None = None) -> dict[int, list[bytes]]:
        length = self.policy.length_ms if isinstance(self.policy, TimeEpochs) else None
        key = (tuple((x, t // length if length else 0) for x, t in records), horizon)
        if key not in self.cache:
            merged = run_job(records, PS_EX, self.policy, shards=2, message=2, horizon=horizon)
            self.cache[key] = shard_bytes_of(merged)
        return self.cache[key]


PS_EX = SketchSpec("mg", 1)


def test_exhaustive_job_per_shard_time_epochs_every_deletion() -> None:
    """Every stream of length <= 5 over EX_ITEMS (three items of shard 0, one of shard 1), time
    epochs of 30 ms, every deletion, per shard: at most the deleted event's own (epoch, shard)
    sketch changes, and that pair is a Lemma 2 pair; every other shard sketch is byte-identical."""
    job = _ShardJob(TimeEpochs(30))
    shard_of = dict(zip(EX_ITEMS, partition_for(np.asarray(EX_ITEMS), 2).tolist(), strict=True))
    pairs = changed = 0
    for stream in _streams(EX_ITEMS, 5):
        records = [(x, 10 * i) for i, x in enumerate(stream)]
        horizon = (10 * (len(records) - 1) // 30 + 1) * 30
        a = job(records, horizon)
        for i in range(len(records)):
            b = job(records[:i] + records[i + 1 :], horizon)
            diff = changed_shards(a, b)
            own = (10 * i // 30, shard_of[stream[i]])
            assert diff <= {own}, (stream, i, diff)
            if diff:
                lemma2_case(slots_of(a[own[0]][own[1]]), slots_of(b[own[0]][own[1]]), 1)
            pairs, changed = pairs + 1, changed + bool(diff)
    assert pairs == sum(n * 4**n for n in range(1, 6)) and changed > pairs // 2


def test_exhaustive_job_per_shard_count_epochs_every_replacement() -> None:
    """Every stream of length <= 5 over EX_ITEMS, count epochs of 3 events per shard, every shard-0
    event replaced by each other shard-0 item: only shard 0's sketch of its epoch changes, by a
    remove + add that are each a Lemma 2 pair (through the job's sketch without the event)."""
    size = 3
    job = _ShardJob(CountEpochs(size))
    shard0 = set(EX_ITEMS[:3])
    pairs = 0
    for stream in _streams(EX_ITEMS, 5):
        records = [(x, 0) for x in stream]
        a = job(records)
        for i, x in enumerate(stream):
            if x not in shard0:
                continue
            epoch = sum(1 for y in stream[:i] if y in shard0) // size
            mid_epochs = job(epoch_records(records, epoch, size, drop=i, shards=2))
            mid = mid_epochs[0][0] if mid_epochs else PS_EX.new().to_bytes()
            for y in shard0 - {x}:
                b = job([*records[:i], (y, 0), *records[i + 1 :]])
                assert changed_shards(a, b) <= {(epoch, 0)}, (stream, i, y)
                lemma2_case(slots_of(a[epoch][0]), slots_of(mid), 1)
                lemma2_case(slots_of(b[epoch][0]), slots_of(mid), 1)
                pairs += 1
    assert pairs > 0


def pmg_disjoint(shards: list[MisraGries], rng: SeededRandomSource):
    return release_disjoint(shards, BUDGET, mechanism="pmg", rng=rng).items


def test_audit_passes_on_the_worst_per_shard_job_pair() -> None:
    """The worst per-shard pair of the job (removing the early event of blocks(3, 2), one 10 s epoch,
    2-event messages): one shard's Alg. 1 sketch changes by Lemma 2, the others are identical. The
    per-shard release (PMG on each shard at β/P, summed) passes the audit (false-failure rate
    <= 1e-3 per audit, deterministic with these seeds), and the keys that differ are released."""
    policy = TimeEpochs(10 * EPOCH_MS)
    records = [(x, 10 * i) for i, x in enumerate(blocks(3, 2))]
    big = PS.load_release_input(run_job(records, PS, policy)[0].data)
    small = PS.load_release_input(run_job(records[1:], PS, policy, horizon=10 * EPOCH_MS)[0].data)
    assert [a.to_bytes() == b.to_bytes() for a, b in zip(big, small, strict=True)] == [False, True, True]
    case = lemma2_case(dict(big[0].slots()), dict(small[0].slots()), K)
    assert release_all(run_job(records, PS, policy), PS, policy)[0]["mechanism"] == "pmg"
    n = 2000
    keys = sorted({x for sk in big + small for x in sk.counters()})
    stat = total_value(keys)
    events = threshold_events(stat, runs(pmg_disjoint, big, 37, 600))
    differing = set(big[0].counters()) ^ set(small[0].counters())
    events.append(lambda o: any(x in differing for x, _ in o))
    outs_a = runs(pmg_disjoint, big, 38, n)
    violations, _ = audit(outs_a, runs(pmg_disjoint, small, 39, n), events)
    assert not violations, (case, violations)
    assert sum(1 for o in outs_a if {x for x, _ in o} & set(HEAVY)) > n // 2


# ---------------------------------------------------------------- routing


def test_misrouted_messages_are_refused_before_anything_is_counted() -> None:
    """A position-based producer (round-robin) puts events where the hash does not: the shard refuses
    the whole message and its state is untouched."""
    spec = SketchSpec("mg", K)
    items = np.arange(40, dtype=np.int64)
    wrong = next(s for s in range(SHARDS) if (partition_for(items, SHARDS) != s).any())
    progress = ShardProgress()
    store: dict = {}
    sketcher = ShardSketcher(wrong, spec, CountEpochs(10), store, progress, SHARDS)
    with pytest.raises(Misrouted, match="hash \\(by item\\)"):
        sketcher.add(EventPayload(items, np.zeros(40, dtype=np.int64)))
    assert progress.seen == 0 and store == {}
    user_spec = SketchSpec("mg", K, shard_key="user")
    user_sketcher = ShardSketcher(0, user_spec, CountEpochs(10), {}, ShardProgress(), SHARDS)
    with pytest.raises(Misrouted, match="user id"):
        user_sketcher.add(EventPayload(items[:2], np.zeros(2, dtype=np.int64), (None, None)))
    pamg = SketchSpec("pamg", 4, 2)
    user = next(u for u in range(100) if partition_for(np.asarray([u]), SHARDS)[0] != 0)
    with pytest.raises(Misrouted):
        ShardSketcher(0, pamg, CountEpochs(10), {}, ShardProgress(), SHARDS).add(
            UserSetPayload(user, (1,), 0)
        )
    with pytest.raises(ValueError, match="shard_key"):
        SketchSpec("pamg", 4, 2, shard_key="item")
