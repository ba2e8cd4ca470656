"""weblm's trainer: megatron-core GPTModel trained on the indexed shards of SEAMS §4.

Reads only `<shards_dir>/manifest.json` and the shards it names (staged into `paths.cache_dir` when
they are on object storage: `input_cache.py`); writes MLflow runs, checkpoints, `result.json` and
`lineage/batches.jsonl` (SEAMS §5), through a local staging folder when train_dir is a URI
(`run_folder.py`).  Entry point: `python -m trainer.train`.
"""
