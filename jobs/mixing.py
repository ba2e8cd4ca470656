"""Sources and mixes (SEAMS §4): which source a document comes from, and how many copies of it a mix puts
into the shards.

A source is the first `export.mix.rules` entry whose URL pattern matches, else `default_source`.
A mix is a set of target shares of output tokens per source (`export.mix.mixes`); an empty mix keeps
every source at its natural rate.  Export applies the mix once, by deterministic sampling: a document
of a source at rate r gets floor(r) copies, plus one more when u(seed, doc_id) < r - floor(r), where u
is a uniform hash in [0, 1).  So the same inputs and seed give the same shards, and a document's fate
does not depend on which other documents are in the table.
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Mapping

from jobs.config import MixSettings, SourceRule

UNIT = float(2 ** 53)  # hash -> [0, 1): the low 53 bits, exactly representable as a double


def source_of(url: str | None, rules: Iterable[SourceRule], default: str) -> str:
    """The source tag of one URL (the same answer as `source_column` gives in Spark)."""
    for rule in rules:
        if url and re.search(rule.url_pattern, url):
            return rule.source
    return default


def source_column(url_col, rules: Iterable[SourceRule], default: str):
    """Spark column: the source tag of `url_col`, first matching rule wins (Java regex, `rlike`)."""
    from pyspark.sql import functions as F

    tag = F.lit(default)
    for rule in reversed(list(rules)):
        tag = F.when(url_col.rlike(rule.url_pattern), F.lit(rule.source)).otherwise(tag)
    return tag


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


def mix_weights(cfg: MixSettings) -> dict:
    """The weights of the configured mix; a clear error for a name that is not there."""
    if cfg.name not in cfg.mixes:
        raise ValueError(f"export.mix.name is {cfg.name!r}, but export.mix.mixes has only {sorted(cfg.mixes)}")
    return dict(cfg.mixes[cfg.name] or {})
