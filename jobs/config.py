"""Typed view of `conf/jobs.yaml`: every setting of the Spark jobs, with its default."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from conf import load


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    app_name_prefix: str = "weblm"
    shuffle_partitions: int = 4
    conf: dict = field(default_factory=dict)
    stop_session: bool = True


@dataclass(frozen=True)
class IngestSettings:
    patterns: list[str] = field(default_factory=lambda: ["*.warc.gz", "*.warc"])
    files_per_task: int = 1
    record_types: list[str] = field(default_factory=lambda: ["response"])
    max_payload_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True)
class ExtractSettings:
    statuses: list[int] = field(default_factory=lambda: [200])
    content_types: list[str] = field(default_factory=lambda: ["text/html", "application/xhtml+xml"])
    max_html_bytes: int = 2 * 1024 * 1024
    fallback_encoding: str = "utf-8"
    charset_aliases: dict = field(default_factory=dict)
    meta_sniff_bytes: int = 4096
    min_chars: int = 200
    language: str | None = "und"
    favor_precision: bool = True
    favor_recall: bool = False
    include_comments: bool = False
    include_tables: bool = True
    deduplicate: bool = False
    sandbox: bool = True
    timeout_s: float = 30.0
    start_timeout_s: float = 120.0


@dataclass(frozen=True)
class TokenizeSettings:
    vocab_size: int = 4096
    sample_per_mille: int = 1000
    max_sample_chars: int = 50_000_000
    character_coverage: float = 0.9995
    byte_fallback: bool = True
    normalization_rule_name: str = "identity"
    remove_extra_whitespaces: bool = False
    split_digits: bool = True
    max_sentence_length: int = 65536
    pad_id: int = 0
    unk_id: int = 1
    eos_id: int = 2
    bos_id: int = -1
    num_threads: int = 2
    hash_prefix_len: int = 16


@dataclass(frozen=True)
class ExportSettings:
    target_tokens_per_shard: int = 50_000_000
    max_shards: int = 0
    staging_dir: str = "_staging"


@dataclass(frozen=True)
class JobsConfig:
    spark: SparkSettings = field(default_factory=SparkSettings)
    metrics_dir: str = "_metrics"
    skip_examples: int = 20
    ingest: IngestSettings = field(default_factory=IngestSettings)
    extract: ExtractSettings = field(default_factory=ExtractSettings)
    tokenize: TokenizeSettings = field(default_factory=TokenizeSettings)
    export: ExportSettings = field(default_factory=ExportSettings)


def load_jobs_config(overrides: Iterable[str] = ()) -> JobsConfig:
    return load("jobs", JobsConfig, overrides)
