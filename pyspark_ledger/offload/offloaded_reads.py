"""Entries of an OFFLOADED ledger, read from its file in the object store (for the read handle).

The store comes from the record's URI (its settings from this process's environment,
store.py); one ObjectStore per URI per process, a bounded cache. Only the row groups a range
needs are read (parquet_files.LedgerFile)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

from metadata.ledger import LedgerMetadata
from metadata.offload_record import offload_record
from pyspark_ledger.offload.errors import OffloadedFileError
from pyspark_ledger.offload.parquet_files import LedgerFile
from pyspark_ledger.offload.store import ObjectStore
from pyspark_ledger.protocol.entry_format import Entry

STORES_CACHED_MAX = 8
_stores: OrderedDict[str, ObjectStore] = OrderedDict()
_lock = threading.Lock()


def store_for(uri: str) -> ObjectStore:
    with _lock:
        got = _stores.get(uri)
        if got is None:
            got = _stores[uri] = ObjectStore(uri)
            while len(_stores) > STORES_CACHED_MAX:
                _stores.popitem(last=False)
        _stores.move_to_end(uri)
        return got


def open_ledger_file(meta: LedgerMetadata) -> LedgerFile:
    rec = offload_record(meta)
    if rec is None or not rec.offloaded or len(rec.files) != 1:
        raise OffloadedFileError(f"ledger {meta.ledger_id} has no offloaded file to read")
    f = rec.files[0]
    store = store_for(rec.store)
    where = f"ledger {meta.ledger_id} file {rec.store}/{f.name}"
    lf = LedgerFile(store.open(f.name), where)
    if lf.facts.ledger_id != meta.ledger_id or lf.facts.entries != (meta.last_entry_id or 0) + 1:
        raise OffloadedFileError(f"{where}: holds ledger {lf.facts.ledger_id} with {lf.facts.entries} entries, "
                                 f"not ledger {meta.ledger_id} with {(meta.last_entry_id or 0) + 1}")
    return lf


def offloaded_entries(lf: LedgerFile, first: int, last: int) -> Iterator[Entry]:
    expect = first
    for e in lf.entries(first, last):
        if e.entry_id != expect:
            raise OffloadedFileError(f"{lf.where}: entry {expect} expected, found {e.entry_id}")
        expect += 1
        yield e
    if expect != last + 1:
        raise OffloadedFileError(f"{lf.where}: entries {expect}..{last} are missing")
