"""Sources and mixes (SEAMS §4): which source a document comes from, and how many copies of it a mix puts
into the shards.

A source is the first `export.mix.rules` entry whose conditions all hold (URL pattern, language,
minimum quality score: URL patterns name domains, the quality classifier names the best of the web),
else `default_source`.  Tokenize tags every gold.tokens row with it; export reads the tag.
A mix is a set of target shares of output tokens per source (`export.mix.mixes`); an empty mix keeps
every source at its natural rate.  Export applies the mix once, by deterministic sampling: a document
of a source at rate r gets floor(r) copies, plus one more when u(seed, doc_id) < r - floor(r), where u
is a uniform hash in [0, 1).  So the same inputs and seed give the same shards, and a document's fate
does not depend on which other documents are in the table.
Not DataFrame.sampleBy: its fractions stop at 1 (no copies), and its rand(seed) draw depends on the row's partition.
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Mapping

from jobs.config import MixSettings, SourceRule

UNIT = float(2 ** 53)  # hash -> [0, 1): the low 53 bits, exactly representable as a double


def source_of(url: str | None, rules: Iterable[SourceRule], default: str, language: str | None = None,
              quality: float | None = None) -> str:
    """The source tag of one document (the same answer as `source_column` gives in Spark)."""
    for rule in rules:
        if rule.url_pattern and not (url and re.search(rule.url_pattern, url)):
            continue
        if rule.languages and language not in rule.languages:
            continue
        if rule.min_quality is not None and (quality is None or quality < rule.min_quality):
            continue
        return rule.source
    return default


def source_column(url_col, rules: Iterable[SourceRule], default: str, language_col=None, quality_col=None):
    """Spark column: the source tag of each row, first rule whose conditions all hold wins (Java regex, `rlike`).

    A rule on language or quality needs `language_col`/`quality_col`; without them it is a clear error.
    """
    from pyspark.sql import functions as F

    tag = F.lit(default)
    for rule in reversed(list(rules)):
        conditions = []
        if rule.url_pattern:
            conditions.append(F.coalesce(url_col.rlike(rule.url_pattern), F.lit(False)))
        for needed, column, what in ((rule.languages, language_col, "a language"),
                                     (rule.min_quality is not None, quality_col, "a quality_score")):
            if needed and column is None:
                raise ValueError(f"source rule {rule.source!r} needs {what} column, which this table lacks; "
                                 "tag documents after the quality stage (tokenize.input_table)")
        if rule.languages:
            conditions.append(F.coalesce(language_col.isin(list(rule.languages)), F.lit(False)))
        if rule.min_quality is not None:
            conditions.append(F.coalesce(quality_col >= F.lit(float(rule.min_quality)), F.lit(False)))
        holds = conditions[0]
        for condition in conditions[1:]:
            holds = holds & condition
        tag = F.when(holds, F.lit(rule.source)).otherwise(tag)
    return tag


def source_tag(df, cfg: MixSettings):
    """Spark column: the source of each row of `df` under `cfg`, from whichever of url, language and
    quality_score the table has."""
    from pyspark.sql import functions as F

    has = set(df.columns)
    return source_column(F.col("url"), cfg.rules, cfg.default_source,
                         F.col("language") if "language" in has else None,
                         F.col("quality_score") if "quality_score" in has else None)


def unit_hash(seed: int, *cols):
    """Spark column: a uniform double in [0, 1) from xxhash64(seed, cols...), stable across runs and clusters."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(F.lit(int(seed)), *cols), F.lit(2 ** 53)).cast("double") / F.lit(UNIT)


def sampling_rates(source_tokens: Mapping[str, int], weights: Mapping[str, float], total_tokens: int = 0) -> dict:
    """Copies per document for each source so that the output holds `weights` shares of `total_tokens`.

    `source_tokens` are the input's tokens per source (EOD included).  No weights: every rate is 1.
    A source missing from the weights gets 0 (dropped); a weight for a source the input lacks
    cannot be met and is reported by `realized_mix`.
    """
    if not weights:
        return {source: 1.0 for source in source_tokens}
    bad = {s: w for s, w in weights.items() if not (isinstance(w, (int, float)) and w >= 0)}
    if bad:
        raise ValueError(f"mix weights must be numbers >= 0, got {bad}")
    present = {s: float(w) for s, w in weights.items() if source_tokens.get(s, 0) > 0}
    norm = sum(present.values())
    if norm <= 0:
        raise ValueError(f"the mix {dict(weights)} gives no weight to any source the input has "
                         f"({sorted(source_tokens)}); check export.mix.rules and export.mix.mixes")
    target = total_tokens or sum(source_tokens.values())
    return {source: (present.get(source, 0.0) / norm) * target / tokens if tokens else 0.0
            for source, tokens in source_tokens.items()}


def copies_column(rate_col, u_col):
    """Spark column: floor(rate) copies, plus one when u < frac(rate)."""
    from pyspark.sql import functions as F

    whole = F.floor(rate_col)
    return (whole + F.when(u_col < rate_col - whole, 1).otherwise(0)).cast("int")


def expected_copies(rate: float, u: float) -> int:
    """`copies_column` for one document, in Python (tests, reports)."""
    whole = math.floor(rate)
    return int(whole + (1 if u < rate - whole else 0))


def realized_mix(out_tokens: Mapping[str, int], weights: Mapping[str, float], in_tokens: Mapping[str, int]) -> dict:
    """Per source: input tokens, output tokens, realized share and target share (None without weights)."""
    total_out = sum(out_tokens.values()) or 1
    total_in = sum(in_tokens.values()) or 1
    norm = sum(float(w) for w in weights.values()) if weights else 0.0
    report = {}
    for source in sorted(set(in_tokens) | set(out_tokens) | set(weights or {})):
        if weights:
            target = float(weights.get(source, 0.0)) / norm if norm else None
        else:
            target = in_tokens.get(source, 0) / total_in
        report[source] = {"input_tokens": int(in_tokens.get(source, 0)), "tokens": int(out_tokens.get(source, 0)),
                          "share": round(out_tokens.get(source, 0) / total_out, 6),
                          "target_share": None if target is None else round(target, 6)}
    return report


def mix_weights(cfg: MixSettings, name: str | None = None) -> dict:
    """The weights of mix `name` (default: the configured one); a clear error for a name that is not there."""
    name = cfg.name if name is None else name
    if name not in cfg.mixes:
        raise ValueError(f"mix {name!r} is not in export.mix.mixes, which has {sorted(cfg.mixes)}"
                         + (f" (and export.mix.schedules has {sorted(cfg.schedules)})" if cfg.schedules else ""))
    return dict(cfg.mixes[name] or {})


def mix_stages(cfg: MixSettings) -> list[dict]:
    """The stages of the configured mix, in training order: [{stage, mix, weights, share}].

    `export.mix.name` names either a mix (one stage, "main", share 1) or a schedule of `export.mix.schedules`:
    e.g. a broad mix then a high-quality annealing mix, each a share of the exported tokens.
    """
    overlap = set(cfg.mixes) & set(cfg.schedules)
    if overlap:
        raise ValueError(f"{sorted(overlap)} name both a mix and a schedule in export.mix; rename one")
    if cfg.name not in cfg.schedules:
        return [{"stage": "main", "mix": cfg.name, "weights": mix_weights(cfg), "share": 1.0}]
    stages = cfg.schedules[cfg.name]
    if not isinstance(stages, list) or not stages:
        raise ValueError(f"export.mix.schedules.{cfg.name} must be a list of {{stage, mix, share}}, got {stages!r}")
    out = []
    for i, entry in enumerate(stages):
        if not isinstance(entry, dict) or set(entry) - {"stage", "mix", "share"} or "mix" not in entry:
            raise ValueError(f"export.mix.schedules.{cfg.name}[{i}] must be {{stage, mix, share}}, got {entry!r}")
        share = entry.get("share", 1.0 / len(stages))
        if not isinstance(share, (int, float)) or share <= 0:
            raise ValueError(f"export.mix.schedules.{cfg.name}[{i}].share must be a number > 0, got {share!r}")
        out.append({"stage": str(entry.get("stage", entry["mix"])), "mix": entry["mix"],
                    "weights": mix_weights(cfg, entry["mix"]), "share": float(share)})
    names = [s["stage"] for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"export.mix.schedules.{cfg.name} repeats a stage name: {names}")
    total = sum(s["share"] for s in out)
    for stage in out:
        stage["share"] = stage["share"] / total
    return out
