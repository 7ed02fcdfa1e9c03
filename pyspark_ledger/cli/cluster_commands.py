"""`ledger cluster get|set`: the settings every client and bookie shares (metadata/cluster_settings.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from metadata.cluster_settings import SETTINGS, SettingValue, known_setting, read_cluster_settings, update_cluster_settings
from metadata.errors import InvalidMetadataError
from pyspark_ledger.cli.output import print_json, print_table

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("cluster", help="show or change the cluster settings every client and bookie shares")
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION")
    csub.required = True
    g = csub.add_parser("get", help="show every cluster setting (or one), its value and whether it is the default")
    g.add_argument("key", nargs="?", help="only this setting")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    s = csub.add_parser("set", help="change settings (compare-and-set; settings this release does not know are kept)")
    s.add_argument("assignments", nargs="+", metavar="KEY=VALUE",
                   help=f"a setting and its value; VALUE 'default' resets it (known: {', '.join(sorted(SETTINGS))})")
    s.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")


def parse_assignments(assignments: list[str]) -> dict[str, SettingValue | None]:
    """`KEY=VALUE` words into checked values (None: back to the default); an error names the word."""
    changes: dict[str, SettingValue | None] = {}
    for word in assignments:
        key, sep, text = word.partition("=")
        if not sep or not key:
            raise InvalidMetadataError(f"{word!r} is not KEY=VALUE")
        spec = known_setting(key.strip())
        changes[spec.name] = None if text.strip() == "default" else spec.parse(text)
    return changes


def cluster(client: LedgerClient, args: argparse.Namespace) -> int:
    if args.cluster_command == "set":
        update_cluster_settings(client.store, parse_assignments(args.assignments))
    settings, version = read_cluster_settings(client.store)
    names = sorted(SETTINGS)
    if args.cluster_command == "get" and args.key:
        names = [known_setting(args.key).name]
    rows = [{"key": n, "value": settings.values[n], "default": SETTINGS[n].default, "set": n in settings.raw,
             "help": SETTINGS[n].help} for n in names]
    unknown = {k: v for k, v in settings.raw.items() if k not in SETTINGS}
    if args.json:
        print_json({"settings": rows, "unknown": unknown, "version": version, "problems": list(settings.problems)})
        return 0
    print_table(["key", "value", "source", "meaning"],
                [(r["key"], _text(r["value"]), "set" if r["set"] else "default", r["help"]) for r in rows])
    if unknown and not (args.cluster_command == "get" and args.key):
        print(f"kept, not known to this release: {', '.join(f'{k}={_text(v)}' for k, v in sorted(unknown.items()))}")
    for problem in settings.problems:
        print(f"warning: {problem}")
    return 0


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_placement_parser(sub: Any) -> None:
    p = sub.add_parser("placementcheck", help="list ledgers whose write sets span fewer racks than the cluster "
                                              "settings ask (min_racks_per_write_quorum)")
    p.add_argument("--rate", type=float, default=500.0, help="ledgers read per second at most (default 500)")


def placementcheck(client: LedgerClient, args: argparse.Namespace) -> int:
    """Exit 0 when every ledger meets the rule, 1 when some do not (a check, like bookiesanity)."""
    from pyspark_ledger.autorecovery.auditor import RateLimiter
    from pyspark_ledger.autorecovery.placement_scan import RackView, misplaced_ledgers
    from pyspark_ledger.protocol.placement import RackRules, rack_name

    settings = client.cluster_settings
    rules = RackRules(settings.min_racks_per_write_quorum, settings.enforce_min_racks)
    view = RackView.of(client.bookies())
    found = list(misplaced_ledgers(client.ledgers, view, rules, RateLimiter(args.rate)))
    if args.json:
        print_json({"minRacksPerWriteQuorum": rules.min_racks_per_write_quorum, "enforced": rules.enforce,
                    "writableRacks": sorted(rack_name(r) for r in view.writable_racks),
                    "misplaced": [m.to_json() for m in found]})
        return 1 if found else 0
    print_table(["ledger", "state", "W", "racks needed", "fragment: narrowest write set's racks", "move off"],
                [(str(m.ledger_id), m.state, m.write_quorum_size, m.required_racks,
                  "; ".join(f"{i}: {','.join(rack_name(r) for r in racks)}" for i, racks in m.fragments),
                  ",".join(m.move) or "(not now)") for m in found])
    print(f"{len(found)} ledger(s) break the rule of {rules.min_racks_per_write_quorum} racks per write quorum "
          f"({'enforced' if rules.enforce else 'best effort'}); writable racks: "
          f"{', '.join(sorted(rack_name(r) for r in view.writable_racks)) or 'none'}")
    return 1 if found else 0
