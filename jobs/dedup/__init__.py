"""Deduplication of `silver.documents`: exact, URL, MinHash-LSH near-duplicates, paragraphs, contamination.

One concept per module: `normalize` (text -> words), `minhash` (words -> shingles -> signatures -> band
hashes, vectorized per Arrow batch), `lsh` (band table -> candidate pairs -> exact Jaccard),
`components` (connected components and the survivor rule), `paragraphs` (CCNet-style paragraph dedup),
`contamination` (n-gram overlap with evaluation sets), `job` (the Spark job that runs them in order).
"""
