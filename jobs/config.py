"""Typed view of `conf/jobs.yaml`: every setting of the Spark jobs, with its default."""
from __future__ import annotations

from dataclasses import dataclass, field
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
    warc_lists: list[str]
    warc_list_base: str
    stat_threads: int
    fetch_remote: bool
    copy_dir: str
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
    extractor: str
    fallback_min_words: int
    fallback_min_gain: float
    fallback_below_share: float
    comments_page_types: list[str]
    page_type_hints: bool
    repeated_line_min_words: int
    keep_repeats_page_types: list[str]
    max_nesting_depth: int
    max_control_chars: float
    opt_out_agents: list[str]
    favor_precision: bool
    favor_recall: bool
    include_comments: bool
    include_tables: bool
    deduplicate: bool
    sandbox: bool
    timeout_s: float
    start_timeout_s: float
    tasks_per_core: int


@dataclass(frozen=True)
class QualityTables:
    signals: str
    output: str


@dataclass(frozen=True)
class QualitySignalSettings:
    c4_max_word_length: int
    c4_min_words_per_line: int
    c4_filter_no_terminal_punct: bool
    fineweb_short_line_length: int


@dataclass(frozen=True)
class C4LineRemovalSettings:
    enabled: bool
    remove_citations: bool
    filter_no_terminal_punct: bool
    min_words_per_line: int
    max_word_length: int
    filter_javascript: bool
    filter_policy: bool


@dataclass(frozen=True)
class LanguageRoute:
    min_language_score: float
    groups: list[str]


@dataclass(frozen=True)
class QualityRouting:
    languages: list[str]
    default: LanguageRoute
    per_language: dict[str, LanguageRoute]


@dataclass(frozen=True)
class FilterRule:
    reason: str
    group: str
    column: str
    min: float | None = None
    max: float | None = None
    when_set: bool = False   # fails where the column holds a value (a string flag such as opt_out), not on a bound


@dataclass(frozen=True)
class QualitySettings:
    input_table: str
    tables: QualityTables
    view: str
    batch_rows: int
    mode: str
    signals: QualitySignalSettings
    c4_line_removal: C4LineRemovalSettings
    quality_score: str
    routing: QualityRouting
    filters: list[FilterRule]
    scorers: dict


@dataclass(frozen=True)
class TokenizeSettings:
    input_table: str
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
    special_tokens: list[str]
    heldout_per_mille: int
    fertility_docs: int
    batch_rows: int


@dataclass(frozen=True)
class SourceRule:
    """A document is of `source` when every condition the rule gives holds (URL regex, language, quality)."""
    source: str
    url_pattern: str = ""                # Java regex searched in the URL ("" = any URL)
    languages: list[str] = field(default_factory=list)   # the quality stage's language codes ([] = any)
    min_quality: float | None = None     # quality_score at least this (the classifier/heuristic score)

    def __post_init__(self):
        if not (self.url_pattern or self.languages or self.min_quality is not None):
            raise ValueError(f"source rule {self.source!r} gives no condition: set url_pattern, languages "
                             "or min_quality (export.mix.default_source names the source of the rest)")


@dataclass(frozen=True)
class MixSettings:
    name: str
    seed: int
    total_tokens: int
    default_source: str
    rules: list[SourceRule]
    mixes: dict
    schedules: dict = field(default_factory=dict)   # name -> [{stage, mix, share}]: stages trained in order


@dataclass(frozen=True)
class ExportSettings:
    target_tokens_per_shard: int
    max_shards: int
    staging_dir: str
    shuffle_seed: int
    order_buckets: int
    lineage_table: str
    mix: MixSettings


@dataclass(frozen=True)
class DedupTables:
    signals: str
    bands: str
    pairs: str
    documents: str
    contamination: str
    output: str


@dataclass(frozen=True)
class ExactDedupSettings:
    enabled: bool
    url: bool


@dataclass(frozen=True)
class MinHashSettings:
    enabled: bool
    ngram: int
    num_perm: int
    bands: int
    rows: int
    seed: int
    threshold: float
    verify: bool
    all_pairs_max_bucket: int
    store_min_jaccard: float
    batch_rows: int


@dataclass(frozen=True)
class ComponentSettings:
    max_iterations: int
    checkpoint: str
    driver_max_edges: int


@dataclass(frozen=True)
class ParagraphSettings:
    enabled: bool
    max_docs: int
    mode: str
    within_doc: bool
    min_doc_chars: int


@dataclass(frozen=True)
class ContaminationSettings:
    enabled: bool
    ngram: int
    eval_sets: list[str]
    text_fields: list[str]
    action: str
    cut_chars: int
    min_fragment_chars: int
    max_splits: int


@dataclass(frozen=True)
class DedupSettings:
    input_table: str
    tables: DedupTables
    quality_column: str
    exact: ExactDedupSettings
    minhash: MinHashSettings
    components: ComponentSettings
    paragraphs: ParagraphSettings
    contamination: ContaminationSettings
    shuffle_partitions: int
    docs_per_shuffle_partition: int


@dataclass(frozen=True)
class ReportSettings:
    out: str
    top_hosts: int
    top_languages: int
    histogram_bins: int
    histogram_max_rows: int
    target_kept_share: list[float]


@dataclass(frozen=True)
class MaintainSettings:
    retention_hours: float
    compact_min_files: int
    small_file_mib: float
    list_parallelism: int
    tables: list[str]
    vacuum: str = "full"   # full | lite (VACUUM LITE: the files to delete from the table's log, no listing)

    def __post_init__(self):
        if self.vacuum not in ("full", "lite"):
            raise ValueError(f"maintain.vacuum is {self.vacuum!r}: full or lite")


@dataclass(frozen=True)
class JobsConfig:
    spark: SparkSettings
    metrics_dir: str
    skip_examples: int
    ingest: IngestSettings
    extract: ExtractSettings
    quality: QualitySettings
    tokenize: TokenizeSettings
    export: ExportSettings
    dedup: DedupSettings
    report: ReportSettings
    maintain: MaintainSettings


def load_jobs_config(overrides: Iterable[str] = ()) -> JobsConfig:
    return load("jobs", JobsConfig, overrides)
