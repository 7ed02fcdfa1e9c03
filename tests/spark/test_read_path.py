"""Spark reads through the one read path: a lone Arrow ledger's schema comes from its entry 0
(planning.first_entry_range + reader.arrow_schema_of), and its rows come back as written."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.rows import META_NAMES
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker


def test_a_lone_arrow_ledger_reads_back_with_its_schema(spark: SparkSession, uri: str, client: LedgerClient) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    packer = ArrowEntryPacker(schema, rows_max=400)
    batch = pa.record_batch([pa.array(range(1000), pa.int64()), pa.array([f"n{i}" for i in range(1000)])], schema=schema)
    handle = client.create_ledger()
    for entry in list(packer.add(batch)) + list(packer.flush()):
        handle.add_entry(entry.to_pybytes())
    handle.close()
    df = (spark.read.format("ledger").option("metadataServiceUri", uri)
          .option("ledger", handle.ledger_id.qualified_name).option("payloadFormat", "arrow").load())
    assert df.columns == ["id", "name", *META_NAMES]
    rows = df.orderBy("id").collect()
    assert [(r.id, r.name, r.entry, r["index"], r.log, r.seq) for r in rows] == \
        [(i, f"n{i}", i // 400, i % 400, None, None) for i in range(1000)]

