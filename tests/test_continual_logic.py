"""The continual-monitor job's node and aggregator bodies (no Flink): their releases equal the core
protocols fed the same time steps; a punctuation closes steps (empty ones too); state round trips;
an adversarial neighbour (one early event replaced) changes only its own step's block per level."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.jobs.run_report import RunCounts
from privstream.operators.continual_logic import (
    ContinualAggregator,
    ContinualNode,
    ContinualSettings,
    write_keys,
)
from privstream.operators.epochs import ShardProgress
from privstream.operators.payloads import EventPayload, WatermarkPayload
from privstream.operators.test_hooks import TestHooks

from privstream.continual import PCC, LazyUpdateAggregator, LazyUpdateNode, PdchBfAggregator, PdchBfNode
from privstream.continual.pcc import heavy_hitter_bar

STEP_MS, NODES, STEPS = 1000, 3, 24
HOOKS = TestHooks(noise_seed=3)  #: TESTS ONLY: the nodes' noise keys from a public seed


def settings(mode: str = "lu", keys_dir: str | None = None, **extra: object) -> ContinualSettings:
    base = dict(
        mode=mode, epsilon=4.0, lam=0.25, window=8, universe=12, nodes=NODES, theta=0.3, step_ms=STEP_MS,
        window_items=40, keys_dir=keys_dir,
    )  # fmt: skip
    base.update(extra)
    return ContinualSettings(**base)  # type: ignore[arg-type]


def streams(seed: int = 1) -> list[list[np.ndarray]]:
    """Per node, per step (1..STEPS) the items in arrival order (0–9 items a step, skewed)."""
    rng = np.random.default_rng(seed)
    return [
        [np.minimum(rng.zipf(1.6, rng.integers(0, 10)), 12) - 1 for _ in range(STEPS)] for _ in range(NODES)
    ]


def run_nodes(s: ContinualSettings, data: list[list[np.ndarray]], hooks: TestHooks = HOOKS) -> list[bytes]:
    """Feed every node its stream as messages (split across step boundaries), punctuating after
    each step; returns the updates in node order, then step order."""
    out = []
    for node, steps in enumerate(data):
        runner = ContinualNode(node, s, None, {}, ShardProgress(), hooks=hooks)
        out += runner.add(WatermarkPayload("p", 0))[0]  # the clock starts at step 1 = epoch 0
        for t, items in enumerate(steps):
            times = np.full(len(items), t * STEP_MS + 5, dtype=np.int64)
            half = len(items) // 2
            for lo, hi in ((0, half), (half, len(items))):
                out += runner.add(EventPayload(items[lo:hi].astype(np.int64), times[lo:hi]))[0]
            out += runner.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0]
    return out


def interleave(updates: list[bytes]) -> list[bytes]:
    return sorted(updates, key=lambda u: (decode(u)[1]["step"], decode(u)[1]["node"]))


def core_releases(
    s: ContinualSettings, data: list[list[np.ndarray]], hooks: TestHooks = HOOKS
) -> tuple[list[list[tuple[int, int]]], int]:
    """The core protocols fed the same steps (the same noise keys, from ``hooks``' seed): per step
    the released ``(item, count)`` pairs, and the words the nodes sent."""
    steps = len(data[0])
    bf = s.bf_config()
    if bf is None:
        lu = [
            LazyUpdateNode(
                s.epsilon,
                s.lam,
                s.window,
                s.domain,
                noise_key=s.noise_key(i, hooks),
                window_items=s.window_items,
            )
            for i in range(s.nodes)
        ]
        aggregator = LazyUpdateAggregator(s.nodes, s.lam, s.window, window_items=s.window_items)
        lam = lu[0].lam
    else:
        nodes = [
            PdchBfNode(
                i, s.private_key(i), s.roster(), bf,
                PCC(s.epsilon, s.lam, s.window, s.domain, noise_key=s.noise_key(i, hooks)),
            )
            for i in range(s.nodes)
        ]  # fmt: skip
        masked = PdchBfAggregator(s.roster(), bf)
        lam = bf.params.lam
    bar = heavy_hitter_bar(s.theta, lam, s.nodes * (s.window_items or s.window))
    want, words = [], 0
    for t in range(steps):
        if bf is None:
            for i, node in enumerate(lu):
                messages = node.step_items(data[i][t])
                words += 2 * len(messages)
                aggregator.receive(i, messages)
            counts = aggregator.counts()
        else:
            for node in nodes:
                for message in node.step_items(data[node.node_id][t]):
                    words += message.words
                    masked.receive(message)
            masked.discard_expired(t + 1)
            counts = masked.estimates(t + 1)
        want.append([(x, c) for x, c in sorted(counts.items()) if c >= bar])
    return want, words


def test_lu_releases_equal_the_core_protocol() -> None:
    s = settings()
    data = streams()
    updates = run_nodes(s, data)
    assert len(updates) == NODES * STEPS  # one record per node and step, empty steps included
    aggregator = ContinualAggregator(s)
    # node-major order: node 0's every step arrives before node 1's first (nodes run ahead)
    releases = [r for u in updates for r in aggregator.add(u)]
    assert [decode(r)[1]["epoch"] for r in releases] == list(range(1, STEPS + 1))
    want, _ = core_releases(s, data)
    for t, release in enumerate(releases):
        got = decode(release)[1]
        assert [(r["item"], r["count"]) for r in got["items"]] == want[t]
        assert got["mechanism"] == "pdch-lu" and got["delta"] == 0.0
        assert got["epsilon"] == pytest.approx(s.guaranteed_epsilon) and got["epsilon"] < 4.0
    assert any(decode(r)[1]["items"] for r in releases)  # something is heavy


@pytest.mark.parametrize("mode", ["lu", "bf"])
def test_aggregator_state_round_trips_mid_run(mode: str, tmp_path) -> None:
    """Restoring the aggregator from its bytes at any point gives the same later releases (bf: the
    masked tables held are replayed into a fresh PDCH-BF aggregator)."""
    keys = str(write_keys(tmp_path / "keys", NODES)) if mode == "bf" else None
    s = settings(mode, keys, delta=0.01, session="cut")
    updates = run_nodes(s, streams(2))  # node-major: the state holds updates waiting for other nodes
    if mode == "bf":  # interleaved: the state holds decoded-block tables (replayed on restore)
        updates = interleave(updates)
    whole = ContinualAggregator(s)
    expected = [r for u in updates for r in whole.add(u)]
    cut = len(updates) // 2
    first = ContinualAggregator(s)
    got = [r for u in updates[:cut] for r in first.add(u)]
    second = ContinualAggregator(s, first.to_bytes())
    got += [r for u in updates[cut:] for r in second.add(u)]
    strip = [{k: v for k, v in decode(r)[1].items() if k != "release_time"} for r in got]
    assert strip == [{k: v for k, v in decode(r)[1].items() if k != "release_time"} for r in expected]


def test_node_state_restores_mid_stream() -> None:
    """A node restored from its protocol bytes, steps and clock emits the same updates."""
    s = settings()
    (steps,) = streams(4)[:1]
    store: dict[int, bytes] = {}
    a = ContinualNode(0, s, None, store, ShardProgress(), hooks=HOOKS)
    a.add(WatermarkPayload("p", 0))
    out_a = []
    for t, items in enumerate(steps):
        out_a += a.add(EventPayload(items.astype(np.int64), np.full(len(items), t * STEP_MS, np.int64)))[0]
        if t == 10:
            b = ContinualNode(
                0,
                s,
                a.protocol_bytes(),
                dict(store),
                ShardProgress.from_bytes(a.progress.to_bytes()),
                hooks=HOOKS,
            )
            out_b = list(out_a)
        if t > 10:
            out_b += b.add(EventPayload(items.astype(np.int64), np.full(len(items), t * STEP_MS, np.int64)))[
                0
            ]
        out_a += a.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0]
        if t >= 10:
            out_b += b.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0]
    assert [decode(u)[1]["updates"] for u in out_b] == [decode(u)[1]["updates"] for u in out_a]


def test_an_early_replaced_event_changes_only_its_blocks() -> None:
    """Neighbouring streams: the first event of node 0 replaced. Every later step's items are the
    same (steps are cut by punctuation, not by counts), so the noiseless PCC block contents differ
    only in the blocks containing step 1 (one per level)."""
    data = streams(5)
    other = [list(node) for node in data]
    first = next(t for t, items in enumerate(other[0]) if len(items))
    changed = other[0][first].copy()
    changed[0] = (changed[0] + 1) % 12
    other[0][first] = changed
    a = PCC(4.0, 0.25, 8, noiseless=True)
    b = PCC(4.0, 0.25, 8, noiseless=True)
    differing = set()
    for t in range(STEPS):
        released_a, released_b = a.step_items(data[0][t]), b.step_items(other[0][t])
        assert released_a == released_b  # the block schedule is public
        kept = [blk for blk in released_a if blk in a.stored_blocks]  # (a top block may expire at once)
        differing |= {blk for blk in kept if a.block_values(blk) != b.block_values(blk)}
    assert differing and all(blk.start(a.params) <= first + 1 <= blk.end(a.params) for blk in differing)


def test_bf_releases_equal_the_core_protocol(tmp_path) -> None:
    keys = write_keys(tmp_path / "keys", NODES)
    s = settings("bf", str(keys), lam=0.25, delta=0.01, session="test")
    data = streams(6)
    updates = run_nodes(s, data)
    assert sum(len(decode(u)[1]["tables"]) for u in updates) > 0
    aggregator = ContinualAggregator(s)
    releases = [r for u in interleave(updates) for r in aggregator.add(u)]
    want, _ = core_releases(s, data)
    assert [[(r["item"], r["count"]) for r in decode(x)[1]["items"]] for x in releases] == want
    # the aggregator's state round trips (the masked tables are replayed)
    restored = ContinualAggregator(s, aggregator.to_bytes())
    assert restored.to_bytes() == aggregator.to_bytes()


def test_bad_settings_name_the_option(tmp_path) -> None:
    with pytest.raises(ValueError, match="--mode"):
        settings("xx")
    with pytest.raises(ValueError, match="--keys"):
        settings("bf")
    with pytest.raises(ValueError, match="theta"):
        settings(theta=1.5)
    with pytest.raises(ValueError, match="lam"):
        settings(lam=2.0)


def test_a_restored_lu_node_refuses_other_parameters() -> None:
    s = settings()
    node = ContinualNode(0, s, None, {}, ShardProgress(), hooks=HOOKS)
    node.add(WatermarkPayload("p", 0))
    node.add(WatermarkPayload("p", STEP_MS))
    state = node.protocol_bytes()
    ContinualNode(0, s, state, {}, ShardProgress(), hooks=HOOKS)  # the same parameters restore
    for changed in ({"epsilon": 2.0}, {"window": 16}, {"window_items": 80}):
        with pytest.raises(ValueError, match="restored state was built with other parameters"):
            ContinualNode(0, replace(s, **changed), state, {}, ShardProgress(), hooks=HOOKS)


def test_secrets_are_drawn_per_submission_and_keys_derive_from_them(tmp_path) -> None:
    """The launcher draws the nodes' noise secret (so a node that fails before its first checkpoint
    redraws the same noise) and a PDCH-BF session (labels never repeat across submissions)."""
    keys = write_keys(tmp_path / "keys", NODES)
    bare = settings("bf", str(keys), delta=0.01)  # no hooks: production keys
    a, b = bare.with_secrets(), bare.with_secrets()
    assert a.noise_secret and a.session and (a.noise_secret, a.session) != (b.noise_secret, b.session)
    assert a.noise_key(0) == a.noise_key(0) != a.noise_key(1) and a.noise_key(0) != b.noise_key(0)
    assert a.with_secrets() == a  # a resumed submission that passes them keeps them
    with pytest.raises(ValueError, match="--session"):
        ContinualNode(0, bare, None, {}, ShardProgress())


def test_the_noise_seed_is_a_test_hook_not_a_setting() -> None:
    """``ContinualSettings`` (a production signature) has no test-only field: the seed comes only
    through :class:`TestHooks` and derives the keys it always derived (SHA-256 of the public
    ``privstream-test-continual:<seed>:<node>``); without hooks the secret (or a fresh key) is used."""
    import hashlib
    from dataclasses import fields

    assert "noise_seed" not in {f.name for f in fields(ContinualSettings)}
    s = settings()
    for node in range(NODES):
        want = hashlib.sha256(f"privstream-test-continual:3:{node}".encode()).digest()
        assert s.noise_key(node, HOOKS) == want
    assert s.noise_key(0) is None and s.noise_key(0, TestHooks()) is None  # a fresh key
    secret = s.with_secrets()
    assert secret.noise_key(0, TestHooks()) == secret.noise_key(0) != secret.noise_key(0, HOOKS)


def test_a_restored_bf_node_re_masks_replayed_blocks_identically(tmp_path) -> None:
    """A PDCH-BF node restored from its checkpointed state and replaying the same steps sends
    byte-identical masked tables under the same labels (a label never carries two values)."""
    keys = write_keys(tmp_path / "keys", NODES)
    s = settings("bf", str(keys), delta=0.01, session="replay")
    (steps,) = streams(7)[:1]
    first = ContinualNode(0, s, None, {}, ShardProgress(), hooks=HOOKS)
    first.add(WatermarkPayload("p", 0))
    sent, checkpoint = [], None
    for t, items in enumerate(steps):
        first.add(EventPayload(items.astype(np.int64), np.full(len(items), t * STEP_MS, np.int64)))
        sent.append(first.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0])
        if t == 5:
            checkpoint = (first.protocol_bytes(), ShardProgress.from_bytes(first.progress.to_bytes()))
    assert checkpoint is not None
    again = ContinualNode(0, s, checkpoint[0], {}, checkpoint[1], hooks=HOOKS)
    for t, items in enumerate(steps[6:], start=6):
        again.add(EventPayload(items.astype(np.int64), np.full(len(items), t * STEP_MS, np.int64)))
        replay = again.add(WatermarkPayload("p", (t + 1) * STEP_MS))[0]
        assert [decode(u)[1]["tables"] for u in replay] == [decode(u)[1]["tables"] for u in sent[t]]
    assert sum(len(decode(u)[1]["tables"]) for step in sent[6:] for u in step) > 0


def test_a_roster_that_does_not_match_the_partitions_is_refused(tmp_path) -> None:
    keys = write_keys(tmp_path / "keys", NODES + 1)
    with pytest.raises(ValueError, match="--keys: the roster has nodes"):
        settings("bf", str(keys), delta=0.01)


def _released(records: list[bytes]) -> list[dict[str, object]]:
    return [{k: v for k, v in decode(r)[1].items() if k != "release_time"} for r in records]


def test_an_earlier_runs_leftover_updates_are_dead_lettered_not_applied() -> None:
    """A rerun reads the updates topic from its beginning: the earlier run's updates (another
    session) come first. Each becomes one dead letter with the reason and changes nothing, so the
    new run releases exactly what it would on an empty topic (before: they were applied as the new
    run's steps, or crashed the aggregator with 'node skipped')."""
    old, new = settings(session="earlier-run"), settings(session="this-run")
    leftovers = run_nodes(old, streams(5))[: NODES * STEPS // 2]  # a run stopped half-way
    updates = interleave(run_nodes(new, streams(2)))
    clean = ContinualAggregator(new)
    expected = [r for u in updates for r in clean.add(u)]

    aggregator = ContinualAggregator(new)
    letters = []
    for offset, record in enumerate(leftovers):
        releases, dead = aggregator.take(record, topic="events-updates", partition=0, offset=offset)
        assert releases == [] and len(dead) == 1
        letters.append(decode(dead[0]))
    assert aggregator.to_bytes() == ContinualAggregator(new).to_bytes()  # nothing applied
    schema, letter = letters[-1]
    assert schema == "DeadLetter" and letter["original_value"] == leftovers[-1]
    assert (letter["topic"], letter["offset"]) == ("events-updates", len(leftovers) - 1)
    assert letter["error"].startswith("an earlier run's leftover update on the updates topic, ignored: ")
    assert (
        "update from another run/submission (session 'earlier-run', this run 'this-run')" in letter["error"]
    )
    # what `privstream run` logs about them while it runs: one line, the reason first
    counts = RunCounts()
    for schema, value in letters:
        counts.add(schema, {**value, "run_id": "r"}, run_id="r", ledger_id=None)
    assert list(counts.dead_letter_reasons.items()) == [
        ("an earlier run's leftover update on the updates topic, ignored", len(leftovers))
    ]
    got = [r for u in updates for r in aggregator.take(u, topic="events-updates", partition=0, offset=0)[0]]
    assert _released(got) == _released(expected) and len(got) == STEPS


def test_records_that_are_no_update_of_this_run_are_dead_lettered() -> None:
    """Another mode, more nodes than this run, another schema, undecodable bytes: a dead letter
    naming it each, never an exception out of the aggregator."""
    from privstream.connectors.avro_codec import encode

    s = settings()
    update = decode(run_nodes(s, streams(1))[0])[1]
    cases = {
        "update of mode 'bf'": encode("ContinualUpdate", {**update, "mode": "bf"}),
        f"update from node {NODES}": encode("ContinualUpdate", {**update, "node": NODES}),
        "a EndMarker record": encode("EndMarker", {"producer_id": "p", "events_sent": 1}),
        "undecodable record": b"\x00garbage",
    }
    aggregator = ContinualAggregator(s)
    for reason, record in cases.items():
        releases, dead = aggregator.take(record, topic="u", partition=0, offset=0)
        assert releases == [] and reason in decode(dead[0])[1]["error"]
