"""Delta tables on object storage, through Spark's own connectors against real API servers over HTTP: s3a against
moto's S3 server, and Google's gcs-connector (from `make jars`) against fake-gcs-server; then read back without a
JVM by delta-rs (object_store), as the corpus reader and the demo's summary read the jobs' tables."""
from __future__ import annotations

import json

from deltalake import DeltaTable

import storage
from jobs.base import apply_storage_conf, merge_table


def test_delta_round_trip_and_idempotent_merge_on_a_bucket(spark, bucket):
    apply_storage_conf(spark)
    table = storage.spark_uri(storage.join(bucket, "lake", "bronze", "things"))
    assert table.startswith("s3a://" if bucket.startswith("s3://") else "gs://")
    rows = spark.createDataFrame([(f"id-{i}", i * i) for i in range(50)], "doc_id string, value long")
    first = merge_table(spark, rows, table, "doc_id", sync=False)
    assert first["created"] and first["inserted"] == 50
    again = merge_table(spark, rows, table, "doc_id", sync=False)
    assert again["inserted"] == 0 and again["version"] == first["version"]  # nothing new: no commit
    # a MERGE that updates 10 rows (their files rewritten in the bucket) and inserts 10
    changed = spark.createDataFrame([(f"id-{i}", i * i if i < 40 else -i) for i in range(60)],
                                    "doc_id string, value long")
    third = merge_table(spark, changed, table, "doc_id", sync=True)
    assert (third["inserted"], third["updated"], third["deleted"]) == (10, 10, 0)
    assert third["version"] == first["version"] + 1
    back = {r.doc_id: r.value for r in spark.read.format("delta").load(table).collect()}
    assert back == {f"id-{i}": (i * i if i < 40 else -i) for i in range(60)}
    # the files really are objects in the bucket (read back through fsspec), with Delta's log beside them
    log = storage.glob(storage.join(bucket, "lake", "bronze", "things", "_delta_log"), "*.json")
    assert len(log) == 2 and json.loads(storage.read_text(log[0]).splitlines()[0])
    assert storage.glob(storage.join(bucket, "lake", "bronze", "things"), "*.parquet")
    # delta-rs sees the same table at the same version
    uri = storage.join(bucket, "lake", "bronze", "things")
    seen = DeltaTable(uri, storage_options=storage.object_store_options(uri) or None)
    assert seen.version() == third["version"]
    rows = seen.to_pyarrow_table(columns=["doc_id", "value"]).to_pydict()
    assert dict(zip(rows["doc_id"], rows["value"])) == back
