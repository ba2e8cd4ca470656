"""Per-document text work, pure functions without Spark: decode HTML bytes, extract main text."""
