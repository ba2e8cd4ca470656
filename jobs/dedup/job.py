"""`silver.documents` -> `silver.deduped`: URL, exact, MinHash-LSH near-duplicates, paragraphs, contamination.

    python -m jobs.dedup.job [--lake DIR] [--full] [--decide-only] [-o dedup.minhash.threshold=0.85]
    spark-submit jobs/dedup/job.py ...

Score once, decide later.  Signals are computed once per document and kept: `dedup.signals` (normalized
text key, signature), `dedup.bands` (the LSH index), `dedup.pairs` (candidate pairs with exact Jaccard).
A run signs only documents it has not signed, matches their bands against the whole band table (a new
crawl against all earlier ones), and scores only new pairs.  The decision, `dedup.documents` (cluster_id,
cluster_size, survivor_id, keep, drop_reason), is recomputed from the stored signals and pairs on every
run, so `--decide-only -o dedup.minhash.threshold=...` changes it without signing anything (down to
`store_min_jaccard`).  Then paragraphs and contamination on what is kept, into `silver.deduped`.
Every drop has a reason: per document in `dedup.documents`/`silver.deduped`'s absence, and per stage in the
job's metrics (`<lake>/_metrics/dedup.json`, key `stages`).  The metrics' `timings` give each part's seconds
and Spark jobs (the profile `bench/dedup_scale.py` prints at 10 K, 100 K, 1 M documents).
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/dedup/job.py` puts jobs/dedup/ first on sys.path; keep module names unambiguous
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (_here, os.path.dirname(_here))]

import logging  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402

from jobs.base import SparkJob, merge_table, session_conf, settings_sha256  # noqa: E402
from jobs.dedup import components, contamination, lsh, minhash, paragraphs  # noqa: E402

log = logging.getLogger("weblm.jobs.dedup")

SIGNATURE_SETTINGS = ("ngram", "num_perm", "bands", "rows", "seed")  # what the stored signals depend on
_SILVER_OUT = ("doc_id", "url", "host", "fetch_time", "title", "language", "warc_file", "warc_offset")


def signature_settings_sha(cfg) -> str:
    """The stored signals' settings hash: the configured settings plus the signature scheme (normalization,
    hashes, signer), so a new scheme is never mixed with signatures or band buckets made by an old one."""
    return settings_sha256({**{k: getattr(cfg.minhash, k) for k in SIGNATURE_SETTINGS}, "scheme": minhash.scheme()})


def _delta(spark, path: str):
    from delta.tables import DeltaTable

    return spark.read.format("delta").load(path) if DeltaTable.isDeltaTable(spark, path) else None


def insert_new(spark, df, path: str, keys: tuple[str, ...], empty: bool = False) -> None:
    """Append the rows of `df` whose keys the table lacks (a rerun after a crash inserts nothing twice);
    `empty`: the caller has just emptied the table (a full run), so a plain append, not a MERGE."""
    from delta.tables import DeltaTable

    if empty and DeltaTable.isDeltaTable(spark, path):
        df.write.format("delta").mode("append").save(path)
        return
    if not DeltaTable.isDeltaTable(spark, path):
        df.write.format("delta").mode("errorifexists").save(path)
        return
    condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    DeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), condition).whenNotMatchedInsertAll().execute()


def overwrite(df, path: str) -> None:
    df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)


class DedupJob(SparkJob):
    name = "dedup"
    description = "silver.documents -> silver.deduped (URL, exact, MinHash-LSH, paragraphs, contamination)"

    def add_arguments(self, parser):
        parser.add_argument("--decide-only", action="store_true",
                            help="recompute the decision from stored signals and pairs (a new threshold), sign nothing")

    def stage(self, name: str, rows_in: int, rows_out: int, dropped: dict) -> None:
        """One line of the per-stage report; every drop reason is also a job counter."""
        dropped = {k: int(v) for k, v in dropped.items() if v}
        for reason, n in dropped.items():
            self.metrics.skip(reason, n)
        self.metrics.extra.setdefault("stages", []).append(
            {"stage": name, "in": int(rows_in), "out": int(rows_out), "dropped": dropped})
        log.info("dedup stage %-13s %8d in -> %8d out; dropped %s", name, rows_in, rows_out, dropped or "none")

    @contextmanager
    def part(self, spark, name: str):
        """Time one part of the run and count the Spark jobs it launched (metrics `timings`: the profile)."""
        sc = spark.sparkContext
        group = f"weblm-dedup-{name}"
        sc.setJobGroup(group, f"dedup: {name}")
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            n_jobs = len(sc.statusTracker().getJobIdsForGroup(group))
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
            self.metrics.extra.setdefault("timings", {})[name] = {"seconds": round(seconds, 2), "spark_jobs": n_jobs}
            log.info("dedup part %-12s %7.1f s, %3d Spark jobs", name, seconds, n_jobs)

    def partitions_for(self, spark, n_docs: int) -> int:
        """Shuffle partitions for `n_docs` documents: one per `dedup.docs_per_shuffle_partition`, at least the
        cores, at most `dedup.shuffle_partitions`.  Sized up front because adaptive execution cannot coalesce
        what is cached (every persisted frame keeps its partitions, and each tiny task costs ~0.5 s)."""
        cfg = self.cfg.dedup
        wanted = -(-max(n_docs, 1) // max(cfg.docs_per_shuffle_partition, 1))
        return max(1, min(cfg.shuffle_partitions, max(spark.sparkContext.defaultParallelism, wanted)))

    def shuffle_partitions(self, spark, partitions: int):
        """`partitions` for this job's shuffles (adaptive execution coalesces the small ones further), the
        session's own setting restored afterwards (the pipeline shares it)."""
        return session_conf(spark, {"spark.sql.shuffle.partitions": str(partitions),
                                    "spark.sql.adaptive.enabled": "true",
                                    "spark.sql.adaptive.coalescePartitions.enabled": "true"})

    # -- the job -------------------------------------------------------------------------------------
    def run_job(self, spark, args):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.dedup
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(cfg.minhash.batch_rows))
        if cfg.components.checkpoint == "reliable" and not spark.sparkContext.getCheckpointDir():
            spark.sparkContext.setCheckpointDir(self.table("_checkpoints.dedup"))
        log.info("dedup: MinHash %d permutations, word %d-grams, threshold %.2f\n%s", cfg.minhash.num_perm,
                 cfg.minhash.ngram, cfg.minhash.threshold, minhash.s_curve(cfg.minhash.bands, cfg.minhash.rows))
        silver = spark.read.format("delta").load(self.table(cfg.input_table))
        quality = (F.col(cfg.quality_column).cast("double") if cfg.quality_column in silver.columns
                   else F.lit(None).cast("double"))
        docs = (silver.select("doc_id", "url", "fetch_time", "text", quality.alias("p_quality"),
                              F.col("fetch_time").alias("p_time")).persist(StorageLevel.MEMORY_AND_DISK))
        try:
            with self.part(spark, "read"):
                self.metrics.input_rows = docs.count()
            partitions = self.partitions_for(spark, self.metrics.input_rows)
            self.metrics.extra["shuffle_partitions"] = partitions
            with self.shuffle_partitions(spark, partitions):
                self.metrics.extra.update(table=cfg.tables.output, mode="full" if args.full else "incremental",
                                          signature_settings_sha256=signature_settings_sha(cfg),
                                          quality_column=cfg.quality_column if cfg.quality_column in silver.columns else None)
                if not args.decide_only:
                    self.update_signals(spark, docs, args.full)
                decision = self.decide(spark, docs)
                self.metrics.output_rows = self.finish(spark, silver, docs, decision)
        finally:
            docs.unpersist()

    # -- signals: sign new documents, extend the band table, score new candidate pairs -------------------------
    def update_signals(self, spark, docs, full: bool) -> None:
        from delta.tables import DeltaTable
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.dedup
        sha = signature_settings_sha(cfg)
        paths = {k: self.table(getattr(cfg.tables, k)) for k in ("signals", "bands", "pairs")}
        existing = None if full else _delta(spark, paths["signals"])
        if existing is not None and existing.where(F.col("settings_sha256") != sha).limit(1).count():
            raise RuntimeError(f"{cfg.tables.signals} holds signatures made under other MinHash settings "
                               f"({', '.join(SIGNATURE_SETTINGS)} changed): rerun with --full to re-sign everything")
        todo = docs if existing is None else docs.join(existing.select("doc_id"), "doc_id", "left_anti")
        signed = (todo.select("doc_id", "text").mapInArrow(lambda b: lsh.sign_batches(b, cfg.minhash), lsh.signal_schema())
                  .withColumn("settings_sha256", F.lit(sha)).persist(StorageLevel.MEMORY_AND_DISK))
        new_bands = pairs = scored = None
        cached: list = []
        try:
            with self.part(spark, "sign"):
                counted = signed.agg(F.count("*").alias("n"), F.count_if(F.col("text_key").isNull()).alias("no_words")).first()
                n_new = int(counted["n"])
                self.metrics.extra.update(signed=n_new, no_words=int(counted["no_words"] or 0))
                if full:
                    # emptied first (a metadata-only delete per table), so a run killed after this re-signs everything
                    for path in paths.values():
                        if DeltaTable.isDeltaTable(spark, path):
                            DeltaTable.forPath(spark, path).delete()
            if n_new == 0:
                log.info("dedup: no new documents to sign")
                return
            with self.part(spark, "bands"):
                # one band entry per distinct text: exact copies share every shingle, so they share every pair
                reps = signed.where(F.col("text_key").isNotNull())
                if cfg.exact.enabled:
                    reps = reps.groupBy("text_key").agg(F.min("doc_id").alias("doc_id"))
                    if existing is not None:
                        reps = reps.join(existing.select("text_key").distinct(), "text_key", "left_anti")
                new_bands = lsh.band_rows(signed.join(reps.select("doc_id"), "doc_id", "left_semi")).persist(
                    StorageLevel.MEMORY_AND_DISK)
                insert_new(spark, new_bands, paths["bands"], ("band", "doc_id"), empty=full)
            with self.part(spark, "candidates"):
                # a full run's band table is exactly the new bands: no semi-join of the table against itself
                all_bands = new_bands if full else spark.read.format("delta").load(paths["bands"])
                pairs, buckets = lsh.candidate_pairs(all_bands, new_bands, cfg.minhash.all_pairs_max_bucket,
                                                     priority=docs, touched_is_all=full, cached=cached)
                old_pairs = None if full else _delta(spark, paths["pairs"])
                if old_pairs is not None:
                    pairs = pairs.join(old_pairs.select("a", "b"), ["a", "b"], "left_anti")
                pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
                bucket_stats = buckets.agg(F.count("*").alias("touched"),
                                           F.count_if(F.col("n") > cfg.minhash.all_pairs_max_bucket).alias("giant"),
                                           F.max("n").alias("largest")).first()
            with self.part(spark, "verify"):
                all_signals = signed.drop("band_hashes") if existing is None else \
                    existing.select(*signed.drop("band_hashes").columns).unionByName(signed.drop("band_hashes"))
                scored = lsh.score_pairs(pairs, all_signals, docs, cfg.minhash).persist(StorageLevel.MEMORY_AND_DISK)
                pair_stats = scored.agg(F.count("*").alias("n"),
                                        F.count_if(F.col("jaccard") < cfg.minhash.threshold).alias("below")).first()
                self.metrics.extra.update(
                    candidate_pairs=int(pair_stats["n"]), candidates_below_threshold=int(pair_stats["below"] or 0),
                    buckets_touched=int(bucket_stats["touched"]), giant_buckets=int(bucket_stats["giant"] or 0),
                    largest_bucket=int(bucket_stats["largest"] or 0), band_rows_added=new_bands.count())
            with self.part(spark, "write_signals"):
                insert_new(spark, scored.where(F.col("jaccard") >= cfg.minhash.store_min_jaccard), paths["pairs"],
                           ("a", "b"), empty=full)
                insert_new(spark, signed.drop("band_hashes"), paths["signals"], ("doc_id",), empty=full)
        finally:
            for df in (scored, pairs, new_bands, signed, *cached):
                if df is not None:
                    df.unpersist()

    # -- the decision: URL, exact, near; recomputed from stored signals and pairs --------------------------------
    def decide(self, spark, docs):
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cfg = self.cfg.dedup
        signals = spark.read.format("delta").load(self.table(cfg.tables.signals))
        priority = [F.desc_nulls_last("p_quality"), F.desc_nulls_last("p_time"), F.asc("doc_id")]
        with self.part(spark, "exact"):
            s = (docs.select("doc_id", "url", "p_quality", "p_time")
                 .join(signals.select("doc_id", "text_key", "n_words", "n_shingles"), "doc_id", "left"))
            newest = F.first("doc_id").over(Window.partitionBy("url").orderBy(F.desc_nulls_last("p_time"), "doc_id"))
            s = s.withColumn("url_first", newest if cfg.exact.url else F.col("doc_id"))
            s = s.withColumn("url_dup", F.col("url").isNotNull() & (F.col("url_first") != F.col("doc_id")))
            winner = F.first("doc_id").over(Window.partitionBy("text_key").orderBy(*priority))
            s = s.withColumn("key_winner", F.when(~F.col("url_dup") & F.col("text_key").isNotNull(),
                                                  winner if cfg.exact.enabled else F.col("doc_id")))
            s = s.withColumn("exact_dup", F.col("key_winner").isNotNull() & (F.col("key_winner") != F.col("doc_id")))
            s = s.persist(StorageLevel.MEMORY_AND_DISK)
            counts = s.agg(F.count("*").alias("n"), F.count_if("url_dup").alias("url"),
                           F.count_if("exact_dup").alias("exact"),
                           F.count_if(F.col("text_key").isNull()).alias("no_words")).first()
            n_in, n_url, n_exact = int(counts["n"]), int(counts["url"] or 0), int(counts["exact"] or 0)
        self.stage("url", n_in, n_in - n_url, {"url_refetched": n_url})
        self.stage("exact", n_in - n_url, n_in - n_url - n_exact, {"exact_duplicate": n_exact})
        self.metrics.extra["not_deduplicated_no_words"] = int(counts["no_words"] or 0)

        nodes = s.where(F.col("key_winner") == F.col("doc_id")).select("doc_id", "p_quality", "p_time", "text_key")
        near = spark.createDataFrame([], "doc_id string, cluster_id string, survivor_id string")
        pairs = _delta(spark, self.table(cfg.tables.pairs))
        persisted = [s]
        if cfg.minhash.enabled and pairs is not None:
            with self.part(spark, "edges"):
                # a pair's documents stand for their text: map each end to its text's winner (exact copies share pairs)
                if cfg.exact.enabled:
                    to_node = (signals.select("doc_id", "text_key")
                               .join(nodes.select("text_key", F.col("doc_id").alias("node")), "text_key"))
                else:
                    to_node = nodes.select("doc_id", F.col("doc_id").alias("node"))
                edges = (pairs.where(F.col("jaccard") >= cfg.minhash.threshold)
                         .join(to_node.select(F.col("doc_id").alias("a"), F.col("node").alias("na")), "a")
                         .join(to_node.select(F.col("doc_id").alias("b"), F.col("node").alias("nb")), "b")
                         .select(F.col("na").alias("a"), F.col("nb").alias("b")).where("a != b").distinct()
                         .persist(StorageLevel.MEMORY_AND_DISK))
                persisted.append(edges)
                n_edges = edges.count()
            self.metrics.extra["duplicate_edges"] = n_edges
            with self.part(spark, "components"):
                if n_edges <= cfg.components.driver_max_edges:
                    near = self.components_on_driver(spark, edges, nodes)
                else:
                    near = self.components_on_executors(edges, nodes)
                near = near.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(near)
                near.count()
        with self.part(spark, "decision"):
            node_state = (nodes.select("doc_id").join(near, "doc_id", "left")
                          .select(F.col("doc_id").alias("key_winner"), F.col("cluster_id").alias("w_cluster"),
                                  F.col("survivor_id").alias("w_survivor")))
            d = s.join(node_state, "key_winner", "left")
            near_dup = ~F.col("url_dup") & ~F.col("exact_dup") & F.col("w_survivor").isNotNull()
            reason = (F.when(F.col("url_dup"), F.lit("url_refetched"))
                      .when(F.col("exact_dup"), F.lit("exact_duplicate"))
                      .when(near_dup, F.lit("near_duplicate")))
            survivor = (F.when(F.col("url_dup"), F.col("url_first"))
                        .when(F.col("exact_dup"), F.coalesce("w_survivor", "key_winner"))
                        .when(near_dup, F.col("w_survivor")))
            d = (d.withColumn("drop_reason", reason).withColumn("survivor_id", survivor)
                 .withColumn("cluster_id", F.when(F.col("url_dup"), F.col("doc_id")).otherwise(F.coalesce("w_cluster", "key_winner", "doc_id")))
                 .withColumn("cluster_size", F.count("*").over(Window.partitionBy("cluster_id")).cast("int"))
                 .withColumn("keep", F.col("drop_reason").isNull())
                 .select("doc_id", "url", "text_key", "n_words", "n_shingles", "cluster_id", "cluster_size",
                         "survivor_id", "keep", "drop_reason"))
            path = self.table(cfg.tables.documents)
            overwrite(d, path)
            decision = spark.read.format("delta").load(path)
            n_near = decision.where(F.col("drop_reason") == "near_duplicate").count()
        self.stage("near", n_in - n_url - n_exact, n_in - n_url - n_exact - n_near, {"near_duplicate": n_near})
        decision.where("NOT keep").createOrReplaceTempView("dedup_removals")
        for df in persisted:
            df.unpersist()
        return decision

    def components_on_driver(self, spark, edges, nodes):
        """Edges that fit in the driver's memory: components and survivors there, in one pass (the per-crawl case)."""
        import pandas as pd
        from pyspark.sql import functions as F

        pairs = [(r["a"], r["b"]) for r in edges.collect()]
        clusters = components.local_components(pairs)
        self.metrics.extra.update(components_on="driver", component_rounds=0)
        if not clusters:
            return spark.createDataFrame([], "doc_id string, cluster_id string, survivor_id string")
        ids = spark.createDataFrame(pd.DataFrame({"doc_id": list(clusters)}), "doc_id string")
        ranked = [r["doc_id"] for r in nodes.join(F.broadcast(ids), "doc_id", "left_semi")
                  .orderBy(F.desc_nulls_last("p_quality"), F.desc_nulls_last("p_time"), F.asc("doc_id"))
                  .select("doc_id").collect()]
        chosen = components.survivors_of_clusters(clusters, ranked, pairs)
        return spark.createDataFrame(pd.DataFrame({"doc_id": list(chosen), "cluster_id": [clusters[d] for d in chosen],
                                                   "survivor_id": list(chosen.values())}),
                                     "doc_id string, cluster_id string, survivor_id string")

    def components_on_executors(self, edges, nodes):
        """More edges than the driver should hold: large-star/small-star rounds, survivors per partition of clusters."""
        from pyspark.sql import functions as F

        cfg = self.cfg.dedup
        stats: dict = {}
        cc = components.connected_components(edges, cfg.components.max_iterations, cfg.components.checkpoint, stats)
        cc = cc.localCheckpoint(eager=True)  # read twice below: computed once
        members = nodes.join(cc, "doc_id").select("cluster_id", "doc_id", "p_quality", "p_time")
        # fresh column ids: both sides of the union derive from cc, and Spark refuses ambiguous self-joins
        cluster_edges = (edges.join(cc.select(F.col("doc_id").alias("a"), F.col("cluster_id").alias("cid")), "a")
                         .select(F.col("cid").alias("cluster_id"), "a", "b"))
        self.metrics.extra.update(components_on="executors", **stats)
        return components.survivor_rows(members, cluster_edges).join(cc, "doc_id")

    # -- on what is kept: paragraphs, contamination, then silver.deduped --------------------------------------
    def finish(self, spark, silver, docs, decision) -> int:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.dedup
        kept = (docs.join(decision.where("keep").select("doc_id", "cluster_id", "cluster_size"), "doc_id")
                .persist(StorageLevel.MEMORY_AND_DISK))
        n_kept = kept.count()
        current = kept.select("doc_id", "text", F.lit(0).alias("paragraphs_removed"), F.lit(None).cast("string").alias("drop_reason"))
        n_now = n_kept
        persisted = [kept]
        if cfg.paragraphs.enabled and n_kept:
            with self.part(spark, "paragraphs"):
                current = paragraphs.dedup_paragraphs(kept.select("doc_id", "text", "p_quality", "p_time"), cfg.paragraphs)
                current = current.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(current)
                counted = current.agg(F.count_if(F.col("drop_reason").isNotNull()).alias("short"),
                                      F.sum("paragraphs_removed").alias("removed")).first()
                short = int(counted["short"] or 0)
                self.metrics.extra["paragraphs_removed"] = int(counted["removed"] or 0)
            self.stage("paragraphs", n_kept, n_kept - short, {"too_short_after_paragraphs": short})
            n_now = n_kept - short
        current = current.where(F.col("drop_reason").isNull()).drop("drop_reason")
        current = current.withColumn("contamination_hits", F.lit(0))
        if cfg.contamination.enabled and cfg.contamination.eval_sets and n_now:
            with self.part(spark, "contamination"):
                ngrams = contamination.load_eval_ngrams(cfg.contamination.eval_sets, cfg.contamination.text_fields,
                                                        cfg.contamination.ngram)
                hits = (current.select("doc_id", "text")
                        .mapInArrow(lambda b: contamination.scan_batches(b, ngrams, cfg.contamination),
                                    "doc_id string, hits int, benchmarks array<string>, text string, drop_reason string")
                        .persist(StorageLevel.MEMORY_AND_DISK))
                persisted.append(hits)
                overwrite(hits.select("doc_id", "hits", "benchmarks", "drop_reason",
                                      F.lit(cfg.contamination.action).alias("action")), self.table(cfg.tables.contamination))
                per_benchmark = {r[0]: r[1] for r in hits.select(F.explode("benchmarks").alias("b")).groupBy("b").count().collect()}
                dropped = {r[0]: r[1] for r in hits.where(F.col("drop_reason").isNotNull()).groupBy("drop_reason").count().collect()}
                self.metrics.extra["contamination"] = {"documents_hit": hits.count(), "per_benchmark": per_benchmark,
                                                       "action": cfg.contamination.action}
                current = (current.join(hits.select("doc_id", F.col("hits").alias("h"), F.col("text").alias("cut"),
                                                    F.col("drop_reason").alias("why")), "doc_id", "left")
                           .where(F.col("why").isNull())
                           .select("doc_id", F.coalesce("cut", "text").alias("text"), "paragraphs_removed",
                                   F.coalesce("h", F.lit(0)).alias("contamination_hits")))
            self.stage("contamination", n_now, n_now - sum(dropped.values()), dropped)
        with self.part(spark, "output"):
            out = (silver.select(*_SILVER_OUT).join(current, "doc_id")
                   .join(kept.select("doc_id", "cluster_id", "cluster_size"), "doc_id")
                   .withColumn("n_chars", F.length("text").cast("int"))
                   .withColumn("content_sha256", F.sha2("text", 256)))
            result = merge_table(spark, out, self.table(cfg.tables.output), "doc_id", sync=True)
            self.metrics.extra.update(table_version=result["version"], rows_inserted=result["inserted"],
                                      rows_updated=result["updated"], rows_deleted=result["deleted"])
            n_out = spark.read.format("delta").load(self.table(cfg.tables.output)).count()
        for df in persisted:
            df.unpersist()
        return n_out


if __name__ == "__main__":
    sys.exit(DedupJob.main())
