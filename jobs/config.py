"""Typed view of `conf/jobs.yaml`: every setting of the Spark jobs, with its default."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import load


@dataclass(frozen=True)
class SparkSettings:
    master: str
    app_name_prefix: str
    shuffle_partitions: int
    conf: dict
    stop_session: bool


@dataclass(frozen=True)
class IngestSettings:
    patterns: list[str]
    files_per_task: int
    record_types: list[str]
    max_payload_bytes: int
    batch_rows: int
    batch_bytes: int


@dataclass(frozen=True)
class ExtractSettings:
    statuses: list[int]
    content_types: list[str]
    max_html_bytes: int
    fallback_encoding: str
    charset_aliases: dict
    meta_sniff_bytes: int
    min_chars: int
    language: str | None
    favor_precision: bool
    favor_recall: bool
    include_comments: bool
    include_tables: bool
    deduplicate: bool
    sandbox: bool
    timeout_s: float
    start_timeout_s: float


@dataclass(frozen=True)
class TokenizeSettings:
    vocab_size: int
    sample_per_mille: int
    max_sample_chars: int
    character_coverage: float
    byte_fallback: bool
    normalization_rule_name: str
    remove_extra_whitespaces: bool
    split_digits: bool
    max_sentence_length: int
    pad_id: int
    unk_id: int
    eos_id: int
    bos_id: int
    num_threads: int
    hash_prefix_len: int


@dataclass(frozen=True)
class ExportSettings:
    target_tokens_per_shard: int
    max_shards: int
    staging_dir: str


@dataclass(frozen=True)
class JobsConfig:
    spark: SparkSettings
    metrics_dir: str
    skip_examples: int
    ingest: IngestSettings
    extract: ExtractSettings
    tokenize: TokenizeSettings
    export: ExportSettings


def load_jobs_config(overrides: Iterable[str] = ()) -> JobsConfig:
    return load("jobs", JobsConfig, overrides)
