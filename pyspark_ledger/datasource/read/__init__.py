"""Batch reading: plan which entries of which ledgers a read returns (planning, cuts, ranges), read
them on executors and turn them into Arrow batches (reader over the ledger room's run reads, codec, meta_columns).

Imports options/ and the shared modules of pyspark_ledger/datasource/, never write/ or stream/.
"""
