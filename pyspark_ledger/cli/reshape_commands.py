"""`ledger expandledger` and `ledger contractledger`: change a CLOSED ledger's E, W and A
(pyspark_ledger/autorecovery/reshape.py). Run as the operator (LEDGER_OPERATOR_SECRET[_FILE] or an
operator certificate): no ledger password is needed. Run the same command again after a crash: it
finishes or rolls back the change it finds."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from pyspark_ledger.cli.commands import ledger_id
from pyspark_ledger.cli.output import print_json
from pyspark_ledger.cli.passwords import add_password_args

if TYPE_CHECKING:
    from metadata import LedgerMetadata
    from pyspark_ledger.client import LedgerClient


def add_parsers(sub: Any, ledger_args: Any) -> None:
    p = sub.add_parser("expandledger", help="raise a closed ledger's write quorum (more copies of each entry) and "
                                            "optionally widen its ensembles")
    ledger_args(p)
    p.add_argument("--write-quorum", "-W", type=int, required=True, help="the new write quorum W (copies per entry)")
    p.add_argument("--ensemble-size", "-E", type=int, default=None,
                   help="the new ensemble size E (default: the current one, or W if larger)")
    p.add_argument("--ack-quorum", "-A", type=int, default=None, help="the new ack quorum A (default: unchanged)")
    add_password_args(p)  # only without an operator identity (LEDGER_OPERATOR_SECRET[_FILE])

    p = sub.add_parser("contractledger", help="remove bookies from a closed ledger's ensembles (and lower W), "
                                              "copying what they held to the bookies that stay")
    ledger_args(p)
    p.add_argument("--remove-bookie", action="append", required=True, metavar="BOOKIE",
                   help="a bookie the ledger leaves (repeat for several)")
    p.add_argument("--ensemble-size", "-E", type=int, default=None,
                   help="the new ensemble size E (default: the current one minus the bookies removed)")
    p.add_argument("--write-quorum", "-W", type=int, default=None, help="the new write quorum W (default: min(W, E))")
    p.add_argument("--ack-quorum", "-A", type=int, default=None, help="the new ack quorum A (default: min(A, W))")
    add_password_args(p)


def _shape(meta: LedgerMetadata, args: argparse.Namespace, contract: bool) -> tuple[int, int, int, list[str]]:
    if contract:
        remove = list(dict.fromkeys(args.remove_bookie))
        e = args.ensemble_size if args.ensemble_size is not None else meta.ensemble_size - len(remove)
        w = args.write_quorum if args.write_quorum is not None else min(meta.write_quorum_size, e)
        return e, w, args.ack_quorum if args.ack_quorum is not None else min(meta.ack_quorum_size, w), remove
    w = args.write_quorum
    e = args.ensemble_size if args.ensemble_size is not None else max(meta.ensemble_size, w)
    return e, w, args.ack_quorum if args.ack_quorum is not None else meta.ack_quorum_size, []


def _run(client: LedgerClient, args: argparse.Namespace, contract: bool) -> int:
    from pyspark_ledger.autorecovery.reshape import reshape
    from pyspark_ledger.autorecovery.service import holder_name
    from pyspark_ledger.ledger.keys import CredentialSource

    lid = ledger_id(args)
    meta = client.ledger_metadata(lid)
    e, w, a, remove = _shape(meta, args, contract)
    credentials = CredentialSource(client.context, args.password).for_ledger(meta, avoid=remove)
    with tqdm(desc=f"reshaping {lid}", unit="B", unit_scale=True, file=sys.stderr,
              disable=args.json or not sys.stderr.isatty()) as bar:
        plan = reshape(client.context, lid, ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, remove=remove,
                       credentials=credentials, holder=holder_name(), on_copied=bar.update)
    out = {"ledger": str(lid), "ensembleSize": plan.ensemble_size, "writeQuorum": plan.write_quorum_size,
           "ackQuorum": plan.ack_quorum_size, "ensembles": [list(x) for x in plan.ensembles], "left": list(plan.leaving)}
    if args.json:
        print_json(out)
    else:
        print(f"ledger {lid}: E={plan.ensemble_size} W={plan.write_quorum_size} A={plan.ack_quorum_size}; "
              f"ensembles {out['ensembles']}" + (f"; left {out['left']}" if plan.leaving else ""))
    return 0


def expandledger(client: LedgerClient, args: argparse.Namespace) -> int:
    return _run(client, args, contract=False)


def contractledger(client: LedgerClient, args: argparse.Namespace) -> int:
    return _run(client, args, contract=True)
