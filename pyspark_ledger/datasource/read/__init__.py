"""Batch reading: plan which entries of which ledgers a read returns (planning, cuts, ranges), read
them on executors and turn them into Arrow batches (reader over the ledger room's run reads,
codec, meta_columns, batch_unpack), with the columns a read returns (columns, spark_schema) and
the filters it applies (pushdown, spark_filters).

Imports options/ and the shared modules of pyspark_ledger/datasource/, never write/ or stream/.
"""
