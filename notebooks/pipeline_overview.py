# Databricks notebook source
# MAGIC %md
# MAGIC # weblm: what each stage kept, and one document traced end to end
# MAGIC Runs as a Databricks notebook (where `spark` exists) or locally:
# MAGIC `.venv/bin/python notebooks/pipeline_overview.py` after `make demo`.
# MAGIC Reads the Delta tables and the shard manifest named in `conf/paths.yaml`; writes nothing.

# COMMAND ----------

import json

from pyspark.sql import functions as F

import storage
from conf.paths import load_paths
from jobs.base import build_session
from jobs.config import load_jobs_config

paths = load_paths()
try:
    spark  # noqa: F821 - predefined on Databricks
except NameError:
    spark, _ = build_session(load_jobs_config(), paths, None, "weblm-notebook")

bronze = spark.read.format("delta").load(storage.spark_uri(paths.table("bronze.pages")))
silver = spark.read.format("delta").load(storage.spark_uri(paths.table("silver.documents")))
gold = spark.read.format("delta").load(storage.spark_uri(paths.table("gold.tokens")))

# COMMAND ----------

# MAGIC %md ## Funnel: pages → documents → tokens, per host

# COMMAND ----------

funnel = (bronze.groupBy("host").agg(F.count("*").alias("pages"),
                                     F.sum((F.col("status") == 200).cast("int")).alias("pages_200"))
          .join(silver.groupBy("host").agg(F.count("*").alias("documents"),
                                           F.round(F.avg("n_chars")).alias("avg_chars")), "host", "left")
          .join(gold.join(silver.select("doc_id", "host"), "doc_id")
                .groupBy("host").agg(F.sum("n_tokens").alias("tokens")), "host", "left")
          .fillna(0).orderBy(F.desc("tokens")))
funnel.show(truncate=False)

# COMMAND ----------

# MAGIC %md ## HTTP statuses the crawl archived

# COMMAND ----------

bronze.groupBy("status").count().orderBy("status").show()

# COMMAND ----------

# MAGIC %md ## One document, traced: shard sequence → doc_id → silver → bronze → WARC record

# COMMAND ----------

manifest = json.loads(storage.read_text(f"{paths.shards_dir}/manifest.json"))   # a local folder or s3://, gs://
first_shard = manifest["shards"][0]
first_doc = json.loads(storage.read_text(f"{paths.shards_dir}/{first_shard['docs']}").splitlines()[0])
trace = (silver.where(F.col("doc_id") == first_doc["doc_id"]).select("doc_id", "title", "n_chars")
         .join(bronze.select("doc_id", "url", "fetch_time", "warc_file", "warc_offset"), "doc_id"))
row = trace.first()
print(f"{first_shard['prefix']} sequence {first_doc['i']} ({first_doc['n_tokens']} tokens) = document {row.doc_id}")
print(f"  title {row.title!r}, {row.n_chars} characters of main text")
print(f"  fetched {row.url} at {row.fetch_time}")
print(f"  WARC record at offset {row.warc_offset} of {row.warc_file}")
print(f"  manifest {manifest['sha256'][:16]} built from Delta versions "
      + ", ".join(f"{name} v{src['version']}" for name, src in manifest["sources"].items()))

# COMMAND ----------

# MAGIC %md ## The other way: URLs the crawl did not fetch, and that document's URL traced forwards
# MAGIC `bronze.unfetched` holds the crawl's record of each URL it gave up on (robots.txt, TDMRep, a network failure);
# MAGIC `python -m jobs.fate URL` tells any URL's way, stage by stage, to the shard sequences it became.

# COMMAND ----------

from jobs.fate import render, url_fates  # noqa: E402

unfetched_table = paths.table("bronze.unfetched")
if storage.exists(storage.join(unfetched_table, "_delta_log")):
    (spark.read.format("delta").load(storage.spark_uri(unfetched_table)).groupBy("reason")
     .agg(F.countDistinct("url").alias("urls"), F.count("*").alias("records")).orderBy(F.desc("urls")).show())
print(render(url_fates(spark, load_jobs_config(), paths, [row.url])[0]))
