"""The ``ldp-heavy-hitters`` job's Flink-free logic: releases per epoch, state messages, dead letters,
and a state that survives ``to_bytes`` (what the operator checkpoints)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.ldp_producer import report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.operators.ldp_logic import LdpServerLogic, LdpServerSettings

from privstream.ldp import LdpReport, make_client
from privstream.noise.rng import SeededRandomSource

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
    releases = [decode(v)[1] for kind, v in outputs if kind == "release"]
    assert [r["epoch"] for r in releases] == [1, 2] and [r["reports"] for r in releases] == [50, 100]
    assert all(
        len(r["items"]) == K and r["items"][0]["estimate"] >= r["items"][-1]["estimate"] for r in releases
    )
    assert "event-level" in releases[0]["privacy_unit"] and releases[0]["epsilon"] <= 2.0
    for kind, value in outputs:
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
    config = LdpJobConfig(_settings(), "127.0.0.1:1")
    restored = LdpJobConfig(_settings(), "127.0.0.1:1", restore_from="file:///tmp/chk-7")
    assert publish_initial_state(restored) is False and sent == [] and len(created) == 1
    assert publish_initial_state(config) is True and len(created) == 2
    [(topic, value)] = sent
    assert topic == "ldp-state" and state_from_record(decode(value)[1]).version == 0


def test_the_per_message_state_does_not_hold_the_versions() -> None:
    """The operator rewrites core_bytes after every message and versions_bytes only when a version
    is made: core_bytes must not grow with the kept versions (it was the whole pickled server,
    ≈ 90 KB with 1,025 versions at k = 20), and the pair restores the same server."""
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
    assert len(core) < 8000 and len(versions) < 301 * 40, (len(core), len(versions))
    again = LdpServerLogic(settings, core, versions=versions)
    assert list(again.server.history._states.values()) == list(history._states.values())
    assert again.server.estimates_exact() == logic.server.estimates_exact()
    assert LdpServerLogic(settings, logic.to_bytes()).server.history.latest == history.latest
