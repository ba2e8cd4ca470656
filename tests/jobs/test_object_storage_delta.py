"""Delta tables on object storage: Spark's s3a connector against a real S3 API server (moto, over HTTP)."""
from __future__ import annotations

import json

import storage
from jobs.base import apply_storage_conf, merge_table


def test_delta_round_trip_and_idempotent_merge_on_s3(spark, s3):
    apply_storage_conf(spark)
    table = storage.spark_uri(storage.join(s3, "lake", "bronze", "things"))
    assert table.startswith("s3a://")
    rows = spark.createDataFrame([(f"id-{i}", i * i) for i in range(50)], "doc_id string, value long")
    first = merge_table(spark, rows, table, "doc_id", sync=False)
    assert first["created"] and first["inserted"] == 50
    again = merge_table(spark, rows, table, "doc_id", sync=False)
    assert again["inserted"] == 0 and again["version"] == first["version"]  # nothing new: no commit
    back = {r.doc_id: r.value for r in spark.read.format("delta").load(table).collect()}
    assert back == {f"id-{i}": i * i for i in range(50)}
    # the files really are objects in the bucket, with Delta's log beside them
    log = storage.glob(storage.join(s3, "lake", "bronze", "things", "_delta_log"), "*.json")
    assert log and json.loads(storage.read_text(log[0]).splitlines()[0])
    assert storage.glob(storage.join(s3, "lake", "bronze", "things"), "*.parquet")
