"""The options of `format("ledger")`, parsed once into a typed, frozen value.

Spark hands a data source its options as a case-insensitive map of strings. Everything is
checked here, on the driver, before any I/O: a bad value raises OptionError naming the option
(in its documented spelling) and what is accepted; an unknown key lists the known ones. No
pyspark import: the parser is unit-tested without a JVM.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from metadata import (
    DigestType,
    InvalidMetadataError,
    InvalidQuorumError,
    LedgerId,
    validate_quorum,
)
from metadata.context import CONTEXT_TEXT_BYTES_MAX, Party
from metadata.embedded_store import embedded_path_from_env_default
from metadata.errors import InvalidUriError
from metadata.paths import check_name
from metadata.uri import MetadataSettings, TlsFiles, parse_metadata_uri, parse_zk_auth
from pyspark_ledger.datasource.errors import OptionError, did_you_mean
from pyspark_ledger.datasource.options.positions import Bound
from pyspark_ledger.datasource.options.read import ReadOptions, parse_read_options
from pyspark_ledger.datasource.options.values import int_option, text_option

__all__ = ["Bound", "LedgerSourceOptions", "OptionError", "ReadOptions", "parse_options"]

# Bounds on numeric options: a typo must fail here, not as a stuck job.
MAX_ENTRIES_PER_PARTITION_DEFAULT = 250_000
MAX_ENTRIES_PER_PARTITION_MAX = 100_000_000
ARROW_BATCH_ROWS_DEFAULT = 8_192
ARROW_BATCH_ROWS_MAX = 1_000_000
TEST_FAIL_ATTEMPTS_MAX = 1_000

PAYLOAD_FORMATS = ("raw", "arrow")
ARROW_COMPRESSIONS = ("none", "lz4", "zstd")
ARROW_COMPRESSION_DEFAULT = "lz4"  # Arrow IPC's LZ4 frame: GB/s both ways, standard for any IPC reader
TEST_FAIL_MODES = ("raise", "exit")

# Security settings of the client (docs/security.md), carried to the driver's and the executors'
# clients in the metadata settings (metadata/uri_settings.py: printed with zk_auth=***, pickled as
# the URI string, which each executor process parses once).
CLIENT_URI_OPTIONS = ("tls_ca", "tls_cert", "tls_key", "zk_auth")

# lower-cased key -> documented spelling (Spark lower-cases keys before we see them).
KNOWN_OPTIONS: dict[str, str] = {
    name.lower(): name
    for name in (
        "metadataServiceUri", "log", "logs", "logPattern", "ledger", "path", "startingPosition", "endingPosition",
        "startingPositions", "endingPositions", "startingTimestamp", "endingTimestamp", "minPartitions",
        "failOnDataLoss", "maxEntriesPerPartition", "password", "digestType", "ensembleSize", "writeQuorumSize",
        "ackQuorumSize", "payloadFormat", "arrowBatchRows", "arrowCompression", "dataSet", "owner",
        "testFailAttempts", "testFailMode", "password_file", *CLIENT_URI_OPTIONS,
    )
}

# Taken by the streaming classes before parse_options (streaming.STREAM_OPTIONS): named here so
# that a misspelling of one gets its "did you mean".
STREAM_OPTION_NAMES = ("maxEntriesPerTrigger", "maxBytesPerTrigger", "testFailCommit", "checkpointLocation",
                       "subscription")
# What Spark's Kafka source calls an option -> ours (a Kafka user's first guess gets the answer).
KAFKA_OPTION_NAMES = {
    "subscribe": "logs", "assign": "startingPositions", "subscribepattern": "logPattern",
    "startingoffsets": "startingPosition or startingPositions", "endingoffsets": "endingPosition or endingPositions",
    "startingoffsetsbytimestamp": "startingTimestamp", "endingoffsetsbytimestamp": "endingTimestamp",
    "maxoffsetspertrigger": "maxEntriesPerTrigger", "kafka.bootstrap.servers": "metadataServiceUri",
}


def default_metadata_uri() -> str:
    """The embedded store of the quickstart: sqlite://<PYSPARK_LEDGER_HOME or ~/.pyspark-ledger>/metadata.db."""
    return f"sqlite://{embedded_path_from_env_default()}"


@dataclass(frozen=True, slots=True)
class LedgerSourceOptions:
    metadata: MetadataSettings
    log: str | None = None  # the one log named (log, the path, or logs with one name)
    ledger: LedgerId | None = None
    read: ReadOptions = field(default_factory=ReadOptions)
    max_entries_per_partition: int = MAX_ENTRIES_PER_PARTITION_DEFAULT
    password: bytes = field(default=b"", repr=False)  # never in a repr or a log line
    digest_type: str = DigestType.CRC32C.value
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    payload_format: str | None = None  # None: the log's recorded format (reads), or raw for a new log
    arrow_batch_rows: int = ARROW_BATCH_ROWS_DEFAULT
    arrow_compression: str = ARROW_COMPRESSION_DEFAULT
    data_set: str | None = None
    owner: Party | None = None
    test_fail_attempts: int = 0
    test_fail_mode: str = "raise"

    @property
    def metadata_uri(self) -> str:
        """The metadata URI as messages show it (zk_auth's secret as ***)."""
        return str(self.metadata)

    @property
    def starting(self) -> Bound:
        """Where every log without a bound of its own starts (the one log of a stream)."""
        return self.read.starting

    @property
    def ending(self) -> Bound:
        return self.read.ending

    @property
    def target(self) -> str:
        """What is read or written, for messages."""
        if self.log is not None:
            return f"log {self.log!r}"
        if self.read.log_pattern is not None:
            return f"the logs matching {self.read.log_pattern!r}"
        if self.read.logs:
            return f"logs {', '.join(self.read.logs)}"
        return f"ledger {self.ledger}"

    def require_log(self, action: str) -> str:
        if self.log is None:
            what = "a single ledger" if self.ledger is not None else "several logs (options logs, logPattern)"
            raise OptionError("log", f"{action} needs one log name (option log), not {what}")
        return self.log


def _owner(raw: str) -> Party:
    """`enterprise/system/service/instance`, any prefix of it (BP-44 createdOnBehalfOf)."""
    parts = [p.strip() for p in raw.split("/")]
    if len(parts) > 4:
        raise OptionError("owner", f"expected up to 4 parts enterprise/system/service/instance, got {raw!r}")
    try:
        return Party(*parts)
    except InvalidMetadataError as exc:
        raise OptionError("owner", str(exc)) from None


def _metadata(opts: Mapping[str, str]) -> MetadataSettings:
    """metadataServiceUri parsed, with the client security options (CLIENT_URI_OPTIONS) in place of
    its own values; an error names the option at fault and never echoes zk_auth."""
    uri = text_option(opts, "metadataServiceUri") or default_metadata_uri()
    try:
        settings = parse_metadata_uri(uri)
    except InvalidUriError as exc:
        raise OptionError("metadataServiceUri", str(exc)) from None
    given = {k: str(opts[k]) for k in CLIENT_URI_OPTIONS if opts.get(k)}
    if "zk_auth" in given:
        try:
            settings = settings.with_zk_auth(parse_zk_auth(given["zk_auth"], "option zk_auth"))
        except InvalidUriError as exc:
            raise OptionError("zk_auth", str(exc)) from None
    files = settings.tls
    return settings.with_tls(TlsFiles(given.get("tls_ca", files.ca), given.get("tls_cert", files.cert),
                                      given.get("tls_key", files.key)))


def _target(opts: Mapping[str, str]) -> tuple[str | None, LedgerId | None]:
    """What is read or written: a log (option log, or the load/save path) or one ledger."""
    log_name = text_option(opts, "log")
    path = text_option(opts, "path")
    if log_name is not None and path is not None and path != log_name:
        raise OptionError("log", f"given twice, as log={log_name!r} and as the path {path!r}")
    log_name = log_name or path
    ledger_text = text_option(opts, "ledger")
    if log_name is not None:
        try:
            check_name("log", log_name)
        except InvalidMetadataError as exc:
            raise OptionError("log", str(exc)) from None
    ledger = None
    if ledger_text is not None:
        try:
            ledger = LedgerId.parse(ledger_text)
        except InvalidMetadataError as exc:
            raise OptionError("ledger", str(exc)) from None
    return log_name, ledger


def _check_known(opts: Mapping[str, str]) -> None:
    """An unknown key is an error whose first line names it and the closest known option."""
    unknown = sorted(k for k in opts if k not in KNOWN_OPTIONS)
    if not unknown:
        return
    key = unknown[0]
    if key in KAFKA_OPTION_NAMES:
        ours = " or ".join(f'"{name}"' for name in KAFKA_OPTION_NAMES[key].split(" or "))
        hint = f"; that is an option of Spark's Kafka source, the ledger source uses {ours} instead"
    else:
        hint = did_you_mean(key, [*KNOWN_OPTIONS.values(), *STREAM_OPTION_NAMES])
    others = f" (unknown too: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    raise OptionError(key, f"unknown option{hint}{others}\nknown options: "
                      f"{', '.join(sorted(KNOWN_OPTIONS.values(), key=str.lower))}")


def parse_options(options: Mapping[str, str], target_required: bool = True) -> LedgerSourceOptions:
    """Parse Spark's option map (keys in any case, values strings) or raise OptionError.
    target_required=False: a write whose rows name their logs (a `log` column) may name none."""
    opts = {str(k).lower(): v for k, v in options.items()}
    _check_known(opts)
    metadata = _metadata(opts)
    log_name, ledger = _target(opts)
    named = log_name is not None or ledger is not None or "logs" in opts or "logpattern" in opts
    read = parse_read_options(opts, log_name, ledger is not None) if named or target_required else ReadOptions()
    if log_name is None and len(read.logs) == 1:
        log_name = read.logs[0]

    digest = text_option(opts, "digestType") or DigestType.CRC32C.value
    try:
        digest = DigestType.parse(digest).value
    except InvalidMetadataError as exc:
        raise OptionError("digestType", str(exc)) from None

    e = _int_set(opts, "ensembleSize", 3, 1, 64)
    w = _int_set(opts, "writeQuorumSize", min(3, e), 1, 64)
    a = _int_set(opts, "ackQuorumSize", min(2, w), 1, 64)
    try:
        validate_quorum(e, w, a)
    except InvalidQuorumError as exc:
        culprit = "writeQuorumSize" if w > e else "ackQuorumSize"
        raise OptionError(culprit, f"{exc} (ensembleSize={e}, writeQuorumSize={w}, ackQuorumSize={a})") from None

    fmt = text_option(opts, "payloadFormat")
    if fmt is not None:
        fmt = fmt.lower()
        if fmt not in PAYLOAD_FORMATS:
            raise OptionError("payloadFormat", f"expected one of {', '.join(PAYLOAD_FORMATS)}, got {fmt!r}")

    compression = (text_option(opts, "arrowCompression") or ARROW_COMPRESSION_DEFAULT).lower()
    if compression not in ARROW_COMPRESSIONS:
        raise OptionError("arrowCompression", f"expected one of {', '.join(ARROW_COMPRESSIONS)}, got {compression!r}")

    data_set = text_option(opts, "dataSet")
    if data_set is not None and len(data_set.encode()) > CONTEXT_TEXT_BYTES_MAX:
        raise OptionError("dataSet", f"longer than {CONTEXT_TEXT_BYTES_MAX} bytes")
    owner_text = text_option(opts, "owner")

    mode = (text_option(opts, "testFailMode") or "raise").lower()
    if mode not in TEST_FAIL_MODES:
        raise OptionError("testFailMode", f"expected one of {', '.join(TEST_FAIL_MODES)}, got {mode!r}")

    password = _password(opts)
    return LedgerSourceOptions(
        metadata=metadata,
        log=log_name,
        ledger=ledger,
        read=read,
        max_entries_per_partition=_int_set(opts, "maxEntriesPerPartition", MAX_ENTRIES_PER_PARTITION_DEFAULT, 1,
                                       MAX_ENTRIES_PER_PARTITION_MAX),
        password=password,
        digest_type=digest,
        ensemble_size=e,
        write_quorum_size=w,
        ack_quorum_size=a,
        payload_format=fmt,
        arrow_batch_rows=_int_set(opts, "arrowBatchRows", ARROW_BATCH_ROWS_DEFAULT, 1, ARROW_BATCH_ROWS_MAX),
        arrow_compression=compression,
        data_set=data_set,
        owner=None if owner_text is None else _owner(owner_text),
        test_fail_attempts=_int_set(opts, "testFailAttempts", 0, 0, TEST_FAIL_ATTEMPTS_MAX),
        test_fail_mode=mode,
    )


def _password(opts: Mapping[str, str]) -> bytes:
    """Option password, or the content of the file option password_file names (read where the
    options are parsed: the driver; the executors get the parsed options)."""
    text, path = opts.get("password"), text_option(opts, "password_file")
    if text is not None and path is not None:
        raise OptionError("password_file", "give either password or password_file, not both")
    if path is None:
        return b"" if text is None else str(text).encode()
    try:
        return Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise OptionError("password_file", f"cannot read {path}: {exc.strerror}") from None


def this_host() -> str:
    """The executor's name for BP-44 createdBy (bounded to the field's size)."""
    name = f"{socket.gethostname()}:{os.getpid()}"
    return name[:CONTEXT_TEXT_BYTES_MAX]


def _int_set(options: Mapping[str, str], key: str, default: int, lo: int, hi: int) -> int:
    """int_option with a default, so never None."""
    value = int_option(options, key, default, lo, hi)
    return default if value is None else value
