"""jobs.base.local_frame: the driver's small tables (the URLs jobs.fate is asked, export's mix rates and shard
offsets) become a DataFrame equal to `createDataFrame(rows, schema)`'s, planned as a local relation: no Python RDD, so
no Python worker starts for them."""
from __future__ import annotations

from datetime import datetime

from jobs.base import local_frame

SCHEMA = "url string, offset long, rate double, shard int, at timestamp, kept boolean"
ROWS = [("http://a.weblm.test/", 2 ** 62 + 1, 0.25, 3, datetime(2026, 12, 5, 8, 10, 47), True),
        (None, None, None, None, None, None),
        ("http://b.weblm.test/ü", -1, 0.0, -1, datetime(2000, 1, 1), False)]


def plan(df) -> str:
    return df._jdf.queryExecution().optimizedPlan().toString()


def test_rows_and_types_are_those_of_create_data_frame_and_no_python_rdd_makes_them(spark):
    frame = local_frame(spark, iter(ROWS), SCHEMA)
    listed = spark.createDataFrame(ROWS, SCHEMA)
    assert frame.schema == listed.schema
    assert frame.collect() == listed.collect()
    assert frame.collect()[0]["offset"] == 2 ** 62 + 1     # a long column that also holds None stays exact
    assert "LocalRelation" in plan(frame) and "LogicalRDD" not in plan(frame)
    assert "LogicalRDD" in plan(listed)                     # what it replaces


def test_no_rows_give_an_empty_frame_of_the_schema(spark):
    empty = local_frame(spark, [], SCHEMA)
    assert empty.schema == spark.createDataFrame([], SCHEMA).schema
    assert empty.collect() == []
    assert "LogicalRDD" not in plan(empty)
    joined = local_frame(spark, ROWS[:1], SCHEMA).join(empty, "url", "left_anti")
    assert [r["url"] for r in joined.collect()] == [ROWS[0][0]]
