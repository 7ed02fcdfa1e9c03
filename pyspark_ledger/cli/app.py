"""Argument parsing, metadata URI resolution, error handling and exit codes of `ledger`.

Exit codes: 0 ok, 1 failure (bad id, unknown ledger, unreachable metadata, a failed check),
2 usage error. Failures print one line on stderr, never a traceback (set LEDGER_DEBUG=1 for one).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bookie.proto.versions import RELEASE
from metadata import DigestType, MetadataError
from metadata.embedded_store import embedded_path_from_env_default
from pyspark_ledger.cli import (
    autorecovery_commands,
    bookie_admin,
    cluster_commands,
    commands,
    reshape_commands,
    retention_commands,
    standalone,
    subscription_commands,
)
from pyspark_ledger.cli.log_read import add_read_parser
from pyspark_ledger.cli.no_bookies import explain
from pyspark_ledger.cli.passwords import add_password_args, check_new_ledger_password, resolve_password
from pyspark_ledger.cli.standalone_pidfile import StandaloneError
from pyspark_ledger.errors import LedgerError, PySparkLedgerError

ENV_URI = "LEDGER_METADATA_URI"
ENV_CONFIG = "LEDGER_CONFIG"
DEFAULT_CONFIG = Path.home() / ".config" / "pyspark-ledger" / "config.toml"


class UsageError(PySparkLedgerError):
    pass


class CommandError(PySparkLedgerError):
    """A failure the command already explained; exit 1."""


def resolve_metadata_uri(flag: str | None) -> str:
    """--metadata-uri, then $LEDGER_METADATA_URI, then metadata_uri in the config file
    ($LEDGER_CONFIG or ~/.config/pyspark-ledger/config.toml), then the embedded default if it exists."""
    if flag:
        if "zk_auth=" in flag:
            print("ledger: warning: --metadata-uri carries zk_auth, visible in ps and shell history; set "
                  "LEDGER_ZK_AUTH (or LEDGER_METADATA_URI) instead", file=sys.stderr)
        return flag
    if os.environ.get(ENV_URI):
        return os.environ[ENV_URI]
    cfg = Path(os.environ.get(ENV_CONFIG, DEFAULT_CONFIG))
    if cfg.exists():
        try:
            with open(cfg, "rb") as fh:
                value = tomllib.load(fh).get("metadata_uri")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CommandError(f"cannot read config file {cfg}: {exc}") from exc
        if value:
            return str(value)
    default = embedded_path_from_env_default()
    if default.exists():
        return f"sqlite://{default}"
    raise UsageError(f"no metadata service given: use --metadata-uri, set {ENV_URI}, or put metadata_uri in {cfg}")


def _ledger_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("ledger", nargs=None if required else "?", help="ledger id (decimal, scope 0) or 32-hex qualified name")
    p.add_argument("--ledger-scope-id", type=int, default=None, help="scope of a decimal ledger id (BP-35)")
    p.add_argument("--ledger-qualified-name", action="store_true", help="treat LEDGER as a 128-bit qualified name")


def _json_adder(add_parser: Callable[..., argparse.ArgumentParser]) -> Callable[..., argparse.ArgumentParser]:
    """Wrap a subparsers' add_parser so every command also accepts `--json` after its name."""

    def add(*a: Any, **kw: Any) -> argparse.ArgumentParser:
        p = add_parser(*a, **kw)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
        return p

    return add


def installed_version() -> str:
    """The version of the code that runs (an editable install's metadata may lag behind it)."""
    return RELEASE


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ledger", description="pyspark-ledger admin shell")
    ap.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    ap.add_argument("--metadata-uri", help=f"zk://host:port/root or sqlite:///path.db (else ${ENV_URI} or the config file)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    # TLS to the bookies (docs/security.md); also tls_ca=... query parameters of the metadata URI.
    ap.add_argument("--tls-ca", help="PEM CA that signed the bookies' certificates: talk TLS to the bookies")
    ap.add_argument("--tls-cert", help="PEM client certificate, for bookies that require one (mutual TLS)")
    ap.add_argument("--tls-key", help="PEM private key of --tls-cert")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # `--json` is accepted after the command too (`ledger listledgers --json`).
    sub.add_parser = _json_adder(sub.add_parser)  # type: ignore[method-assign]  # every subcommand gets --json

    _add_ledger_commands(sub)
    _add_bookie_commands(sub)
    _add_log_commands(sub)
    subscription_commands.add_parsers(sub, _json_adder)
    _add_bp44_commands(sub)
    autorecovery_commands.add_parsers(sub)
    retention_commands.add_parsers(sub)
    reshape_commands.add_parsers(sub, _ledger_args)
    cluster_commands.add_parsers(sub)
    cluster_commands.add_placement_parser(sub)
    standalone.add_parser(sub)
    return ap


def _add_ledger_commands(sub: Any) -> None:
    p = sub.add_parser("listledgers", help="list ledgers (filter by scope, bookie, state)")
    p.add_argument("--scope", type=int, help="only this scope id")
    p.add_argument("--bookie", help="only ledgers with a fragment on this bookie")
    p.add_argument("--state", choices=["OPEN", "IN_RECOVERY", "CLOSED"], help="only ledgers in this state")
    p.add_argument("--meta", action="store_true", help="show E/W/A, state and last entry")

    p = sub.add_parser("ledgermetadata", help="show one ledger's metadata")
    _ledger_args(p)

    p = sub.add_parser("readledger", help="read entries of a ledger")
    _ledger_args(p)
    p.add_argument("--first", type=int, default=0, help="first entry id to read (default 0)")
    p.add_argument("--last", type=int, default=None, help="default: the last entry (or the LAC of an open ledger)")
    p.add_argument("--format", choices=["utf8", "hex"], default="utf8",
                   help="how payloads are printed (default utf8, undecodable bytes escaped)")
    p.add_argument("--force-recovery", action="store_true", help="fence and close the ledger first (recovery open)")
    add_password_args(p)

    p = sub.add_parser("recover", help="recover one ledger, or every ledger with a fragment on a bookie")
    p.add_argument("ledger", nargs="?", help="ledger id or qualified name")
    p.add_argument("--ledger-scope-id", type=int, default=None, help="scope of a decimal ledger id (BP-35)")
    p.add_argument("--ledger-qualified-name", action="store_true", help="treat LEDGER as a 128-bit qualified name")
    p.add_argument("--bookie", help="recover every ledger with a fragment on this bookie")
    p.add_argument("--dry-run", action="store_true", help="only show what would be done")
    add_password_args(p)
    p.add_argument("--no-rereplicate", action="store_true", help="with --bookie: only close open ledgers")
    p.add_argument("--rate-mb-s", type=float, default=50.0,
                   help="MB (10^6 bytes) per second re-replication copies at most, all ledgers together (default 50)")
    p.add_argument("--parallel", type=int, default=4, help="ledgers recovered at once (default 4)")

    p = sub.add_parser("deleteledger", help="delete a ledger")
    _ledger_args(p)
    add_password_args(p)  # or the operator identity (LEDGER_OPERATOR_SECRET[_FILE])
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")

    p = sub.add_parser("quorums", help="explain the replication and recovery quorums of E/W/A")
    _quorum_args(p, None)


def _add_bookie_commands(sub: Any) -> None:
    p = sub.add_parser("listbookies", help="list registered bookies")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rw", action="store_true", help="writable bookies only")
    g.add_argument("--ro", action="store_true", help="read-only bookies only")
    g.add_argument("--all", action="store_true", help="all bookies (default)")

    p = sub.add_parser("bookieinfo", help="a bookie's storage: per directory used and capacity, live/dead bytes, last GC")
    p.add_argument("bookie", nargs="?", help="bookie id (default: every registered bookie)")

    p = sub.add_parser("triggergc", help="run a bookie's garbage collection and compaction now")
    p.add_argument("bookie", help="bookie id")

    p = sub.add_parser("simpletest", help="create a ledger, write entries, read them back, delete it")
    _quorum_args(p, (3, 3, 2))
    p.add_argument("-n", "--num-entries", type=int, default=100, help="entries to write and read back (default 100)")
    _new_ledger_args(p)

    p = sub.add_parser("bookiesanity", help="write and read a ledger on each bookie alone")
    p.add_argument("--bookie", help="check only this bookie")
    p.add_argument("-n", "--num-entries", type=int, default=10, help="entries per bookie (default 10)")
    _new_ledger_args(p)


def _new_ledger_args(p: argparse.ArgumentParser) -> None:
    """Commands that create ledgers: their digest and password (pyspark_ledger/cli/passwords.py)."""
    p.add_argument("--digest", choices=[d.value for d in DigestType], default=DigestType.CRC32C.value,
                   help="entry digest of the ledger (default crc32c; mac needs a password)")
    add_password_args(p)


def _quorum_args(p: argparse.ArgumentParser, defaults: tuple[int, int, int] | None) -> None:
    """-e/-w/-a: required when defaults is None."""
    for short, name, what, default in zip(("-e", "-w", "-a"), ("ensemble-size", "write-quorum-size", "ack-quorum-size"),
                                          ("bookies a ledger is striped over (E)", "copies of each entry (W)",
                                           "acknowledgements an add waits for (A)"),
                                          defaults or (None, None, None)):
        p.add_argument(short, f"--{name}", type=int, required=defaults is None, default=default,
                       help=what + ("" if default is None else f" (default {default})"))


def _add_log_commands(sub: Any) -> None:
    p = sub.add_parser("logs", help="list, show, read, set, trim or delete named logs")
    lsub = p.add_subparsers(dest="logs_command", metavar="ACTION")
    lsub.required = True
    lsub.add_parser = _json_adder(lsub.add_parser)
    lsub.add_parser("list", help="list logs")
    q = lsub.add_parser("show", help="show a log's state (from its head) and, on request, its newest ledgers")
    q.add_argument("name", help="the log's name")
    q.add_argument("--ledgers", type=int, default=0, metavar="N", help="also list the newest N ledgers (bounded)")
    add_read_parser(lsub)
    retention_commands.add_set_parser(lsub)
    q = lsub.add_parser("trim", help="trim whole ledgers off the front of a log")
    q.add_argument("name", help="the log's name")
    q.add_argument("--before", help='a position JSON: {"seq": n, "ledger": hex, "entry": n}')
    q.add_argument("--max-age-s", type=float, help="trim whole ledgers older than this many seconds")
    q.add_argument("--max-size-bytes", type=int, help="trim the oldest whole ledgers until the log is at most this big")
    q = lsub.add_parser("delete", help="delete a log and all its ledgers, after fencing its writer (asks first)")
    q.add_argument("name", help="the log's name")
    q.add_argument("--yes", action="store_true", help="delete without asking (needed when stdin is not a terminal)")
    add_password_args(q)  # the fence recovery-opens the log's unsealed ledgers


def _add_bp44_commands(sub: Any) -> None:
    p = sub.add_parser("listorphaned", help="list orphaned ledgers found by the auditor (BP-44)")
    p.add_argument("--printorphanreason", action="store_true", help="also print why each ledger is orphaned")

    p = sub.add_parser("showowner", help="show a ledger's owner and data set (BP-44)")
    _ledger_args(p)

    p = sub.add_parser("predictlifespan", help="show a ledger's expected and actual lifespan (BP-44)")
    _ledger_args(p)

    p = sub.add_parser("auditor", help="find orphaned ledgers: one pass, or periodically")
    p.add_argument("--interval-s", type=float, default=None, help="repeat every N seconds (default: one pass)")
    p.add_argument("--passes", type=int, default=None, help="stop after this many passes")
    p.add_argument("--grace-period-s", type=float, default=3600.0,
                   help="a ledger is judged orphaned only this long after its deadline or creation (default 3600)")
    p.add_argument("--rate", type=float, default=200.0, help="ledgers scanned per second at most")


HANDLERS: dict[str, Callable[..., int]] = {
    "listledgers": commands.listledgers,
    "ledgermetadata": commands.ledgermetadata,
    "readledger": commands.readledger,
    "recover": commands.recover,
    "deleteledger": commands.deleteledger,
    "listbookies": autorecovery_commands.listbookies,
    "bookieinfo": bookie_admin.bookieinfo,
    "triggergc": bookie_admin.triggergc,
    "simpletest": commands.simpletest,
    "bookiesanity": commands.bookiesanity,
    "logs": commands.logs,
    "subscriptions": subscription_commands.subscriptions,
    "quorums": commands.quorums,
    "listorphaned": commands.listorphaned,
    "showowner": commands.showowner,
    "predictlifespan": commands.predictlifespan,
    "auditor": commands.auditor,
    "autorecovery": autorecovery_commands.autorecovery,
    "retention": retention_commands.retention,
    "listunderreplicated": autorecovery_commands.listunderreplicated,
    "decommissionbookie": autorecovery_commands.decommissionbookie,
    "expandledger": reshape_commands.expandledger,
    "contractledger": reshape_commands.contractledger,
    "cluster": cluster_commands.cluster,
    "placementcheck": cluster_commands.placementcheck,
    "standalone": standalone.standalone,
}
NO_METADATA = {"quorums", "standalone"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error
        return int(exc.code or 0)
    logging.basicConfig(level=logging.ERROR if not os.environ.get("LEDGER_DEBUG") else logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")
    client: Any = None
    try:
        if hasattr(args, "password"):
            args.password = resolve_password(args)  # bytes from now on; never printed
            if hasattr(args, "digest"):
                check_new_ledger_password(args.password, args.digest)
        if args.command not in NO_METADATA:
            uri = resolve_metadata_uri(args.metadata_uri)
            from pyspark_ledger.client import LedgerClient

            client = LedgerClient(uri, add_timeout_s=10, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                                  tls_key=args.tls_key)
        return HANDLERS[args.command](client, args)
    except UsageError as exc:
        print(f"ledger: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # the reader of our output went away: cli.closed_pipe ends quietly
    except (CommandError, MetadataError, LedgerError, StandaloneError, ValueError, OSError) as exc:
        if os.environ.get("LEDGER_DEBUG"):
            raise
        print(f"ledger {args.command}: {explain(client, exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ledger: interrupted", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
