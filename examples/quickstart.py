"""Quickstart: a metadata round trip on the embedded store (no services needed).

Creates a ledger's metadata in a SQLite store, closes it by compare-and-set, reads it back and
prints it. Later milestones grow this into the full Spark demo.
"""

from __future__ import annotations

import json
import os
import tempfile

from metadata import CloseContext, CreateContext, LedgerManager, LedgerMetadata, QuorumConfig, open_store
from metadata import serde


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ledger-quickstart-") as tmp:
        uri = f"sqlite://{os.path.join(tmp, 'metadata.db')}"
        with open_store(uri) as store:
            ledgers = LedgerManager(store)
            lid = ledgers.allocate_ledger_id()
            ctx = CreateContext.builder().created_by("Example Co", "quickstart", "demo", os.uname().nodename).build()
            meta = LedgerMetadata.new(lid, QuorumConfig(3, 3, 2), ["bookie-1", "bookie-2", "bookie-3"], create_context=ctx)
            ledgers.create(meta)
            closed, version = ledgers.update(
                lid, lambda m: m.close(99, 4096, close_context=CloseContext.builder().because_no_more_data().build())
            )
            print(f"metadata store: {uri}")
            print(f"ledger {lid} ({lid.qualified_name}) is {closed.state.value} at version {version}")
            print(json.dumps(serde.to_json_dict(ledgers.read(lid)[0]), indent=2))


if __name__ == "__main__":
    main()
