"""Bookie server configuration: command-line flags, optionally on top of a TOML config file.

The config file uses the flags' long names with underscores, e.g.

    metadata_uri = "zk://127.0.0.1:2181/ledgers"
    data_dir = "/var/lib/bookie"             # or: journal_dir and ledger_dirs
    ledger_dirs = ["/disk1/bookie", "/disk2/bookie"]
    port = 3181
    disk_usage_threshold = 0.95
"""

from __future__ import annotations

import argparse
import logging
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast

from bookie.errors import BookieError
from bookie.proto.versions import RELEASE
from metadata.errors import InvalidMetadataError
from metadata.registry import check_rack

# Every response is bounded; gRPC messages must fit these.
GRPC_MESSAGE_BYTES_MAX = 64 * 2**20
READ_RESPONSE_BYTES_DEFAULT = 4 * 2**20
READ_RESPONSE_BYTES_MAX = 32 * 2**20
READ_RESPONSE_ENTRIES_DEFAULT = 10_000
READ_RESPONSE_ENTRIES_MAX = 65_536
LONG_POLL_TIMEOUT_MS_MAX = 30_000
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
ENTRY_LOG_SIZE_MB_MAX = 64 * 1024  # far below the location format's 1 TiB per log


class ConfigError(BookieError, ValueError):
    pass


@dataclass(frozen=True)
class BookieConfig:
    metadata_uri: str
    # One directory for everything, or the default of whichever of the two below is not given.
    data_dir: Path | None = None
    journal_dir: Path | None = None  # journal, index and checkpoint (a fast device)
    ledger_dirs: tuple[Path, ...] = ()  # entry logs, spread over these (one per disk)
    host: str = "127.0.0.1"
    port: int = 3181
    add_port: int = 0  # the plain-TCP add listener: 0 = a free port (advertised), -1 = none
    bookie_id: str | None = None  # default: host:port
    # host:port clients are told to use instead of the listening ones (e.g. a proxy in front)
    advertised_address: str | None = None
    advertised_add_address: str | None = None
    metrics_port: int | None = None
    grpc_workers: int = 32
    grpc_max_concurrent_rpcs: int = 256
    # LAC long polls holding a gRPC worker at once, on this bookie and per client (bookie/long_polls.py).
    max_long_polls: int = 16
    max_long_polls_per_client: int = 4
    # Add-listener connections of one client (certificate identity, else address), and how long
    # one may stay idle (or half-open) before the bookie closes it (bookie/add_listener.py).
    max_connections_per_peer: int = 64
    idle_connection_timeout_s: float = 300.0
    disk_usage_threshold: float = 0.95  # at or above: read-only
    disk_usage_lwm_threshold: float = 0.90  # at or below (after read-only): writable again
    disk_check_interval_s: float = 1.0
    max_entry_size_bytes: int = 5 * 2**20
    max_pending_add_bytes: int = 64 * 2**20
    journal_max_group_bytes: int = 8 * 2**20
    journal_max_group_wait_ms: float = 0.0
    checkpoint_interval_s: float = 60.0
    fsync: bool = True
    repair_journal: bool = False
    shutdown_grace_s: float = 5.0
    # Garbage collection (bookie/storage/gc.py, docs/storage.md); 0 = no periodic GC.
    gc_interval_s: float = 300.0
    # A CLOSED ledger's copy no fragment names any more is kept this long (bookie/storage/gc.py).
    gc_over_replicated_grace_s: float = 3600.0
    # Compaction of entry logs whose live fraction is under a threshold (BookKeeper's minor /
    # major compaction); 0 disables that kind.
    minor_compaction_threshold: float = 0.2
    major_compaction_threshold: float = 0.8
    compaction_rate_mb_s: float = 50.0
    # How often each kind runs, checked at every GC round; 0 = at every round.
    minor_compaction_interval_s: float = 0.0
    major_compaction_interval_s: float = 3600.0
    entry_log_size_mb: int = 1024  # an entry log rolls at this size (BookKeeper's logSizeLimit)
    # The current entry log's bytes kept in the page cache behind its end; 0 = all (bookie/storage/page_cache.py).
    entry_log_cache_mb: int = 256
    # The scrubber (bookie/scrubber.py): every stored entry verified once per interval, at most
    # this fast; damaged copies repaired from peers. 0 = no periodic scrubbing.
    scrub_interval_s: float = 86_400.0
    scrub_rate_mb_s: float = 20.0
    # TLS (docs/security.md): with a certificate and key every listener speaks TLS only.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None  # the CA client certificates must be signed by (mutual TLS)
    tls_client_auth: bool = False
    allow_plaintext: bool = False  # with TLS on: the add listener also takes plaintext connections
    metrics_host: str = "127.0.0.1"  # the metrics endpoint is local unless asked otherwise
    # Authorization (bookie/auth.py, docs/security.md). The secret only ever from a file.
    operator_secret_file: str | None = None
    operator_identities: str | None = None  # comma-separated client certificate identities
    require_read_auth: bool = False
    # The first key of a ledger this bookie has not seen must match the verifier in the ledger's
    # metadata, and the ledger must exist there (bookie/ledger_owner.py, docs/security.md).
    verify_ledger_keys: bool = True
    # Run the autorecovery service next to this bookie (bookie/autorecovery_child.py).
    autorecovery: bool = False
    lost_bookie_grace_s: float = 30.0
    rereplication_rate_mb_s: float = 50.0  # the child's --rereplication-rate-mb-s: copy bytes/s, all workers
    # Failure domain, `zone/rack` or `rack`, registered for rack-aware placement (docs/deployment.md#racks).
    rack: str | None = None

    @property
    def journal_directory(self) -> Path:
        """Where the journal, the index and the checkpoint go."""
        directory = self.journal_dir or self.data_dir
        if directory is None:
            raise ConfigError("--journal-dir or --data-dir is required")
        return directory

    @property
    def ledger_directories(self) -> tuple[Path, ...]:
        """Where entry logs go."""
        if self.ledger_dirs:
            return self.ledger_dirs
        if self.data_dir is None:
            raise ConfigError("--ledger-dirs or --data-dir is required")
        return (self.data_dir,)

    def validate(self) -> None:
        if self.data_dir is None and (self.journal_dir is None or not self.ledger_dirs):
            raise ConfigError("--data-dir is required unless both --journal-dir and --ledger-dirs are given")
        resolved = [d.resolve() for d in self.ledger_directories]
        if len(set(resolved)) != len(resolved):
            raise ConfigError(f"--ledger-dirs names a directory twice: {','.join(map(str, self.ledger_dirs))}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        if not -1 <= self.add_port < 65536:
            raise ConfigError(f"--add-port must be in 0..65535, or -1 for no add listener, got {self.add_port}")
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1.0:
            raise ConfigError(
                "disk thresholds must satisfy 0 < --disk-usage-lwm-threshold <= --disk-usage-threshold <= 1, got "
                f"{self.disk_usage_lwm_threshold} and {self.disk_usage_threshold}"
            )
        if self.gc_interval_s < 0 or self.compaction_rate_mb_s <= 0 or self.gc_over_replicated_grace_s < 0:
            raise ConfigError("--gc-interval-s and --gc-over-replicated-grace-s must be >= 0 and "
                              "--compaction-rate-mb-s > 0")
        if self.host in WILDCARD_HOSTS and (not self.advertised_address
                                            or (self.add_port >= 0 and not self.advertised_add_address)):
            raise ConfigError(
                f"--host {self.host} listens on every interface, which is no address clients can use: set "
                "--advertised-address host:port (and --advertised-add-address host:port, or --add-port -1), "
                "or --host to one of this machine's addresses")
        if self.minor_compaction_interval_s < 0 or self.major_compaction_interval_s < 0:
            raise ConfigError("--minor-compaction-interval-s and --major-compaction-interval-s must be >= 0")
        if not 0 < self.rereplication_rate_mb_s <= 100_000:
            raise ConfigError(f"--rereplication-rate-mb-s must be in (0, 100000], got {self.rereplication_rate_mb_s}")
        if self.scrub_interval_s < 0 or self.scrub_rate_mb_s <= 0:
            raise ConfigError("--scrub-interval-s must be >= 0 and --scrub-rate-mb-s > 0")
        if self.entry_log_cache_mb < 0:
            raise ConfigError(f"--entry-log-cache-mb must be >= 0 (0: keep all), got {self.entry_log_cache_mb}")
        if not 1 <= self.entry_log_size_mb <= ENTRY_LOG_SIZE_MB_MAX:
            raise ConfigError(f"--entry-log-size-mb must be in 1..{ENTRY_LOG_SIZE_MB_MAX}, got {self.entry_log_size_mb}")
        if not 0 <= self.minor_compaction_threshold <= self.major_compaction_threshold < 1.0:
            raise ConfigError("compaction thresholds must satisfy 0 <= --minor-compaction-threshold "
                              "<= --major-compaction-threshold < 1")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together (the bookie's certificate and its private key)")
        if self.tls_client_auth and not (self.tls_cert and self.tls_ca):
            raise ConfigError("--tls-client-auth needs --tls-cert, --tls-key and --tls-ca (the CA of client certificates)")
        if self.operator_identities and not self.tls_client_auth:
            raise ConfigError("--operator-identities needs mutual TLS (--tls-client-auth): identities come from "
                              "client certificates")
        if self.grpc_workers < 4:
            raise ConfigError("--grpc-workers must be at least 4")
        self._validate_connection_bounds()
        if self.rack is not None:
            try:
                check_rack(self.rack)
            except InvalidMetadataError as exc:
                raise ConfigError(f"--rack: {exc}") from exc
        if self.max_entry_size_bytes <= 0 or self.max_entry_size_bytes > GRPC_MESSAGE_BYTES_MAX // 2:
            raise ConfigError(f"--max-entry-size-bytes must be in 1..{GRPC_MESSAGE_BYTES_MAX // 2}")

    def _validate_connection_bounds(self) -> None:
        if not 0 <= self.max_long_polls <= self.grpc_workers // 2:
            raise ConfigError(f"--max-long-polls must be in 0..{self.grpc_workers // 2} (half of --grpc-workers: "
                              f"the other half serves Info, fences, reads and adds), got {self.max_long_polls}")
        if not 0 <= self.max_long_polls_per_client <= self.max_long_polls:
            raise ConfigError(f"--max-long-polls-per-client must be in 0..--max-long-polls ({self.max_long_polls}), "
                              f"got {self.max_long_polls_per_client}")
        if not 1 <= self.max_connections_per_peer <= self.grpc_max_concurrent_rpcs:
            raise ConfigError(f"--max-connections-per-peer must be in 1..--grpc-max-concurrent-rpcs "
                              f"({self.grpc_max_concurrent_rpcs}), got {self.max_connections_per_peer}")
        if not self.idle_connection_timeout_s > 0:
            raise ConfigError(f"--idle-connection-timeout-s must be > 0, got {self.idle_connection_timeout_s}")


_FLAG_HELP = {
    "grpc_workers": "threads serving gRPC calls (default 32, at least 4)",
    "grpc_max_concurrent_rpcs": "gRPC calls in progress at once, beyond which new ones are refused (default 256); "
                                "also the add listener's connection limit",
    "max_long_polls": "LAC long polls waiting at once on this bookie, at most half of --grpc-workers (default 16); "
                      "more are refused RESOURCE_EXHAUSTED",
    "max_long_polls_per_client": "LAC long polls waiting at once per client certificate identity, else per client "
                                 "address (default 4)",
    "max_connections_per_peer": "add-listener connections per client certificate identity, else per client "
                                "address (default 64); more are refused at once",
    "idle_connection_timeout_s": "seconds an add-listener connection may stay idle, or half-open, before the "
                                 "bookie closes it (default 300); clients reconnect on their next add",
    "disk_check_interval_s": "seconds between disk usage checks (default 1)",
    "max_entry_size_bytes": "largest entry accepted, in bytes (default 5 MiB)",
    "max_pending_add_bytes": "bytes of adds queued for the journal before new adds are refused BUSY (default 64 MiB)",
    "journal_max_group_bytes": "bytes one journal group commit (one fdatasync) may take (default 8 MiB)",
    "journal_max_group_wait_ms": "how long a group commit may wait for more adds (default 0: never waits)",
    "checkpoint_interval_s": "seconds between checkpoints of the index (default 60); replay after a crash starts there",
    "shutdown_grace_s": "seconds a stop lets calls in progress finish (default 5)",
    "gc_interval_s": "seconds between garbage collection rounds (default 300; 0 = none)",
    "gc_over_replicated_grace_s": "seconds a closed ledger's copy that no fragment names any more is kept before "
                                  "garbage collection deletes it (default 3600)",
    "minor_compaction_threshold": "compact entry logs whose live fraction is under this (default 0.2; 0 = no minor)",
    "major_compaction_threshold": "compact entry logs whose live fraction is under this, less often (default 0.8; "
                                  "0 = no major)",
    "compaction_rate_mb_s": "copy rate limit of a compaction in MB/s (default 50)",
    "metadata_uri": "metadata service, zk://host:port/root or sqlite:///abs/path.db",
    "data_dir": "directory for the journal, entry logs, index and cookie (the default of --journal-dir and "
                "--ledger-dirs; not needed when both are given)",
    "journal_dir": "directory for the journal, the index and the checkpoint, ideally on its own fast device "
                   "(default: --data-dir)",
    "ledger_dirs": "comma-separated directories for entry logs, e.g. one per disk; a full one takes no new "
                   "entry log while another has room (default: --data-dir)",
    "host": "address to listen on (default 127.0.0.1)",
    "port": "gRPC port (default 3181; 0 picks a free one)",
    "add_port": "port of the plain-TCP add listener, the fast path for adds (default 0: a free port, advertised "
                "in the bookie's registration; -1: none, clients then add over gRPC)",
    "bookie_id": "identity in metadata (default host:port)",
    "advertised_address": "host:port registered for the gRPC service instead of --host:--port, for a proxy or NAT "
                          "in front of the bookie (default: the listening address)",
    "advertised_add_address": "host:port registered for the plain-TCP add listener instead of the listening one "
                              "(default: the listening address; ignored with --add-port -1)",
    "metrics_port": "serve Prometheus metrics on this port (off by default)",
    "disk_usage_threshold": "turn read-only at this disk usage fraction (default 0.95)",
    "disk_usage_lwm_threshold": "turn writable again at or below this fraction (default 0.90)",
    "repair_journal": "open even if the journal is corrupt in the middle (answers UNKNOWN for what it lacks)",
    "fsync": "fsync the journal (default on; --no-fsync is for tests only)",
    "tls_cert": "PEM certificate of this bookie: with --tls-key, gRPC and the add listener speak TLS only",
    "tls_key": "PEM private key of --tls-cert",
    "tls_ca": "PEM CA certificate(s) that client certificates must be signed by (with --tls-client-auth)",
    "tls_client_auth": "mutual TLS: refuse clients without a certificate signed by --tls-ca",
    "allow_plaintext": "with TLS on, let the add listener also accept plaintext connections (migration only; "
                       "gRPC stays TLS-only)",
    "entry_log_size_mb": "roll entry logs at this size in MiB (default 1024); compaction also rolls a "
                         "mostly-dead current log once it holds 1/16 of this",
    "entry_log_cache_mb": "MiB of the current entry log kept in the page cache behind its end, for readers of "
                          "recent entries (default 256; 0 = all): older pages are given back so new appends "
                          "reuse them, far cheaper than fresh ones on VMs",
    "minor_compaction_interval_s": "seconds between minor compactions, checked at each GC round (default 0: "
                                   "every round)",
    "major_compaction_interval_s": "seconds between major compactions, checked at each GC round (default 3600)",
    "scrub_interval_s": "seconds between scrub passes, which verify every stored entry and repair damaged "
                        "copies from peers (default 86400; 0 = none)",
    "scrub_rate_mb_s": "read rate limit of a scrub pass in MB/s (default 20)",
    "metrics_host": "address of the metrics endpoint (default 127.0.0.1: local only)",
    "operator_secret_file": "file holding the cluster's operator secret (16+ bytes, chmod 600): a client sending "
                            "it may delete any ledger, write any LAC and call the admin RPCs",
    "operator_identities": "comma-separated client certificate identities (SAN, else CN; mutual TLS) with the "
                           "operator's rights",
    "autorecovery": "also run the autorecovery service (auditor candidate and replication workers, "
                    "docs/autorecovery.md) as a child process of this bookie",
    "lost_bookie_grace_s": "with --autorecovery: a bookie down this long is lost (default 30)",
    "rereplication_rate_mb_s": "with --autorecovery: re-replication copies at most this many MB/s in all "
                               "(a token bucket its workers share; default 50)",
    "rack": "failure domain of this bookie, 'zone/rack' or 'rack' (default none); placement spreads each "
            "entry's copies over racks (docs/deployment.md#racks)",
    "require_read_auth": "reads (Read, ReadLac) need the ledger's master key or an operator identity",
    "verify_ledger_keys": "take the first key of a ledger this bookie has not seen only if the ledger exists in "
                          "metadata and the key matches its verifier there (default on; off: trust on first write, "
                          "for raw-protocol tests that write ledgers without metadata)",
}


def installed_version() -> str:
    """The version of the code that runs (bookie/proto/versions.py), not of the installed package's
    metadata: an editable install's metadata keeps the version it was installed with, and in a
    mixed-version cluster the registration and Info must say which code a bookie runs."""
    return RELEASE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bookie", description="pyspark-ledger storage server (a bookie)")
    p.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    p.add_argument("--config", type=Path, help="TOML file with defaults for any of these flags")
    for f in fields(BookieConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=_FLAG_HELP.get(f.name))
            continue
        conv: Any = {"int": int, "float": float, "Path": Path, "Path | None": Path, "int | None": int,
                     "str | None": str, "tuple[Path, ...]": _path_list}.get(str(f.type), str)
        p.add_argument(flag, type=conv, default=None, help=_FLAG_HELP.get(f.name))
    p.add_argument("--delete-cookie", action="store_true", help="remove this bookie id's cookie from metadata and exit")
    return p


def _path_list(text: str) -> tuple[Path, ...]:
    """--ledger-dirs: comma-separated paths, none empty."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"an empty path in {text!r} (comma-separated directories)")
    return tuple(Path(p) for p in parts)


# What a config file's value must be, by the field's annotation: (accepted types, how to say it).
# bool is an int in Python, so it is refused wherever a number is expected.
_FILE_VALUE_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "an integer"),
    "int | None": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "str": ((str,), "a string"),
    "str | None": ((str,), "a string"),
    "Path": ((str,), "a string (a path)"),
    "Path | None": ((str,), "a string (a path)"),
    "tuple[Path, ...]": ((list,), "an array of strings (paths)"),
}
_TOML_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
                    dict: "a table"}


def checked_file_values(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config file's keys, each known and of its field's type (floats take integers), or a
    ConfigError naming the key, the type expected and the file: one line for the operator."""
    field_types = {f.name: str(f.type) for f in fields(BookieConfig)}
    unknown = sorted(set(raw) - set(field_types))
    if unknown:
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                          "(keys are the flags' long names with underscores, e.g. data_dir)")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        accepted, expected = _FILE_VALUE_TYPES.get(field_types[key], ((str,), "a string"))
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            got = next((name for t, name in _TOML_TYPE_NAMES.items() if isinstance(value, t)), type(value).__name__)
            raise ConfigError(f"{path}: {key} must be {expected}, got {got} ({value!r:.60})")
        if field_types[key] == "tuple[Path, ...]":
            items = cast(list[Any], value)  # [] = the default: data_dir
            if not all(isinstance(v, str) and v for v in items):
                raise ConfigError(f"{path}: {key} must be an array of non-empty strings (paths), got {items!r:.60}")
            value = tuple(Path(v) for v in items)
        values[key] = float(cast(float, value)) if field_types[key] == "float" else value  # int or float here
    return values


def config_from_args(args: argparse.Namespace) -> BookieConfig:
    values: dict[str, Any] = {}
    if args.config is not None:
        try:
            with open(args.config, "rb") as fh:
                raw = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {args.config}: {exc}") from exc
        values.update(checked_file_values(raw, args.config))
    for f in fields(BookieConfig):
        v = getattr(args, f.name, None)
        if v is not None:
            values[f.name] = v
    if "zk_auth=" in (getattr(args, "metadata_uri", None) or ""):
        logging.getLogger(__name__).warning(
            "--metadata-uri carries zk_auth: the ZooKeeper secret is visible in ps; set LEDGER_ZK_AUTH or put "
            "metadata_uri in the --config file instead")
    if "metadata_uri" not in values:
        raise ConfigError("--metadata-uri is required (or set metadata_uri in --config)")
    if "data_dir" not in values and ("journal_dir" not in values or not values.get("ledger_dirs")):
        raise ConfigError("--data-dir is required (or set data_dir in --config), unless both --journal-dir and "
                          "--ledger-dirs are given")
    for key in ("data_dir", "journal_dir"):
        if key in values:
            values[key] = Path(values[key])
    try:
        cfg = BookieConfig(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    cfg.validate()
    return cfg
