"""`ledger logs set NAME key=value ...` (retention and log settings) and `ledger retention run`
(one retention pass, what the autorecovery leader does on its schedule): docs/subscriptions.md#retention."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from metadata import log_settings
from metadata.errors import InvalidMetadataError
from metadata.log_record import LogRecord
from pyspark_ledger.cli.output import print_json, print_table

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

RETENTION_KEYS = ("max_age_ms", "max_size_bytes")  # kept in the record's `retention` object (every release reads it)
UNSET = ("", "none")  # `key=` or `key=none` removes the setting (its default applies again)


def add_set_parser(lsub: Any) -> None:
    keys = ", ".join(RETENTION_KEYS + tuple(sorted(log_settings.LOG_SETTINGS)))
    q = lsub.add_parser("set", help="set a log's retention and settings: ledger logs set NAME key=value ...",
                        description=f"keys: {keys}; `key=` or `key=none` unsets one")
    q.add_argument("name", help="the log's name")
    q.add_argument("settings", nargs="+", metavar="KEY=VALUE", help=f"one of: {keys}")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("retention", help="apply logs' retention now (the autorecovery leader does it on a schedule)")
    rsub = p.add_subparsers(dest="retention_command", metavar="ACTION")
    rsub.required = True
    q = rsub.add_parser("run", help="one retention pass over every log, or one")
    q.add_argument("--log", dest="log_name", help="only this log")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")


def parse_changes(pairs: Sequence[str]) -> dict[str, str | None]:
    """KEY=VALUE arguments, every one checked before any is applied; errors name the key and value."""
    known = set(RETENTION_KEYS) | set(log_settings.LOG_SETTINGS)
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"{pair!r} is not KEY=VALUE")
        if key not in known:
            raise ValueError(f"unknown log setting {key!r} (known: {', '.join(sorted(known))})")
        if key in out:
            raise ValueError(f"log setting {key!r} given twice")
        if value.lower() in UNSET:
            out[key] = None
        elif key in RETENTION_KEYS:
            out[key] = str(_non_negative(key, value))
        else:
            try:
                log_settings.parse_value(key, value)
            except InvalidMetadataError as exc:
                raise ValueError(str(exc)) from None
            out[key] = value
    return out


def _non_negative(key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"log setting {key}={value!r}: not an integer") from None
    if number < 0:
        raise ValueError(f"log setting {key}={value!r}: must be >= 0")
    return number


def apply_changes(r: LogRecord, changes: dict[str, str | None]) -> LogRecord:
    def number(key: str, old: int | None) -> int | None:
        if key not in changes:
            return old
        value = changes[key]
        return None if value is None else int(value)

    retention = replace(r.retention, max_age_ms=number("max_age_ms", r.retention.max_age_ms),
                        max_size_bytes=number("max_size_bytes", r.retention.max_size_bytes))
    settings = {k: v for k, v in changes.items() if k not in RETENTION_KEYS}
    # replace, not a new Retention: keys a newer release keeps there survive this change
    return log_settings.with_settings(r.with_retention(retention), settings)


def logs_set(client: LedgerClient, args: argparse.Namespace) -> int:
    changes = parse_changes(args.settings)
    rec, _ = client.logs.update_head(args.name, lambda r: apply_changes(r, changes))
    shown = settings_rows(rec)
    if args.json:
        print_json({k: v for k, v, _ in shown})
    else:
        print(f"log {args.name}: " + ", ".join(f"{k}={v}" for k, v, _ in shown))
    return 0


def settings_rows(rec: LogRecord) -> list[tuple[str, str, str]]:
    """(key, value, where it comes from) for retention and every known setting, then unknown stored ones."""
    rows = [(k, "none" if getattr(rec.retention, k) is None else str(getattr(rec.retention, k)), "retention")
            for k in RETENTION_KEYS]
    stored = log_settings.stored(rec)
    for name in sorted(log_settings.LOG_SETTINGS):
        value = log_settings.get(rec, name)
        rows.append((name, "none" if value is None else str(value), "set" if name in stored else "default"))
    rows += [(name, value, "unknown to this release") for name, value in sorted(stored.items())
             if name not in log_settings.LOG_SETTINGS]
    return rows


def retention(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.retention_task import RetentionSettings, RetentionTask
    from pyspark_ledger.log.subscription_source import store_subscriptions

    if args.log_name is not None:
        client.logs.read_head(args.log_name)  # a missing log is an error naming it
    task = RetentionTask(client, store_subscriptions(client.store), RetentionSettings(logs_per_pass=100_000))
    outcomes = task.run_pass(only=args.log_name)
    rows: list[dict[str, Any]] = [{"log": o.log_name, "trimmedLedgers": len(o.trimmed), "trimmedBytes": o.trimmed_bytes,
             "deletedLedgers": o.deleted, "heldBySubscriptions": o.held, "lostSubscriptions": list(o.lost)}
            for o in outcomes]
    if args.json:
        print_json(rows)
        return 0
    print_table(["log", "trimmed ledgers", "trimmed bytes", "deleted", "held by subscriptions", "lost subscriptions"],
                [(r["log"], r["trimmedLedgers"], r["trimmedBytes"], r["deletedLedgers"], r["heldBySubscriptions"],
                  ",".join(r["lostSubscriptions"])) for r in rows])
    return 0
