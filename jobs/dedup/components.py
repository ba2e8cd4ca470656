"""Connected components of the duplicate graph, and which document of a cluster survives.

`connected_components` is the large-star / small-star loop (Kiveris et al., "Connected Components in
MapReduce and Beyond", SoCC 2014; text-dedup's Spark script), all DataFrame joins, so it scales past
the driver's memory; each round's edges are checkpointed to cut the lineage.  It ends when every
node points straight at its component's smallest id (a star forest).

`choose_survivors` is the survivor rule.  Jaccard is not transitive (A~B and B~C at 0.85 while A, C are
at 0.7), so a cluster is not dropped down to one document.  Members are visited in priority order
(quality, then newest fetch, then doc_id); a member is kept unless it has a duplicate edge to a member
already kept, and then that kept member is its survivor.  So every dropped document has Jaccard >= the
threshold with a kept one, and no duplicate edge joins two kept documents.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

log = logging.getLogger("weblm.jobs.dedup")


def choose_survivors(members: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, str | None]:
    """`members` in priority order (best first) -> {doc_id: survivor doc_id, or None when kept}."""
    neighbours: dict[str, set[str]] = {m: set() for m in members}
    for a, b in edges:
        if a in neighbours and b in neighbours and a != b:
            neighbours[a].add(b)
            neighbours[b].add(a)
    rank = {m: i for i, m in enumerate(members)}
    kept: set[str] = set()
    survivor: dict[str, str | None] = {}
    for m in members:
        kept_neighbours = [n for n in neighbours[m] if n in kept]
        if kept_neighbours:
            survivor[m] = min(kept_neighbours, key=rank.__getitem__)
        else:
            kept.add(m)
            survivor[m] = None
    return survivor


def _cut_lineage(df, mode: str):
    return df.checkpoint(eager=True) if mode == "reliable" else df.localCheckpoint(eager=True)


def connected_components(edges, max_iterations: int, checkpoint: str = "local", stats: dict | None = None):
    """Undirected edges (a, b) -> (doc_id, cluster_id) for every node in an edge; cluster_id is the
    smallest doc_id of its component.  Nodes without edges are not listed (they are their own cluster)."""
    from pyspark.sql import functions as F

    e = (edges.select(F.least("a", "b").alias("dst"), F.greatest("a", "b").alias("src"))
         .where("src != dst").distinct())
    e = _cut_lineage(e, checkpoint)
    for iteration in range(1, max_iterations + 1):
        # large-star: every neighbour larger than u is linked to the smallest of u's neighbourhood
        both = e.unionByName(e.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
        smallest = both.groupBy("src").agg(F.min("dst").alias("m")).withColumn("m", F.least("m", "src"))
        e = (both.join(smallest, "src").where(F.col("dst") > F.col("src"))
             .select(F.col("dst").alias("src"), F.col("m").alias("dst")).distinct())
        # small-star: u and its smaller neighbours are linked to the smallest of them
        smallest = e.groupBy("src").agg(F.min("dst").alias("m"))
        e = (e.join(smallest, "src").select(F.col("dst").alias("src"), F.col("m").alias("dst"))
             .where("src != dst")
             .unionByName(smallest.select("src", F.col("m").alias("dst"))).distinct())
        e = _cut_lineage(e, checkpoint)
        chained = e.join(e.select(F.col("src").alias("dst")).distinct(), "dst", "left_semi").limit(1).count()
        split = e.groupBy("src").count().where("count > 1").limit(1).count()
        log.info("connected components: round %d, %d edges", iteration, e.count())
        if not chained and not split:
            if stats is not None:
                stats["component_rounds"] = iteration
            roots = e.select(F.col("dst").alias("doc_id"), F.col("dst").alias("cluster_id")).distinct()
            return e.select(F.col("src").alias("doc_id"), F.col("dst").alias("cluster_id")).unionByName(roots)
    raise RuntimeError(f"connected components did not converge in {max_iterations} rounds; raise "
                       f"dedup.components.max_iterations (each round at least halves the longest chain)")


def survivor_rows(members, edges):
    """Per cluster: members (cluster_id, doc_id, p_quality, p_time) and edges (cluster_id, a, b) ->
    (doc_id, survivor_id), by `choose_survivors` in one pandas call per cluster."""
    import pandas as pd

    def per_cluster(m: pd.DataFrame, e: pd.DataFrame) -> pd.DataFrame:
        m = m.sort_values(["p_quality", "p_time", "doc_id"], ascending=[False, False, True], na_position="last")
        chosen = choose_survivors(list(m["doc_id"]), zip(e["a"], e["b"]))
        return pd.DataFrame({"doc_id": list(chosen), "survivor_id": list(chosen.values())})

    return (members.groupBy("cluster_id").cogroup(edges.groupBy("cluster_id"))
            .applyInPandas(per_cluster, "doc_id string, survivor_id string"))
