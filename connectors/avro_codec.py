"""Avro codec for every privstream Kafka message: single-object encoding plus a fingerprint registry.

Wire format
-----------
Every message value is one Avro *single-object encoding* (Avro 1.8+ specification, "Single-object
encoding")::

    0xC3 0x01 | CRC-64-AVRO fingerprint of the writer schema (8 bytes, little-endian) | Avro binary body

The fingerprint is taken over the schema's Parsing Canonical Form (so ``doc``, ``default`` and
``logicalType`` attributes do not change it). A reader looks the fingerprint up in its
:class:`SchemaRegistry`, which therefore knows the exact *writer* schema of every message without an
external schema-registry service, and decodes the body with it. Message keys are plain UTF-8 bytes
(not Avro). Schemas live in ``connectors/schemas/<Name>.avsc`` under the namespace ``io.privstream``;
named types may refer to each other across files (``EventBatch`` holds ``io.privstream.Event``).

Time fields carry ``logicalType: timestamp-millis`` in the ``.avsc`` files (so Java/Flink readers
see timestamps), but this Python codec reads and writes them as plain ``int`` milliseconds.

Schema evolution
----------------
- The *current* version of each schema is ``schemas/<Name>.avsc``; it is the reader schema and the
  schema new messages are written with.
- When a schema changes, its previous file is kept as ``schemas/<Name>.v<N>.avsc`` (or registered
  with :meth:`SchemaRegistry.register` ``current=False``). Old fingerprints therefore stay in the
  registry, and messages written with them keep decoding: the body is read with the old writer
  schema and resolved to the current reader schema (Avro schema resolution: fields matched by name,
  fields missing from the writer take the reader's default, fields missing from the reader are
  skipped, numeric promotions such as int -> long apply).
- Hence: a new field must have a default (otherwise old messages cannot be resolved); never change
  a field's type incompatibly or rename a field without an alias; never reuse a name for different
  data. A message whose fingerprint is unknown is not guessed at: it raises :class:`AvroDecodeError`
  and goes to the dead-letter topic (see :mod:`privstream.connectors.dead_letter`).

Failures never pass silently: :func:`decode` raises :class:`AvroDecodeError` (a ``ValueError``)
with the reason (bad magic, unknown fingerprint, truncated or trailing bytes, invalid body);
:func:`encode` raises :class:`AvroEncodeError` naming the schema and the problem.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import UnknownType, to_parsing_canonical_form
from fastavro.schema import fingerprint as fingerprint_of

NAMESPACE = "io.privstream"
MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8


class AvroDecodeError(ValueError):
    """A message could not be decoded; ``reason`` says why (kept in the dead letter)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AvroEncodeError(ValueError):
    """A record does not match its schema (or breaks a rule the schema's doc states)."""


# --- schema handling (fastavro: named types, Parsing Canonical Form, CRC-64-AVRO) ------------------


def _self_contained(schema: Mapping[str, Any], named: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every named type it references from ``named`` inlined (fastavro's expansion),
    so one schema carries everything its canonical form and fingerprint need; ``named`` gains the
    named types ``schema`` defines. Raises :class:`AvroEncodeError` for an unknown named type."""
    try:
        return parse_schema(copy.deepcopy(dict(schema)), named_schemas=named, expand=True)
    except UnknownType as exc:
        raise AvroEncodeError(f"unknown named type {exc.name!r}") from None


def _strip_logical_types(schema: Any) -> Any:
    """The Python view: timestamps as int milliseconds (logical types do not affect the fingerprint)."""
    if isinstance(schema, list):
        return [_strip_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strip_logical_types(value) for key, value in schema.items() if key != "logicalType"}
    if "fields" in schema:
        out["fields"] = [{**f, "type": _strip_logical_types(f["type"])} for f in schema["fields"]]
    return out


@dataclass(frozen=True)
class SchemaVersion:
    """One registered writer schema."""

    name: str  #: short name, e.g. ``"Event"``
    fullname: str  #: e.g. ``"io.privstream.Event"``
    fingerprint: int  #: CRC-64-AVRO of the Parsing Canonical Form
    canonical_form: str
    schema: dict[str, Any]  #: self-contained (expanded) JSON schema
    parsed: Any  #: fastavro parsed schema (logical types stripped)

    @property
    def header(self) -> bytes:
        """The 10-byte single-object header for this schema."""
        return MAGIC + self.fingerprint.to_bytes(8, "little")


class SchemaRegistry:
    """Maps fingerprints to writer schemas, and names to the current (reader) schema."""

    def __init__(self) -> None:
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        self._current: dict[str, SchemaVersion] = {}
        self._definitions: dict[str, Any] = {}

    def register(self, schema: Mapping[str, Any] | str, *, current: bool = True) -> SchemaVersion:
        """Register a writer schema (JSON text or dict); ``current`` makes it the reader/writer for its name.

        Registering an older version with ``current=False`` keeps its fingerprint decodable.
        """
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, Mapping) or schema.get("type") not in ("record", "error"):
            raise AvroEncodeError("schema: a top-level Avro record schema is required")
        local: dict[str, Any] = dict(self._definitions)
        expanded = _self_contained(schema, local)
        canonical = to_parsing_canonical_form(expanded)
        version = SchemaVersion(
            name=expanded["name"].rsplit(".", 1)[-1],
            fullname=expanded["name"],
            fingerprint=int.from_bytes(bytes.fromhex(fingerprint_of(canonical, "CRC-64-AVRO")), "little"),
            canonical_form=canonical,
            schema=expanded,
            parsed=parse_schema(_strip_logical_types(expanded), named_schemas={}),
        )
        self._by_fingerprint[version.header[2:]] = version
        if current:
            self._current[version.name] = version
            self._definitions.update(local)
        return version

    def load_directory(self, directory: Path | resources.abc.Traversable) -> None:
        """Register every ``<Name>.avsc`` (current) and ``<Name>.v<N>.avsc`` (historical) in a directory."""
        files = sorted(
            (entry for entry in directory.iterdir() if entry.name.endswith(".avsc")), key=lambda e: e.name
        )
        texts = {entry.name: json.loads(entry.read_text(encoding="utf-8")) for entry in files}
        current = {name: text for name, text in texts.items() if name.count(".") == 1}
        pending = list(current.values())
        while pending:  # a schema that references another file's type waits until that one is registered
            waiting = []
            for text in pending:
                try:
                    self.register(text, current=True)
                except AvroEncodeError:
                    waiting.append(text)
            if len(waiting) == len(pending):
                self.register(waiting[0], current=True)  # raises, naming the unknown type
            pending = waiting
        for file_name, text in texts.items():  # historical versions: references resolve to current types
            if file_name not in current:
                self.register(text, current=False)

    def current(self, name: str) -> SchemaVersion:
        """The current version of schema ``name`` (short or full name)."""
        version = self._current.get(name.rsplit(".", 1)[-1])
        if version is None:
            raise KeyError(f"schema_name: unknown schema {name!r}; known: {sorted(self._current)}")
        return version

    def by_fingerprint(self, fingerprint: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(fingerprint)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._current))

    def encode(self, schema_name: str, record: Mapping[str, Any]) -> bytes:
        """Single-object encoding of ``record`` with the current version of ``schema_name``."""
        version = self.current(schema_name)
        _VALIDATORS.get(version.name, _no_check)(record)
        buffer = io.BytesIO()
        buffer.write(version.header)
        try:
            schemaless_writer(buffer, version.parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise AvroEncodeError(f"{version.name}: record does not match the schema: {exc!r}") from exc
        return buffer.getvalue()

    def decode(self, data: bytes | bytearray | memoryview | None) -> tuple[str, dict[str, Any]]:
        """``(schema_name, record)``; the writer schema comes from the fingerprint, resolved to the current one."""
        if data is None:
            raise AvroDecodeError("empty message (null value / tombstone)")
        data = bytes(data)
        if len(data) < HEADER_SIZE:
            raise AvroDecodeError(f"message too short for a single-object header: {len(data)} bytes")
        if data[:2] != MAGIC:
            raise AvroDecodeError(
                f"bad magic {data[:2].hex()} (expected c301: not Avro single-object encoding)"
            )
        writer = self._by_fingerprint.get(data[2:HEADER_SIZE])
        if writer is None:
            fp = int.from_bytes(data[2:HEADER_SIZE], "little")
            raise AvroDecodeError(f"unknown schema fingerprint 0x{fp:016x} (not in the registry)")
        reader = self._current.get(writer.name)
        body = io.BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            if reader is None or reader is writer:
                record = schemaless_reader(body, writer.parsed, None)
            else:
                record = schemaless_reader(body, writer.parsed, reader.parsed)
        except Exception as exc:  # fastavro raises many types on corrupt input; all mean "undecodable"
            raise AvroDecodeError(f"{writer.name}: invalid Avro body: {type(exc).__name__}: {exc}") from exc
        if body.tell() != len(data):
            raise AvroDecodeError(f"{writer.name}: {len(data) - body.tell()} trailing bytes after the record")
        return writer.name, record


# --- encode-time rules the schemas' docs state ------------------------------------------------------


def _no_check(record: Mapping[str, Any]) -> None:
    return None


def _check_item(item: Any, where: str) -> None:
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise AvroEncodeError(
            f"{where}: an item must be an int or a str (not bool), got {type(item).__name__}"
        )


def _check_event(record: Mapping[str, Any]) -> None:
    _check_item(record.get("item"), "Event.item")


def _check_event_batch(record: Mapping[str, Any]) -> None:
    for event in record.get("events", ()):
        _check_item(event.get("item"), "EventBatch.events[].item")


def _check_user_set(record: Mapping[str, Any]) -> None:
    items = record.get("items", ())
    for item in items:
        _check_item(item, "UserSetEvent.items[]")
    if len(set(items)) != len(items):
        raise AvroEncodeError("UserSetEvent.items: items must be distinct")


_VALIDATORS = {"Event": _check_event, "EventBatch": _check_event_batch, "UserSetEvent": _check_user_set}


# --- the package's default registry -----------------------------------------------------------------

_DEFAULT: SchemaRegistry | None = None


def default_registry() -> SchemaRegistry:
    """The registry of the schemas shipped in ``privstream/connectors/schemas``."""
    global _DEFAULT
    if _DEFAULT is None:
        registry = SchemaRegistry()
        registry.load_directory(resources.files("privstream.connectors") / "schemas")
        _DEFAULT = registry
    return _DEFAULT


def encode(schema_name: str, record: Mapping[str, Any]) -> bytes:
    """Encode ``record`` with the current version of ``schema_name`` (single-object encoding)."""
    return default_registry().encode(schema_name, record)


def decode(data: bytes | bytearray | memoryview | None) -> tuple[str, dict[str, Any]]:
    """Decode one message: ``(schema_name, record)``; raises :class:`AvroDecodeError`."""
    return default_registry().decode(data)


def schema_names() -> tuple[str, ...]:
    """Short names of all shipped schemas."""
    return default_registry().names


def fingerprint(schema_name: str) -> int:
    """CRC-64-AVRO fingerprint of the current version of ``schema_name``."""
    return default_registry().current(schema_name).fingerprint
