"""weblm's Spark jobs: WARC -> bronze.pages -> silver.documents -> gold.tokens -> Megatron shards.

Each stage is a module runnable as `python -m jobs.<stage>` or `spark-submit jobs/<stage>.py`;
the per-document work lives in pure modules (`jobs.warc`, `jobs.text`) testable without Spark.
"""
