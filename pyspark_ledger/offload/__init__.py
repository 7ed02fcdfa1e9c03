"""Tiered storage: sealed ledgers offloaded to an object store as Parquet (docs/tiered-storage.md).

store.py (pyarrow.fs over file:// and s3://), layout.py (object names), parquet_files.py (a
ledger's messages <-> one Parquet file), offload_ledger.py (write, verify, record one ledger),
queue_pass.py (deleting files nobody needs), choice.py (which ledgers, pure), offloader.py (a
pass over logs), offloaded_reads.py (entries of an offloaded ledger, for the read handle)."""
