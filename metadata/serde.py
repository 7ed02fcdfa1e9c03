"""Serialization of ledger metadata: a checksummed, versioned binary envelope, and JSON for people.

Binary layout (all integers big-endian):

    bytes 0-3    magic b"PLMD"
    bytes 4-5    format version (u16); readers refuse versions newer than METADATA_FORMAT_VERSION
    bytes 6-7    reserved, 0
    bytes 8-11   body length (u32)
    bytes 12-15  CRC32C of the body (u32)
    bytes 16-    body: a LedgerMetadataProto (metadata/ledger_metadata.proto)

Protobuf alone would parse many flipped or truncated inputs into a different, valid-looking
value; the length and checksum turn every such case into CorruptMetadataError. No I/O here.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

import crc32c
from google.protobuf.message import DecodeError

from metadata import ledger_metadata_pb2 as pb
from metadata.context import CloseContext, CloseReason, CreateContext, Party
from metadata.errors import CorruptMetadataError, MetadataError, UnsupportedFormatVersionError
from metadata.ids import LedgerId
from metadata.ledger import METADATA_FORMAT_VERSION, DigestType, LedgerMetadata, LedgerState, Segment
from metadata.password_digest import UnknownPasswordDigestError

MAGIC = b"PLMD"
_HEADER = struct.Struct(">4sHHII")
HEADER_BYTES = _HEADER.size  # 16


def _lid_to_pb(lid: LedgerId, out: pb.LedgerIdProto) -> None:
    out.scope_id = lid.scope_id
    out.ledger_id = lid.id


def _party_to_pb(party: Party, out: pb.PartyProto) -> None:
    out.enterprise, out.system, out.service, out.instance = (
        party.enterprise, party.system, party.service, party.instance,
    )


def _set_optional(msg: Any, name: str, value: Any) -> None:
    if value is not None:
        setattr(msg, name, value)


def to_proto(meta: LedgerMetadata) -> pb.LedgerMetadataProto:
    m = pb.LedgerMetadataProto()
    _lid_to_pb(meta.ledger_id, m.ledger_id)
    m.ensemble_size = meta.ensemble_size
    m.write_quorum_size = meta.write_quorum_size
    m.ack_quorum_size = meta.ack_quorum_size
    for seg in meta.segments:
        s = m.segments.add()
        s.first_entry_id = seg.first_entry_id
        s.bookies.extend(seg.bookies)
    m.state = meta.state.value
    _set_optional(m, "last_entry_id", meta.last_entry_id)
    _set_optional(m, "length_bytes", meta.length_bytes)
    m.digest_type = meta.digest_type.value
    m.password_digest = meta.password_digest
    m.ctime_ms = meta.ctime_ms
    _set_optional(m, "seal_time_ms", meta.seal_time_ms)
    if meta.create_context is not None:
        c, cc = meta.create_context, m.create_context
        cc.SetInParent()
        if c.created_by is not None:
            _party_to_pb(c.created_by, cc.created_by)
        if c.on_behalf_of is not None:
            _party_to_pb(c.on_behalf_of, cc.on_behalf_of)
        for name in (
            "data_set",
            "expected_max_open_duration_ms",
            "expected_average_entry_size_bytes",
            "expected_entry_size_stddev_bytes",
            "expected_max_entries",
            "expected_max_length_bytes",
            "expected_average_add_rate_per_second",
            "expected_maximum_add_rate_per_second",
        ):
            _set_optional(cc, name, getattr(c, name))
        if c.follows_ledger is not None:
            _lid_to_pb(c.follows_ledger, cc.follows_ledger)
        if c.child_of_ledger is not None:
            _lid_to_pb(c.child_of_ledger, cc.child_of_ledger)
    if meta.close_context is not None:
        k, kk = meta.close_context, m.close_context
        kk.SetInParent()
        if k.reason is not None:
            kk.reason = k.reason.value
        _set_optional(kk, "abnormal_message", k.abnormal_message)
        _set_optional(kk, "expect_reads_until_ms", k.expect_reads_until_ms)
        _set_optional(kk, "expect_delete_after_ms", k.expect_delete_after_ms)
    for key, value in meta.custom.items():
        m.custom[key] = bytes(value)
    return m


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _party(msg: Any, name: str) -> Party | None:
    if not msg.HasField(name):
        return None
    p = getattr(msg, name)
    return Party(p.enterprise, p.system, p.service, p.instance)


def _lid(msg: Any, name: str) -> LedgerId | None:
    if not msg.HasField(name):
        return None
    p = getattr(msg, name)
    return LedgerId(p.scope_id, p.ledger_id)


def from_proto(m: pb.LedgerMetadataProto) -> LedgerMetadata:
    create = None
    if m.HasField("create_context"):
        cc = m.create_context
        create = CreateContext(
            created_by=_party(cc, "created_by"),
            on_behalf_of=_party(cc, "on_behalf_of"),
            data_set=_opt(cc, "data_set"),
            expected_max_open_duration_ms=_opt(cc, "expected_max_open_duration_ms"),
            expected_average_entry_size_bytes=_opt(cc, "expected_average_entry_size_bytes"),
            expected_entry_size_stddev_bytes=_opt(cc, "expected_entry_size_stddev_bytes"),
            expected_max_entries=_opt(cc, "expected_max_entries"),
            expected_max_length_bytes=_opt(cc, "expected_max_length_bytes"),
            expected_average_add_rate_per_second=_opt(cc, "expected_average_add_rate_per_second"),
            expected_maximum_add_rate_per_second=_opt(cc, "expected_maximum_add_rate_per_second"),
            follows_ledger=_lid(cc, "follows_ledger"),
            child_of_ledger=_lid(cc, "child_of_ledger"),
        )
    close = None
    if m.HasField("close_context"):
        kk = m.close_context
        close = CloseContext(
            reason=CloseReason(kk.reason) if kk.HasField("reason") else None,
            abnormal_message=_opt(kk, "abnormal_message"),
            expect_reads_until_ms=_opt(kk, "expect_reads_until_ms"),
            expect_delete_after_ms=_opt(kk, "expect_delete_after_ms"),
        )
    return LedgerMetadata(
        ledger_id=LedgerId(m.ledger_id.scope_id, m.ledger_id.ledger_id),
        ensemble_size=m.ensemble_size,
        write_quorum_size=m.write_quorum_size,
        ack_quorum_size=m.ack_quorum_size,
        segments=tuple(Segment(s.first_entry_id, tuple(s.bookies)) for s in m.segments),
        state=LedgerState(m.state),
        last_entry_id=_opt(m, "last_entry_id"),
        length_bytes=_opt(m, "length_bytes"),
        digest_type=DigestType(m.digest_type),
        password_digest=bytes(m.password_digest),
        ctime_ms=m.ctime_ms,
        seal_time_ms=_opt(m, "seal_time_ms"),
        create_context=create,
        close_context=close,
        custom=dict(m.custom),
        format_version=METADATA_FORMAT_VERSION,
    )


def encode(meta: LedgerMetadata) -> bytes:
    body = to_proto(meta).SerializeToString(deterministic=True)
    return _HEADER.pack(MAGIC, METADATA_FORMAT_VERSION, 0, len(body), crc32c.crc32c(body)) + body


def decode(data: bytes, ledger: LedgerId | str | None = None) -> LedgerMetadata:
    """Parse stored bytes. `ledger` (the id the bytes were stored under) names the ledger in errors."""
    name = f"ledger {ledger}" if ledger is not None else "ledger metadata"
    if len(data) < HEADER_BYTES:
        raise CorruptMetadataError(f"{name}: stored metadata is truncated ({len(data)} bytes, header needs {HEADER_BYTES})")
    magic, version, _reserved, length, checksum = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptMetadataError(f"{name}: stored metadata has a bad magic {magic!r} (expected {MAGIC!r})")
    if version > METADATA_FORMAT_VERSION:
        raise UnsupportedFormatVersionError(
            f"{name}: metadata format version {version} is newer than this client supports "
            f"({METADATA_FORMAT_VERSION}); upgrade pyspark-ledger"
        )
    if version < 1 or _reserved != 0:
        raise CorruptMetadataError(f"{name}: stored metadata has a bad header (version {version}, reserved {_reserved})")
    body = data[HEADER_BYTES:]
    if len(body) != length:
        raise CorruptMetadataError(
            f"{name}: stored metadata is truncated or padded (body {len(body)} bytes, header says {length})"
        )
    if crc32c.crc32c(body) != checksum:
        raise CorruptMetadataError(f"{name}: stored metadata failed its checksum (corrupt bytes)")
    try:
        m = pb.LedgerMetadataProto.FromString(body)
        meta = from_proto(m)
    except (DecodeError, ValueError, KeyError) as exc:
        if isinstance(exc, MetadataError):
            raise CorruptMetadataError(f"{name}: stored metadata is invalid: {exc}") from exc
        raise CorruptMetadataError(f"{name}: stored metadata cannot be parsed: {exc}") from exc
    if isinstance(ledger, LedgerId) and meta.ledger_id != ledger:
        raise CorruptMetadataError(f"{name}: stored metadata belongs to ledger {meta.ledger_id}")
    return meta


def _time(ms: int | None) -> dict[str, Any] | None:
    if ms is None:
        return None
    try:
        iso: str | None = datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        iso = None  # far outside the calendar: show the raw value only
    return {"ms": ms, "utc": iso}


def _lid_json(lid: LedgerId | None) -> dict[str, Any] | None:
    if lid is None:
        return None
    return {"scope_id": lid.scope_id, "ledger_id": lid.id, "qualified_name": lid.qualified_name}


def _party_json(p: Party | None) -> dict[str, str] | None:
    if p is None:
        return None
    return {"enterprise": p.enterprise, "system": p.system, "service": p.service, "instance": p.instance}


def create_context_json(c: CreateContext | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "createdBy": _party_json(c.created_by),
        "onBehalfOf": _party_json(c.on_behalf_of),
        "dataSet": c.data_set,
        "expectedMaxOpenDurationMs": c.expected_max_open_duration_ms,
        "expectedAverageEntrySizeBytes": c.expected_average_entry_size_bytes,
        "expectedEntrySizeStddevBytes": c.expected_entry_size_stddev_bytes,
        "expectedMaxEntries": c.expected_max_entries,
        "expectedMaxLengthBytes": c.expected_max_length_bytes,
        "expectedAverageEntryAddRatePerSecond": c.expected_average_add_rate_per_second,
        "expectedMaximumEntryAddRatePerSecond": c.expected_maximum_add_rate_per_second,
        "followsLedger": _lid_json(c.follows_ledger),
        "childOfLedger": _lid_json(c.child_of_ledger),
    }


def close_context_json(k: CloseContext | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {
        "reason": k.reason.value if k.reason else None,
        "abnormalMessage": k.abnormal_message,
        "expectReadsUntil": _time(k.expect_reads_until_ms),
        "expectDeleteAfter": _time(k.expect_delete_after_ms),
    }


def _has_password(meta: LedgerMetadata) -> bool:
    """Whether opening needs a password other than the empty one (a digest of a newer client's
    format: assumed so)."""
    try:
        return bool(meta.password_digest) and not meta.check_password(b"")
    except UnknownPasswordDigestError:
        return True


def to_json_dict(meta: LedgerMetadata) -> dict[str, Any]:
    """A readable rendering for the admin shell (`ledgermetadata --json`). Never includes secrets."""
    return {
        "ledger": _lid_json(meta.ledger_id),
        "formatVersion": meta.format_version,
        "state": meta.state.value,
        "ensembleSize": meta.ensemble_size,
        "writeQuorumSize": meta.write_quorum_size,
        "ackQuorumSize": meta.ack_quorum_size,
        "lastEntryId": meta.last_entry_id,
        "lengthBytes": meta.length_bytes,
        "digestType": meta.digest_type.value,
        "hasPassword": _has_password(meta),
        "ctime": _time(meta.ctime_ms),
        "sealTime": _time(meta.seal_time_ms),
        "ensembles": [{"firstEntryId": s.first_entry_id, "bookies": list(s.bookies)} for s in meta.segments],
        "createContext": create_context_json(meta.create_context),
        "closeContext": close_context_json(meta.close_context),
        "custom": {k: v.hex() for k, v in sorted(meta.custom.items())},
    }
