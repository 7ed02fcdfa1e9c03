"""Spark reads through the one read path: a lone Arrow ledger's schema comes from its entry 0
(planning.first_entry_range + reader.arrow_schema_of), and the metadata columns are declared
non-null except a lone ledger's log and seq (rows.meta_fields), which Spark's check of every
batch's schema accepts."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource import codec
from pyspark_ledger.datasource.rows import META_NAMES


def test_a_lone_arrow_ledger_reads_back_with_its_schema(spark: SparkSession, uri: str, client: LedgerClient) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    packer = codec.ArrowEntryPacker(schema, rows_max=400)
    batch = pa.record_batch([pa.array(range(1000), pa.int64()), pa.array([f"n{i}" for i in range(1000)])], schema=schema)
    handle = client.create_ledger()
    for entry in list(packer.add(batch)) + list(packer.flush()):
        handle.add_entry(entry.to_pybytes())
    handle.close()
    df = (spark.read.format("ledger").option("metadataServiceUri", uri)
          .option("ledger", handle.ledger_id.qualified_name).option("payloadFormat", "arrow").load())
    assert df.columns == ["id", "name", *META_NAMES]
    assert {f.name: f.nullable for f in df.schema.fields} == {
        "id": True, "name": True, "log": True, "seq": True, "ledger": False, "entry": False, "index": False,
        "timestamp": False}
    rows = df.orderBy("id").collect()
    assert [(r.id, r.name, r.entry, r["index"], r.log, r.seq) for r in rows] == \
        [(i, f"n{i}", i // 400, i % 400, None, None) for i in range(1000)]


def test_a_log_read_declares_its_metadata_columns_non_null(spark: SparkSession, uri: str, client: LedgerClient,
                                                          log_name: str) -> None:
    with client.open_log_writer(log_name) as w:
        for i in range(50):
            w.append(b"%d" % i)
    df = spark.read.format("ledger").option("metadataServiceUri", uri).option("log", log_name).load()
    assert [f.nullable for f in df.schema.fields] == [True] + [False] * len(META_NAMES)
    assert sorted(int(r.payload) for r in df.collect()) == list(range(50))
    assert {r.log for r in df.select("log").collect()} == {log_name}
