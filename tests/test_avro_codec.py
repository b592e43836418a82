"""Avro single-object codec: round trips for every shipped schema, fingerprints, errors, evolution."""

from __future__ import annotations

import copy
import json

import pytest
from privstream.connectors import avro_codec
from privstream.connectors.avro_codec import (
    MAGIC,
    AvroDecodeError,
    AvroEncodeError,
    SchemaRegistry,
    decode,
    encode,
)

EVENT = {"item": 42, "user_id": "alice", "event_time": 1_700_000_000_000}

SAMPLES: dict[str, list[dict]] = {
    "Event": [
        EVENT,
        {"item": "café", "user_id": None, "event_time": 0},
        {"item": -(2**63), "user_id": 7, "event_time": 1},
    ],
    "EventBatch": [{"events": [EVENT, {"item": "x", "user_id": 3, "event_time": 5}]}, {"events": []}],
    "UserSetEvent": [
        {"user_id": 9, "items": [1, "a", 2], "event_time": 10},
        {"user_id": "u", "items": [], "event_time": 0},
    ],
    "LdpReport": [
        {
            "scheme": "grr",
            "parameters": {"domain_size": "10", "epsilon_ratio": "3/1"},
            "state_version": 0,
            "payload": b"\x07",
            "report_time": 123,
            "state_digest": b"",
        },
        {
            "scheme": "hg-cnr",
            "parameters": {"domain_size": "100", "k": "5"},
            "state_version": 3,
            "payload": b"\x02",
            "report_time": 124,
            "state_digest": bytes(range(16)),
        },
    ],
    "LdpReportBatch": [
        {
            "scheme": "hg-cnr",
            "parameters": {"domain_size": "1000", "k": "20"},
            "state_version": 7,
            "state_digest": bytes(range(16)),
            "report_time": 125,
            "count": 3,
            "payloads": b"\x00\x07\x03\xe8\x01\xf3",
        },
        {
            "scheme": "grr",
            "parameters": {"domain_size": "10"},
            "state_version": 0,
            "state_digest": b"",
            "report_time": 0,
            "count": 1,
            "payloads": b"\x09",
        },
    ],
    "LdpRelease": [
        {
            "deployment": "d1",
            "scheme": "hg-cnr",
            "epoch": 2,
            "reports": 2000,
            "state_version": 17,
            "items": [{"item": 5, "estimate": 812.5}, {"item": 2, "estimate": 0.0}],
            "epsilon": 0.99,
            "privacy_unit": "one report (event-level LDP)",
            "release_time": 123,
            "delta": 0.0,
            "neighbour_relation": "local DP: any two items of one report",
            "warm_up_items": 10000,
            "run_id": "d1-run-7",
        }
    ],
    "WindowRelease": [
        {
            "ledger_id": "sliding-window/events",
            "ledger_sequence": 1,
            "ledger_entry_hash": "ab12",
            "shard": 0,
            "shards": 2,
            "substream": 3,
            "position": 1000,
            "window": 500,
            "window_start": 501,
            "estimates": [{"item": 1, "estimate": 40}, {"item": 2, "estimate": -3}],
            "gamma": 0.05,
            "heavy_threshold": 20,
            "heavy_hitters": [{"item": 1, "estimate": 40}],
            "epsilon": 1.0,
            "delta": 1e-6,
            "rho": 0.05,
            "neighbour_relation": "replace one event",
            "privacy_unit": "one event",
            "composition": "parallel",
            "theorem": "DPSW Lemma 4.1",
            "release_time": 123,
            "windowing": "count",
            "window_end": 1000,
            "window_items": None,
            "run_id": None,
        },
        {
            "ledger_id": "sliding-window/events",
            "ledger_sequence": 2,
            "ledger_entry_hash": "cd34",
            "shard": 1,
            "shards": 2,
            "substream": 9,
            "position": 9999,
            "window": 4000,
            "window_start": 6000,
            "estimates": [],
            "gamma": 0.05,
            "heavy_threshold": 7,
            "heavy_hitters": [],
            "epsilon": 1.0,
            "delta": 1e-6,
            "rho": 0.05,
            "neighbour_relation": "add/remove one event",
            "privacy_unit": "one event",
            "composition": "parallel",
            "theorem": "DPSW Lemma 4.1",
            "release_time": 124,
            "windowing": "event-time",
            "window_end": 9999,
            "window_items": 200,
            "run_id": "3f2a9c1b0d4e4c6e8a1b2c3d4e5f6071",
        },
    ],
    "HgLdpState": [
        {
            "deployment": "d1",
            "scheme": "hg-dsr",
            "parameters": {"domain_size": "10", "k": "3"},
            "version": 4,
            "hot_items": [2, 5, 7],
            "weakest_low": False,
            "dsr_mode": "shrunk",
            "published_time": 123,
            "run_id": b"\x01" * 16,
            "digest": b"\x02" * 16,
        }
    ],
    "SketchSnapshot": [
        {
            "sketch_type": "MisraGries",
            "build": "ALG1_SEQUENTIAL",
            "shard": 3,
            "epoch": 17,
            "n": 1000,
            "data": bytes(range(256)),
            "created_time": 5,
            "run_id": None,
        }
    ],
    "Release": [
        {
            "items": [{"item": 1, "count": 10}, {"item": "b", "count": -2}],
            "epsilon": 1.0,
            "delta": 1e-9,
            "mechanism": "PMG",
            "neighbour_relation": "add/remove one event",
            "privacy_unit": "event",
            "epoch": 4,
            "window_start": None,
            "window_end": None,
            "error_bound": 12.5,
            "release_time": 99,
            "run_id": "3f2a9c1b0d4e4c6e8a1b2c3d4e5f6071",
        },
        {
            "items": [],
            "epsilon": 0.5,
            "delta": 0.0,
            "mechanism": "GSHM",
            "neighbour_relation": "replace one event",
            "privacy_unit": "event",
            "epoch": None,
            "window_start": 1000,
            "window_end": 2000,
            "error_bound": 3.0,
            "release_time": 2001,
            "run_id": None,
        },
    ],
    "LedgerEntry": [
        {
            "ledger_id": "job-1/user-level",
            "sequence": 3,
            "epsilon_spent": 1.5,
            "delta_spent": 1e-7,
            "epsilon_total": 4.0,
            "delta_total": 1e-6,
            "last_charge": "GSHM epoch 3",
            "entry": b"{}",
            "state": None,
            "entry_time": 8,
        }
    ],
    "ContinualUpdate": [
        {
            "node": 2,
            "epoch": 19000,
            "step": 3,
            "mode": "lu",
            "updates": [{"item": 4, "value": 17}, {"item": 9, "value": 0}],
            "tables": [],
            "words": 4,
            "update_time": 5,
            "session": "",
        },
        {
            "node": 0,
            "epoch": 1,
            "step": 1,
            "mode": "bf",
            "updates": [],
            "tables": [b"\x00\x01"],
            "words": 1,
            "update_time": 0,
            "session": "9f" * 16,
        },
    ],
    "LedgerFence": [
        {"ledger_id": "job-1", "nonce": "ab" * 16, "host": "h", "pid": 7, "job_name": "j", "fence_time": 9}
    ],
    "ReleaseRefused": [
        {
            "reason": "budget exhausted",
            "detail": "ledger 'x' has spent ...",
            "ledger_id": "x",
            "epoch": 4,
            "window_start": None,
            "window_end": None,
            "epsilon_requested": 1.0,
            "delta_requested": 1e-6,
            "epsilon_spent": 2.0,
            "delta_spent": 2e-6,
            "epsilon_total": 2.0,
            "delta_total": 2e-6,
            "refused_time": 10,
            "run_id": "3f2a9c1b0d4e4c6e8a1b2c3d4e5f6071",
        }
    ],
    "DeadLetter": [
        {
            "original_value": b"\xff\x00garbage",
            "original_key": None,
            "error": "AvroDecodeError: bad magic",
            "topic": "events",
            "partition": 2,
            "offset": 77,
            "failed_time": 3,
            "run_id": "3f2a9c1b0d4e4c6e8a1b2c3d4e5f6071",
        }
    ],
    "EndMarker": [{"producer_id": "p-1", "events_sent": 12345}],
    "EpochWatermark": [{"producer_id": "p-1", "watermark_ms": 1_700_000_010_000}],
}


def test_samples_cover_every_shipped_schema() -> None:
    assert set(SAMPLES) == set(avro_codec.schema_names())


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_every_schema(name: str) -> None:
    for record in SAMPLES[name]:
        data = encode(name, record)
        assert data[:2] == MAGIC
        assert int.from_bytes(data[2:10], "little") == avro_codec.fingerprint(name)
        assert decode(data) == (name, record)


def test_schemas_are_namespaced_and_fingerprints_distinct() -> None:
    registry = avro_codec.default_registry()
    versions = [registry.current(name) for name in registry.names]
    assert all(v.fullname == f"io.privstream.{v.name}" for v in versions)
    assert len({v.fingerprint for v in versions}) == len(versions)


def test_fingerprints_are_the_avro_specifications_crc64_of_the_canonical_form() -> None:
    """Independent oracle: the Avro specification's CRC-64-AVRO (Rabin fingerprint, written out here
    from the spec's reference algorithm) of each schema's Parsing Canonical Form is its header's
    fingerprint, little-endian — so other Avro implementations read our single-object messages."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)

    def rabin(data: bytes) -> int:
        fp = empty
        for byte in data:
            fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
        return fp

    assert rabin(b'"null"') == 7195948357588979594  # the value the specification's test vectors give
    registry = avro_codec.default_registry()
    for name in registry.names:
        version = registry.current(name)
        assert version.fingerprint == rabin(version.canonical_form.encode())
        assert encode(name, SAMPLES[name][0])[2:10] == version.fingerprint.to_bytes(8, "little")


def test_cross_file_reference_is_expanded() -> None:
    batch = avro_codec.default_registry().current("EventBatch")
    assert '"name":"io.privstream.Event"' in batch.canonical_form


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "empty message"),
        (b"\xc3\x01abc", "too short"),
        (b"\x00\x01" + bytes(8) + b"\x00", "bad magic"),
        (MAGIC + bytes(8) + b"\x00", "unknown schema fingerprint"),
    ],
)
def test_decode_errors_name_the_reason(data: bytes | None, reason: str) -> None:
    with pytest.raises(AvroDecodeError, match=reason) as info:
        decode(data)
    assert reason in info.value.reason


def test_truncated_and_trailing_bodies_are_rejected() -> None:
    data = encode("Event", EVENT)
    with pytest.raises(AvroDecodeError, match="invalid Avro body"):
        decode(data[:-3])
    with pytest.raises(AvroDecodeError, match="trailing bytes"):
        decode(data + b"\x00")


@pytest.mark.parametrize(
    ("name", "record", "message"),
    [
        ("Event", {"item": True, "user_id": None, "event_time": 0}, "not bool"),
        ("Event", {"item": 1.5, "user_id": None, "event_time": 0}, "int or a str"),
        ("Event", {"item": 1, "user_id": None}, "does not match"),
        ("EventBatch", {"events": [{"item": False, "user_id": None, "event_time": 0}]}, "not bool"),
        ("UserSetEvent", {"user_id": 1, "items": [1, 1], "event_time": 0}, "distinct"),
        ("Release", {"items": []}, "does not match"),
    ],
)
def test_encode_rejects_bad_records(name: str, record: dict, message: str) -> None:
    with pytest.raises(AvroEncodeError, match=message):
        encode(name, record)


def test_unknown_schema_name() -> None:
    with pytest.raises(KeyError, match="schema_name"):
        encode("NoSuchSchema", {})


def _event_schema() -> dict:
    return copy.deepcopy(avro_codec.default_registry().current("Event").schema)


def test_evolution_old_writer_resolves_to_current_reader() -> None:
    """An old Event version without user_id keeps decoding; the new field takes its default."""
    old = _event_schema()
    old["fields"] = [f for f in old["fields"] if f["name"] != "user_id"]
    writer_registry = SchemaRegistry()
    writer_registry.register(old)
    data = writer_registry.encode("Event", {"item": 5, "event_time": 9})

    reader_registry = SchemaRegistry()
    reader_registry.register(_event_schema())
    with pytest.raises(AvroDecodeError, match="unknown schema fingerprint"):
        reader_registry.decode(data)  # old fingerprint not registered: refused, not guessed
    reader_registry.register(old, current=False)
    assert reader_registry.decode(data) == ("Event", {"item": 5, "user_id": None, "event_time": 9})
    assert reader_registry.current("Event").fingerprint != writer_registry.current("Event").fingerprint


def test_evolution_new_field_without_default_cannot_read_old_data() -> None:
    new = _event_schema()
    new["fields"].append({"name": "weight", "type": "long"})
    registry = SchemaRegistry()
    old_version = registry.register(_event_schema())
    data = registry.encode("Event", EVENT)
    registry.register(new)  # becomes current (reader); the old fingerprint stays registered
    assert registry.by_fingerprint(old_version.header[2:]) is old_version
    with pytest.raises(AvroDecodeError, match="invalid Avro body"):
        registry.decode(data)


def test_historical_schema_files_are_loaded(tmp_path) -> None:
    old = _event_schema()
    old["fields"] = [f for f in old["fields"] if f["name"] != "user_id"]
    (tmp_path / "Event.avsc").write_text(json.dumps(_event_schema()))
    (tmp_path / "Event.v1.avsc").write_text(json.dumps(old))
    registry = SchemaRegistry()
    registry.load_directory(tmp_path)
    assert registry.names == ("Event",)
    old_writer = SchemaRegistry()
    old_writer.register(old)
    assert registry.decode(old_writer.encode("Event", {"item": "z", "event_time": 1}))[1]["user_id"] is None


#: the schemas that gained ``run_id`` and the file of the version before it
RUN_ID_PREDECESSORS = {
    "Release": "Release.v2.avsc",
    "ReleaseRefused": "ReleaseRefused.v1.avsc",
    "WindowRelease": "WindowRelease.v2.avsc",
    "LdpRelease": "LdpRelease.v2.avsc",
    "DeadLetter": "DeadLetter.v1.avsc",
    "SketchSnapshot": "SketchSnapshot.v1.avsc",
}


@pytest.mark.parametrize("name", sorted(RUN_ID_PREDECESSORS))
def test_messages_written_before_run_ids_still_decode(name: str) -> None:
    """A message written with the schema version before ``run_id`` (kept as ``<Name>.v<N>.avsc``)
    decodes with the shipped registry: the same fields, and ``run_id`` None (its default)."""
    from importlib import resources

    text = (resources.files("privstream.connectors") / "schemas" / RUN_ID_PREDECESSORS[name]).read_text()
    old = json.loads(text)
    assert "run_id" not in {f["name"] for f in old["fields"]}
    writer = SchemaRegistry()
    writer.register(old)
    for record in SAMPLES[name]:
        before = {k: v for k, v in record.items() if k != "run_id"}
        data = writer.encode(name, before)
        assert data[2:10] != avro_codec.default_registry().current(name).header[2:]  # an old fingerprint
        assert decode(data) == (name, {**before, "run_id": None})
