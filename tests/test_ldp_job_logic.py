"""The ``ldp-heavy-hitters`` job's Flink-free logic: releases per epoch, state messages, dead letters,
and a state that survives ``to_bytes`` (what the operator checkpoints)."""

from __future__ import annotations

import json
import pickle
import random
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from privstream.connectors import avro_codec
from privstream.connectors.avro_codec import SchemaRegistry, decode, encode
from privstream.connectors.ldp_producer import report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings, RestoredSettingsError

from privstream.ldp import LdpReport, PublicState, make_client
from privstream.ldp.hg_params import LDP_NEIGHBOUR_RELATION
from privstream.noise.rng import CryptoRandomSource, KeyedRandomSource, SeededRandomSource

D, K = 100, 5


def _settings(**kwargs: object) -> LdpServerSettings:
    rnd = random.Random(0)
    warm = tuple(rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)], k=200))
    args = {"scheme": "cnr", "epsilon": 2.0, "domain_size": D, "k": K, "deployment": "d", "warm_up": warm}
    return LdpServerSettings(**(args | {"epoch_reports": 50, "state_every": 10} | kwargs))  # type: ignore[arg-type]


def test_releases_states_and_dead_letters_survive_a_restore() -> None:
    settings = _settings()
    logic = LdpServerLogic(settings)
    again = settings.initial_server()  # the launcher's copy: the same public version 0
    assert again.public_state() == logic.server.public_state() and again.public_state().version == 0
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    rnd = random.Random(2)
    outputs: list[tuple[str, bytes]] = []
    second_half_values: list[bytes] = []
    for offset in range(120):
        value = encode(
            "LdpReport",
            report_to_record(client.encode(rnd.choices(range(D), [1 / (i + 1) ** 1.5 for i in range(D)])[0])),
        )
        if offset > 60:
            second_half_values.append(value)
        new = logic.process(value, 0, offset, "reports")
        for kind, data in new:  # the client follows the published state, as over Kafka
            if kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
        outputs += new
        if offset == 60:
            first_half = logic.to_bytes()
            second_half_start = len(outputs)
            logic = LdpServerLogic(settings, first_half)  # a restore from a checkpoint
    replay = LdpServerLogic(settings, first_half)  # a second restore from the same state ...
    replayed = [replay.process(v, 0, 61 + i, "reports") for i, v in enumerate(second_half_values)]

    def content(outs: list[tuple[str, bytes]]) -> list[dict]:
        records = [decode(data)[1] for kind, data in outs if kind != "dead-letter"]
        return [{k: v for k, v in r.items() if not k.endswith("_time")} for r in records]

    again_out = [out for outs in replayed for out in outs]
    assert content(again_out) == content(outputs[second_half_start:])  # replay-stable decays
    assert any(kind == "state" for kind, _ in again_out) and any(kind == "release" for kind, _ in again_out)
    kinds = Counter(kind for kind, _ in outputs)
    assert kinds["release"] == 2 and kinds["dead-letter"] == 0
    # the first message re-announces the latest state (version 0 at the start), as after a restore
    assert outputs[0][0] == "state" and state_from_record(decode(outputs[0][1])[1]).version == 0
    assert outputs[second_half_start][0] == "state"  # the restored logic's first message
    releases = [decode(v)[1] for kind, v in outputs if kind == "release"]
    assert [r["epoch"] for r in releases] == [1, 2] and [r["reports"] for r in releases] == [50, 100]
    assert all(
        len(r["items"]) == K and r["items"][0]["estimate"] >= r["items"][-1]["estimate"] for r in releases
    )
    assert "event-level" in releases[0]["privacy_unit"] and releases[0]["epsilon"] <= 2.0
    for kind, value in outputs[1:]:
        if kind == "state":
            assert decode(value)[0] == "HgLdpState" and state_from_record(decode(value)[1]).version > 0
    bad = [
        b"not avro",
        encode(
            "LdpReport",
            report_to_record(LdpReport("hg-cnr", client._canonical, b"\x01", state_version=10**6)),
        ),
        encode("LdpReport", report_to_record(LdpReport("hg-bdr", client._canonical, b"\x01"))),
    ]
    letters = [logic.process(v, 0, 500 + i, "reports") for i, v in enumerate(bad)]
    errors = [decode(out[0][1])[1]["error"].split(":")[0] for out in letters]
    assert errors == ["AvroDecodeError", "stale-state (unknown)", "rejected"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epoch_reports": 0}, "epoch_reports"),
        ({"warm_up": ()}, "warm_up"),
        ({"deployment": ""}, "deployment"),
        ({"k": 1}, "k"),
    ],
)
def test_bad_settings_fail_fast(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _settings(**kwargs)


def test_a_restored_job_does_not_republish_state_version_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """--restore-from: the launcher creates the topics but sends no state (a v0 record would be
    the compacted topic's latest for new clients); a fresh start sends exactly version 0."""
    import privstream.connectors.clients as clients
    import privstream.connectors.topics as topics
    from privstream.jobs.ldp_heavy_hitters import LdpJobConfig, publish_initial_state

    sent: list[tuple[str, bytes]] = []

    class Producer:
        def send(self, topic: str, *, key: bytes, value: bytes) -> None:
            sent.append((topic, value))

        def flush(self) -> None: ...

        def close(self) -> None: ...

    created: list[object] = []
    monkeypatch.setattr(clients, "kafka_producer", lambda bootstrap: Producer())
    monkeypatch.setattr(topics, "create_topics", lambda bootstrap, specs: created.append(specs))
    config = LdpJobConfig(_settings(), bootstrap="127.0.0.1:1")
    restored = LdpJobConfig(_settings(), bootstrap="127.0.0.1:1", restore_from="file:///tmp/chk-7")
    assert publish_initial_state(restored) is False and sent == [] and len(created) == 1
    assert publish_initial_state(config) is True and len(created) == 2
    [(topic, value)] = sent
    assert topic == "ldp-state" and state_from_record(decode(value)[1]).version == 0


def test_the_per_message_state_does_not_hold_the_versions() -> None:
    """The operator rewrites core_bytes after every message and versions_bytes only when a version
    is made: core_bytes must not grow with the kept versions (it was the whole pickled server,
    ≈ 90 KB with 1,025 versions at k = 20) nor hold the random source, and the pair restores the
    same server."""
    settings = _settings(state_every=1, max_lag=300)
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(3))
    rnd = random.Random(4)
    for offset in range(2000):
        client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
        value = encode("LdpReport", report_to_record(client.encode(rnd.randrange(D))))
        logic.process(value, 0, offset, "reports")
    history = logic.server.history
    assert len(history._states) == 301  # max_lag + 1 versions kept
    core, versions = logic.core_bytes(), logic.versions_bytes()
    # nor the per-report random source (a keyed DRBG with its 4 KB buffer): process() replaces it
    # before every report, so it is left out (the restore test above replays identically without it)
    assert len(core) < 2500 and len(versions) < 301 * 40, (len(core), len(versions))
    assert isinstance(pickle.loads(core)[0]._rng, CryptoRandomSource)
    assert isinstance(logic.server._rng, KeyedRandomSource)  # the live server keeps its own
    again = LdpServerLogic(settings, core, versions=versions)
    assert list(again.server.history._states.values()) == list(history._states.values())
    assert again.server.estimates_exact() == logic.server.estimates_exact()
    assert LdpServerLogic(settings, logic.to_bytes()).server.history.latest == history.latest


def _stream(
    logic: LdpServerLogic,
    seed: int,
    n: int,
    follow: bool = True,
    outputs: list[tuple[str, bytes]] | None = None,
) -> list[bytes]:
    """``n`` reports of a skewed stream from a client that follows ``logic``'s states as they are made
    (or keeps the state it read first, ``follow=False``), each processed by ``logic``; returns them
    (and appends what ``logic`` output to ``outputs``, if given)."""
    client = make_client(logic.settings.params, rng=SeededRandomSource(seed))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    rnd, sent = random.Random(seed), []
    for offset in range(n):
        value = encode("LdpReport", report_to_record(client.encode(rnd.choices(range(D), WEIGHTS)[0])))
        sent.append(value)
        out = logic.process(value, 0, offset, "reports")
        for kind, data in out:
            if kind == "state" and follow:
                client.update_state(state_from_record(decode(data)[1]))
        if outputs is not None:
            outputs += out
    return sent


WEIGHTS = [1 / (i + 1) ** 1.2 for i in range(D)]


def _errors(outputs: list[list[tuple[str, bytes]]]) -> Counter[str]:
    return Counter(
        decode(data)[1]["error"].split(":")[0]
        for outs in outputs
        for kind, data in outs
        if kind == "dead-letter"
    )


@pytest.mark.parametrize("scheme", ["dsr", "bdr", "cnr"])
def test_a_fresh_run_on_the_old_topic_applies_none_of_the_old_runs_reports(scheme: str) -> None:
    """A fresh submission (no restore) on existing topics starts a new run: its version numbers
    restart at 0, so version numbers of the old run name other states. Every old report is refused
    ("state digest mismatch" where the number exists in the new run, else "stale-state (unknown)"):
    none is debiased against a different state with the same number (the audit's repro had 63 of
    3,000 DSR reports applied so)."""
    old = LdpServerLogic(_settings(scheme=scheme, epoch_reports=500, state_every=10))
    topic = _stream(old, 1, 3000)
    assert old.latest_version > 5
    new = LdpServerLogic(_settings(scheme=scheme, epoch_reports=500, state_every=10))
    outputs = [new.process(value, 0, offset, "reports") for offset, value in enumerate(topic)]
    errors = _errors(outputs)
    assert new.server.n == 0 and sum(errors.values()) == len(topic)
    assert (
        set(errors) <= {"state digest mismatch", "stale-state (unknown)"}
        and errors["state digest mismatch"] > 0
    )


def test_reports_against_an_aborted_attempts_state_are_dead_lettered() -> None:
    """After a restore the reports of a multi-partition topic may be replayed in another order than
    the failed attempt read them, so the replay may make a version with other contents than the
    aborted attempt published (and tansu shows). A report randomised against such an aborted state
    is dead-lettered ("state digest mismatch"), never mixed in; a report against a state both
    attempts made alike (same run, version and contents) is applied."""
    settings = _settings(scheme="cnr", epoch_reports=10**6, state_every=1)
    checkpoint = LdpServerLogic(settings).to_bytes()
    # two partitions of reports, all randomised against the checkpoint's state
    partitions = [_stream(LdpServerLogic(settings, checkpoint), seed, 80, follow=False) for seed in (11, 12)]
    attempts = []
    for order in ((0, 1), (1, 0)):  # the failed attempt, then the committed replay in another order
        logic = LdpServerLogic(settings, checkpoint)
        for offset, value in enumerate(partitions[order[0]] + partitions[order[1]]):
            logic.process(value, 0, offset, "reports")
        attempts.append(logic)
    aborted, replay = (logic.server.history._states for logic in attempts)
    assert aborted[0] == replay[0]  # the checkpoint's own version
    differ = [v for v in aborted if v in replay and aborted[v] != replay[v]]
    assert differ, "the two interleavings made the same versions; pick other seeds"
    client = make_client(settings.params, rng=SeededRandomSource(13))
    client.update_state(aborted[differ[0]])
    against_aborted = [encode("LdpReport", report_to_record(client.encode(v))) for v in range(20)]
    client.update_state(aborted[0])
    against_shared = [encode("LdpReport", report_to_record(client.encode(v))) for v in range(20)]
    committed = attempts[1]
    before = committed.server.n
    outputs = [committed.process(value, 0, 1000 + i, "reports") for i, value in enumerate(against_aborted)]
    assert _errors(outputs) == {"state digest mismatch": 20} and committed.server.n == before
    outputs = [committed.process(value, 0, 2000 + i, "reports") for i, value in enumerate(against_shared)]
    assert not _errors(outputs) and committed.server.n == before + 20


def _states(outputs: list[list[tuple[str, bytes]]]) -> list[PublicState]:
    return [state_from_record(decode(data)[1]) for outs in outputs for kind, data in outs if kind == "state"]


def test_a_restore_reannounces_its_latest_state_on_its_first_message() -> None:
    """Built at the start or after a restore, the logic re-emits its latest state version on the
    first message it processes, whatever that message's outcome (here undecodable): the latest
    record on the state topic may be a state this run does not hold (an aborted attempt's). It makes
    no new version, and the same restore with the same input emits the same record."""
    settings = _settings(state_every=10)
    logic = LdpServerLogic(settings)
    _stream(logic, 7, 95)
    checkpoint, latest = logic.to_bytes(), logic.server.history.latest
    assert latest is not None and latest.version > 0 and logic.server.n == 95
    first = [LdpServerLogic(settings, checkpoint).process(b"not avro", 0, 95, "r") for _ in range(2)]
    for outs in first:
        assert [kind for kind, _ in outs] == ["state", "dead-letter"]
    assert _states(first) == [latest, latest]  # the checkpoint's latest, no new version
    assert decode(first[0][0][1])[1] | {"published_time": 0} == decode(first[1][0][1])[1] | {
        "published_time": 0
    }
    restored = LdpServerLogic(settings, checkpoint)
    outs = restored.process(b"not avro", 0, 95, "r") + restored.process(b"not avro", 0, 96, "r")
    assert [kind for kind, _ in outs] == ["state", "dead-letter", "dead-letter"]  # once per restore
    # a checkpoint from before the refusal count restores (none counted)
    core, versions = pickle.loads(checkpoint)
    older = pickle.dumps(pickle.loads(core)[:5])
    assert LdpServerLogic(settings, older, versions=versions).refused == 0


def test_reports_against_an_aborted_state_the_replay_did_not_make_do_not_stall_the_server() -> None:
    """The reviewer's scenario: the failed attempt published a state (tansu shows it to
    read_committed readers) that the replay, in another interleaving, did not make. Clients follow
    it, and every report against it is refused ("stale-state (unknown)"): no report is applied, so
    the publishing cadence of applied reports would never publish again (a permanent stall). Every
    `state_every` refused reports the server re-announces its latest state; the clients follow it,
    and their reports are applied again."""
    settings = _settings(
        scheme="cnr", epoch_reports=10**6, state_every=10, noise_key=bytes(range(32)), run_id=bytes(16)
    )
    checkpoint = LdpServerLogic(settings).to_bytes()
    base = LdpServerLogic(settings, checkpoint).server.history.latest
    for seed in range(1, 400):
        partitions = [
            _stream(LdpServerLogic(settings, checkpoint), s, 5, follow=False) for s in (seed, seed + 1000)
        ]
        attempts = []
        for order in ((0, 1), (1, 0)):  # the failed attempt, then the committed replay in another order
            logic = LdpServerLogic(settings, checkpoint)
            replayed = [
                logic.process(v, 0, o, "r") for o, v in enumerate(partitions[order[0]] + partitions[order[1]])
            ]
            attempts.append((logic, replayed))
        (aborted, aborted_out), (replay, replay_out) = attempts
        if aborted.latest_version > base.version == replay.latest_version:  # type: ignore[union-attr]
            break
    else:
        pytest.fail("no interleaving made a version that the other did not")
    foreign = aborted.server.history.latest
    assert foreign is not None and foreign in _states(aborted_out)
    assert _states(replay_out) == [base]  # the replay only re-announced the checkpoint's state
    assert replay.server.n == 10
    client = make_client(settings.params, rng=SeededRandomSource(99))
    client.update_state(foreign)  # the latest record on tansu: the aborted attempt's state
    rnd, outputs = random.Random(5), []
    for i in range(300):
        value = encode("LdpReport", report_to_record(client.encode(rnd.choices(range(D), WEIGHTS)[0])))
        outputs.append(replay.process(value, 0, 10 + i, "r"))
        for kind, data in outputs[-1]:  # the client follows the latest record
            if kind == "state":
                client.update_state(state_from_record(decode(data)[1]))
    stuck = outputs[: settings.state_every]
    assert _errors(stuck) == {"stale-state (unknown)": settings.state_every}
    assert _states(stuck[:-1]) == [] and _states(stuck[-1:]) == [base]  # re-announced, no new version
    assert not _errors(outputs[settings.state_every :]) and replay.server.n == 10 + 300 - settings.state_every
    assert replay.latest_version > base.version  # publishing resumed
    assert _states(outputs)[-1] == replay.server.history.latest


@pytest.mark.parametrize(
    ("kwargs", "options"),
    [
        ({"epsilon": 0.5}, ["--epsilon"]),
        ({"scheme": "bdr"}, ["--light-cells", "--scheme"]),
        ({"k": 6, "alpha": Fraction(1, 2)}, ["--alpha", "--k"]),
        ({"domain_size": 200}, ["--domain"]),
        ({"light_cells": 7}, ["--light-cells"]),
        ({"max_lag": 10}, ["--max-lag"]),
        ({"deployment": "other"}, ["--deployment"]),
        ({"warm_up": (1, 2, 3, 4, 5)}, ["--warm-up"]),
    ],
)
def test_a_restore_with_other_settings_is_refused_naming_the_options(
    kwargs: dict, options: list[str]
) -> None:
    """Restoring a checkpoint with other settings (the audit: ε = 2 restored with --epsilon 0.5
    raised nothing, then every report was refused) fails at once, naming every option that differs
    and both values; only the cadence (epoch_reports, state_every) may change on a restore, and the
    checkpoint's noise key and run id win over the new submission's."""
    settings = _settings(state_every=1)
    logic = LdpServerLogic(settings)
    _stream(logic, 5, 50)
    checkpoint = logic.to_bytes()
    with pytest.raises(RestoredSettingsError) as caught:
        LdpServerLogic(_settings(state_every=1, **kwargs), checkpoint)
    named = [part.split(" ")[0] for part in str(caught.value).split("new deployment: ")[1].split("; ")]
    assert named == options, str(caught.value)
    if "epsilon" in kwargs:
        assert "--epsilon 2.0 (= 2) in the checkpoint, 0.5 (= 1/2) given" in str(caught.value)
        with pytest.raises(RestoredSettingsError, match=r"given$") as caught:
            LdpServerLogic(_settings(state_every=1, epsilon=0.1), checkpoint)
        assert "0.1 (= 3602879701896397/36028797018963968) given" in str(caught.value)  # the float too
    again = LdpServerLogic(_settings(epoch_reports=7, state_every=3), checkpoint)  # cadence only
    assert again.noise_key == logic.noise_key and again.server.history.run_id == settings.run_id
    assert again.server.history.latest == logic.server.history.latest


def test_a_release_states_delta_the_relation_and_the_raw_warm_up() -> None:
    """LdpRelease says what every other release says (ε, δ = 0, the neighbour relation, the unit)
    and that its estimates include the raw, unprotected counts of warm_up_items public items."""
    settings = _settings(epoch_reports=20)
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    outputs = [
        logic.process(encode("LdpReport", report_to_record(client.encode(v % D))), 0, v, "r")
        for v in range(20)
    ]
    [release] = [decode(data)[1] for outs in outputs for kind, data in outs if kind == "release"]
    assert release["delta"] == 0.0 and release["warm_up_items"] == len(settings.warm_up) == 200
    assert release["neighbour_relation"] == LDP_NEIGHBOUR_RELATION and "one report" in release["privacy_unit"]
    assert "any two items" in release["neighbour_relation"] and "warm-up" in release["neighbour_relation"]


def _v1(name: str) -> SchemaRegistry:
    """A registry that writes ``name`` with its v1 schema (what a pre-digest client or server wrote)."""
    schemas = Path(avro_codec.__file__).parent / "schemas"
    registry = SchemaRegistry()
    registry.register(json.loads((schemas / f"{name}.v1.avsc").read_text()))
    return registry


def test_v1_messages_decode_with_defaults_and_reports_without_a_digest_are_refused() -> None:
    """The schemas evolved with defaults: LdpReport.v1 (no state digest), HgLdpState.v1 (no run id
    or digest) and LdpRelease.v1 still decode. A v1 report is dead-lettered ("state digest
    mismatch": it cannot name a state of this run); a v1 state record is not used by clients."""
    settings = _settings()
    logic = LdpServerLogic(settings)
    client = make_client(settings.params, rng=SeededRandomSource(1))
    client.update_state(logic.server.history.latest)  # type: ignore[arg-type]
    record = report_to_record(client.encode(3))
    del record["state_digest"]
    old = _v1("LdpReport").encode("LdpReport", record)
    assert not decode(old)[1]["state_digest"]  # fastavro resolves the bytes default "" to a str
    [(kind, letter)] = [out for out in logic.process(old, 0, 0, "reports") if out[0] != "state"]
    assert kind == "dead-letter" and "no state digest" in decode(letter)[1]["error"]
    assert decode(letter)[1]["error"].startswith("state digest mismatch: state_version 0")
    state = decode(settings.state_message(logic.server)[1])[1]
    assert state_from_record(state) == logic.server.history.latest
    v1_state = {k: v for k, v in state.items() if k not in ("run_id", "digest")}
    with pytest.raises(ValueError, match="digest"):
        state_from_record(decode(_v1("HgLdpState").encode("HgLdpState", v1_state))[1])
    with pytest.raises(ValueError, match="does not match"):
        state_from_record(state | {"hot_items": [*state["hot_items"][:-1], 99]})
    release = decode(logic.release())[1]
    v1_release = {
        k: v for k, v in release.items() if k not in ("delta", "neighbour_relation", "warm_up_items")
    }
    assert decode(_v1("LdpRelease").encode("LdpRelease", v1_release))[1]["warm_up_items"] == 0
