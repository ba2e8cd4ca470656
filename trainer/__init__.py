"""weblm's trainer: megatron-core GPTModel trained on the indexed shards of SEAMS §4.

Reads only `<shards_dir>/manifest.json` and the shards it names; writes MLflow runs,
checkpoints, `result.json` and `lineage/batches.jsonl` (SEAMS §5).  Entry point:
`python -m trainer.train`.
"""
