"""Connected components of the duplicate graph, and which document of a cluster survives.

`connected_components` is the large-star / small-star loop (Kiveris et al., "Connected Components in
MapReduce and Beyond", SoCC 2014; text-dedup's Spark script), all DataFrame joins, so it scales past
the driver's memory; each round's edges are checkpointed to cut the lineage.  It ends when every
node points straight at its component's smallest id (a star forest).  When the duplicate edges fit in the
driver's memory (`dedup.components.driver_max_edges`, the per-crawl case), `local_components` does the
same in one scipy call instead, and `survivors_of_clusters` picks the survivors there too.
Not GraphFrames' connectedComponents: it is not among the job's jars (jobs/jars/pom.xml), a package more for one loop.

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
    smallest doc_id of its component.  Nodes without edges are not listed (they are their own cluster).
    Two Spark jobs a round: the checkpoint that cuts the lineage, and one aggregate that tests convergence."""
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
        # a star forest: no edge's dst is another edge's src (no chain) and every src has one dst (no split)
        per_src = e.groupBy("src").agg(F.count("*").alias("n"))
        dsts = e.select(F.col("dst").alias("src")).distinct()
        check = (per_src.join(dsts.withColumn("is_dst", F.lit(1)), "src", "left")
                 .agg(F.sum("n").alias("edges"), F.max("n").alias("max_out"), F.max("is_dst").alias("chained")).first())
        log.info("connected components: round %d, %d edges", iteration, check["edges"] or 0)
        if not check["chained"] and (check["max_out"] or 0) <= 1:
            if stats is not None:
                stats["component_rounds"] = iteration
            roots = e.select(F.col("dst").alias("doc_id"), F.col("dst").alias("cluster_id")).distinct()
            return e.select(F.col("src").alias("doc_id"), F.col("dst").alias("cluster_id")).unionByName(roots)
    raise RuntimeError(f"connected components did not converge in {max_iterations} rounds; raise "
                       f"dedup.components.max_iterations (each round at least halves the longest chain)")


def local_components(edges: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Undirected edges that fit in the driver's memory -> {doc_id: cluster_id, the smallest doc_id of its
    component}, by scipy's connected components over the sparse adjacency matrix: one call, no Spark rounds."""
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    if not edges:
        return {}
    ids, index = np.unique(np.array(edges, dtype=object).ravel(), return_inverse=True)  # sorted ids
    index = index.reshape(-1, 2)
    graph = coo_matrix((np.ones(len(index), np.int8), (index[:, 0], index[:, 1])), shape=(len(ids), len(ids)))
    _, labels = scipy_components(graph, directed=False)
    first = np.full(labels.max() + 1, len(ids))
    np.minimum.at(first, labels, np.arange(len(ids)))  # ids are sorted: a component's smallest index is its smallest id
    return dict(zip(ids.tolist(), ids[first[labels]].tolist()))


def survivors_of_clusters(clusters: dict[str, str], ranked: Sequence[str], edges) -> dict[str, str | None]:
    """`choose_survivors` for every cluster at once: clusters {doc_id: cluster_id}, `ranked` every member in
    priority order (best first), edges (a, b) -> {doc_id: survivor, or None when kept}."""
    members: dict[str, list[str]] = {}
    for doc_id in ranked:
        members.setdefault(clusters[doc_id], []).append(doc_id)
    by_cluster: dict[str, list[tuple[str, str]]] = {}
    for a, b in edges:
        by_cluster.setdefault(clusters[a], []).append((a, b))
    out: dict[str, str | None] = {}
    for cid, docs in members.items():
        out.update(choose_survivors(docs, by_cluster.get(cid, ())))
    return out


def survivor_partitions(batches):
    """`mapInArrow` body over rows (cluster_id, doc_id, rank, a, b) partitioned by cluster_id, so a cluster's
    rows are all in one partition: member rows carry doc_id and rank (priority order), edge rows a and b.
    -> (doc_id, survivor_id) by `choose_survivors`: one Python call per partition, not one pandas frame per cluster."""
    import pyarrow as pa

    batches = list(batches)
    if not batches:  # an empty partition
        return
    table = pa.Table.from_batches(batches)
    rows = table.to_pydict()
    members: dict[str, list[tuple[int, str]]] = {}
    edges: dict[str, list[tuple[str, str]]] = {}
    for cid, doc_id, rank, a, b in zip(rows["cluster_id"], rows["doc_id"], rows["rank"], rows["a"], rows["b"]):
        if doc_id is not None:
            members.setdefault(cid, []).append((rank, doc_id))
        else:
            edges.setdefault(cid, []).append((a, b))
    doc_ids, survivors = [], []
    for cid, ranked in members.items():
        chosen = choose_survivors([d for _, d in sorted(ranked)], edges.get(cid, ()))
        doc_ids += list(chosen)
        survivors += list(chosen.values())
    yield pa.RecordBatch.from_arrays([pa.array(doc_ids, pa.string()), pa.array(survivors, pa.string())],
                                     names=["doc_id", "survivor_id"])


def survivor_rows(members, edges):
    """Per cluster: members (cluster_id, doc_id, p_quality, p_time) and edges (cluster_id, a, b) ->
    (doc_id, survivor_id), by `choose_survivors`, one Python call per partition of whole clusters."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("cluster_id").orderBy(F.desc_nulls_last("p_quality"), F.desc_nulls_last("p_time"),
                                                     F.asc("doc_id"))
    none = F.lit(None).cast("string")
    rows = (members.select("cluster_id", "doc_id", F.row_number().over(order).alias("rank"),
                           none.alias("a"), none.alias("b"))
            .unionByName(edges.select("cluster_id", none.alias("doc_id"), F.lit(None).cast("int").alias("rank"), "a", "b")))
    return rows.repartition("cluster_id").mapInArrow(survivor_partitions, "doc_id string, survivor_id string")
