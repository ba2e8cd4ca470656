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


def test_maintenance_compacts_and_vacuums_a_table_in_a_bucket(spark, bucket):
    """jobs.maintain finds the lake's tables by listing the bucket, and Delta's OPTIMIZE and VACUUM run through the
    connector: the objects the table stopped using are deleted, its rows stay."""
    from jobs.maintain import MaintainJob, lake_tables

    apply_storage_conf(spark)
    lake = storage.join(bucket, "lake")
    table = storage.spark_uri(storage.join(lake, "silver", "things"))
    for part in range(3):   # three appends: three small files, then one MERGE that rewrites one of them
        rows = spark.createDataFrame([(f"id-{part}-{i}", i) for i in range(10)], "doc_id string, value long")
        merge_table(spark, rows.coalesce(1), table, "doc_id", sync=False)
    merge_table(spark, spark.createDataFrame([("id-0-0", -1)], "doc_id string, value long"),
                table, "doc_id", sync=False)   # a key already there: nothing to do, no commit
    before = sorted((r.doc_id, r.value) for r in spark.read.format("delta").load(table).collect())
    objects = storage.glob(storage.join(lake, "silver", "things"), "*.parquet")
    assert len(objects) >= 3
    assert lake_tables(lake) == [("silver.things", storage.join(lake, "silver", "things"))]
    metrics = MaintainJob().run(["--lake", lake, "-o", "maintain.retention_hours=0",
                                 "-o", "maintain.compact_min_files=2"])
    assert metrics.status == "ok" and metrics.extra["files_compacted"] == len(objects)
    assert metrics.extra["tables"]["silver.things"]["small_files"] == len(objects)   # sizes read from the bucket's log
    assert metrics.extra["files_written"] == 1 and metrics.extra["files_vacuumed"] == len(objects)
    assert sorted((r.doc_id, r.value) for r in spark.read.format("delta").load(table).collect()) == before
    left = storage.glob(storage.join(lake, "silver", "things"), "*.parquet")
    assert len(left) == 1 and left[0] not in objects
