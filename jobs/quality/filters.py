"""Decide later: the filters as a view over stored signals, thresholds from conf (`quality.filters`).

`filtered(documents, signals, cfg)` is every document with its signals, its `quality_score` and its
`drop_reason`: the first rule (in conf order) it fails among the rule groups its language routes to, after
the `all` and bad-input checks and the language checks; null means kept.  Rules read signal columns, or the flags
extract writes into silver.documents (`DOCUMENT_FLAGS`: a publisher's opt-out, a body the crawler cut).  It is plain
Spark SQL over columns: a new threshold changes this view and nothing upstream of it.
"""
from __future__ import annotations

from jobs.config import FilterRule, LanguageRoute, QualitySettings
from jobs.quality.signals import state_columns

LANGUAGE_REASONS = ("language_not_allowed", "language_uncertain")


def route(value) -> LanguageRoute:
    """A routing entry, whether conf gave a dataclass or (under per_language) a plain mapping."""
    return value if isinstance(value, LanguageRoute) else LanguageRoute(
        min_language_score=float(value["min_language_score"]), groups=list(value["groups"]))


C4_LINES_GROUP = "c4"   # the group whose languages get C4's line removal, beside its filter rules
ALL_GROUP = "all"       # rules of this group apply to every document, whatever its language routes to
FIRST_GROUPS = (ALL_GROUP, "bad_input")   # checked before the language rules, in conf order
# silver.documents columns that rules may read beside the signals: flags extract sets from what the crawl archived
DOCUMENT_FLAGS = {"opt_out": "string", "warc_truncated": "string"}


def _routes(cfg: QualitySettings) -> dict[str, LanguageRoute]:
    """Every routing entry by language, the default's under "default"."""
    return {"default": route(cfg.routing.default),
            **{lang: route(r) for lang, r in (cfg.routing.per_language or {}).items()}}


def routing_gaps(cfg: QualitySettings) -> dict[str, list[str]]:
    """Where `quality.filters` and `quality.routing` do not meet: rules whose group no language routes to (they apply
    to no document) and routed groups that no rule has (for a misspelt name, that group's rules are off for the
    language).  Either can be meant (a group switched off everywhere, rules replaced by an overlay), so the job warns
    and counts rather than refusing."""
    routed = {group for r in _routes(cfg).values() for group in r.groups}
    ruled = {rule.group for rule in cfg.filters} | {C4_LINES_GROUP}
    return {"rules_routed_to_no_language": [rule.reason for rule in cfg.filters
                                            if rule.group not in routed and rule.group != ALL_GROUP],
            "routed_groups_without_rules": sorted(routed - ruled)}


def check_settings(cfg: QualitySettings, columns: list[str]) -> None:
    """Fail early, with the fix, on a rule that names no signal column or has no bound."""
    known = set(columns) | set(DOCUMENT_FLAGS)
    for rule in cfg.filters:
        if rule.column not in known:
            raise ValueError(f"quality.filters rule {rule.reason!r} reads column {rule.column!r}, which neither "
                             f"silver.signals (is its scorer enabled?) nor silver.documents' flags have; known "
                             f"columns: {sorted(known)}")
        if rule.min is None and rule.max is None and not rule.when_set:
            raise ValueError(f"quality.filters rule {rule.reason!r} has neither min nor max nor when_set")
    if cfg.mode not in ("drop", "flag"):
        raise ValueError(f"quality.mode must be drop or flag, not {cfg.mode!r}")


def _fails(rule: FilterRule):
    from pyspark.sql import functions as F

    bad = F.lit(False)
    if rule.when_set:   # a flag: any value but null or ""
        bad = bad | (F.col(rule.column).isNotNull() & (F.col(rule.column).cast("string") != F.lit("")))
    if rule.min is None and rule.max is None:
        return F.coalesce(bad, F.lit(False))
    value = F.col(rule.column).cast("double")
    if rule.min is not None:
        bad = bad | (value < F.lit(float(rule.min)))
    if rule.max is not None:
        bad = bad | (value > F.lit(float(rule.max)))
    return F.coalesce(bad, F.lit(False))   # a missing value fails no rule


def applies(group: str, cfg: QualitySettings):
    """True where the document's language routes to `group` (every document for the `all` group)."""
    from pyspark.sql import functions as F

    if group == ALL_GROUP:
        return F.lit(True)
    routes = {lang: route(r) for lang, r in (cfg.routing.per_language or {}).items()}
    listed = [lang for lang, r in routes.items() if group in r.groups]
    condition = F.col("language").isin(*listed) if listed else F.lit(False)
    if group in route(cfg.routing.default).groups:
        condition = condition | ~F.col("language").isin(*routes) if routes else F.lit(True)
    return condition


def min_language_score(cfg: QualitySettings):
    from pyspark.sql import functions as F

    expr = F.lit(float(route(cfg.routing.default).min_language_score))
    for lang, r in sorted((cfg.routing.per_language or {}).items()):
        expr = F.when(F.col("language") == lang, F.lit(float(route(r).min_language_score))).otherwise(expr)
    return expr


def drop_reason(cfg: QualitySettings):
    """The first failing reason: the `all` and bad-input rules, then language, then every other rule, each in conf
    order."""
    from pyspark.sql import functions as F

    bad_input = [r for r in cfg.filters if r.group in FIRST_GROUPS]
    others = [r for r in cfg.filters if r.group not in FIRST_GROUPS]
    checks = [(applies(r.group, cfg) & _fails(r), r.reason) for r in bad_input]
    if cfg.routing.languages:
        checks.append((~F.col("language").isin(*cfg.routing.languages), "language_not_allowed"))
    checks.append((F.col("language_score") < min_language_score(cfg), "language_uncertain"))
    checks += [(applies(r.group, cfg) & _fails(r), r.reason) for r in others]
    reason = F.lit(None).cast("string")
    for condition, name in reversed(checks):
        reason = F.when(condition, F.lit(name)).otherwise(reason)
    return reason


def flag_columns(documents) -> list:
    """The `DOCUMENT_FLAGS` columns of `documents`, null where it lacks one (a table extracted before the flags
    existed: no rule fails on null)."""
    from pyspark.sql import functions as F

    return [F.col(c) if c in documents.columns else F.lit(None).cast(t).alias(c) for c, t in DOCUMENT_FLAGS.items()]


def filtered(documents, signals, cfg: QualitySettings):
    """Documents joined with their current signals, plus `quality_score` and `drop_reason` (null = kept)."""
    from pyspark.sql import functions as F

    check_settings(cfg, signals.columns)
    documents = documents.select(*[c for c in documents.columns if c not in DOCUMENT_FLAGS], *flag_columns(documents))
    # on the text's hash too: a document whose text changed since it was scored has no current signals yet
    joined = documents.join(signals.drop(*state_columns(signals.columns)), ["doc_id", "content_sha256"])
    return (joined.withColumn("quality_score", F.expr(cfg.quality_score).cast("double"))
            .withColumn("drop_reason", drop_reason(cfg)))
