"""The scorer interface: model-based signals (perplexity, classifiers, ...) that the quality job runs.

A scorer turns a batch of texts (and their languages, known from language ID, which runs first) into
one or more signal columns of `silver.signals`.  The quality job (`jobs/quality/job.py`) runs every
scorer whose `quality.scorers.<name>.enabled` is true in conf/jobs.yaml, over Arrow batches on the
executors; `load` is called once per Python worker, so a model is read once, never broadcast per task.

To add one: write a class with the four members below in its own module, add `name -> "module:Class"`
to `SCORERS`, and a `quality.scorers.<name>` section (with at least `enabled`) to conf/jobs.yaml.
A scorer with a model file also defines `identity(settings, paths) -> str`, a digest of the model it would
load: the job stores a hash of each scorer's settings and identity beside its columns, so that enabling,
re-configuring or retraining one scorer rescores that scorer's columns alone.
"""
from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Scorer(Protocol):
    name: str                                  # config section under quality.scorers.<name>

    def columns(self) -> dict[str, str]: ...   # output column -> Spark SQL type string ("double", "int", "string")

    def load(self, settings: dict, paths) -> None: ...   # once per Python worker; `paths` is conf.paths' loaded paths

    def score(self, texts: list[str], languages: list[str]) -> dict[str, list]: ...   # one value per text per column

    # optional: def identity(self, settings: dict, paths) -> str   # a digest of the model `load` would read


# name -> "module:Class", imported lazily (on the workers, only when enabled)
SCORERS: dict[str, str] = {
    "perplexity": "jobs.quality.perplexity:PerplexityScorer",                    # CCNet KenLM; python -m jobs.quality.train_kenlm
    "toxicity": "jobs.quality.classifiers:ToxicityScorer",                        # word lists (24 languages) + English classifier
    "quality_classifier": "jobs.quality.classifiers:QualityClassifierScorer",     # fastText; python -m jobs.quality.train_classifier
}


class ScorerError(RuntimeError):
    """A scorer that cannot run: unknown, misbehaving, or its model is missing (the message says which job trains it)."""


def scorer_class(name: str) -> type:
    """The class registered under `name` in SCORERS, imported now."""
    if name not in SCORERS:
        raise ScorerError(f"quality.scorers.{name} is enabled in conf/jobs.yaml but no scorer is registered under "
                          f"{name!r} in jobs/quality/scorers.py SCORERS (known: {sorted(SCORERS)})")
    module, _, cls = SCORERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def enabled_scorers(settings: dict[str, dict]) -> list[str]:
    """Names of the scorers conf enables (`quality.scorers.<name>.enabled`), in a stable order."""
    return sorted(name for name, section in (settings or {}).items() if (section or {}).get("enabled"))


def make_scorer(name: str) -> Scorer:
    scorer = scorer_class(name)()
    if getattr(scorer, "name", name) != name:
        raise ScorerError(f"scorer {SCORERS[name]} calls itself {scorer.name!r}, registered as {name!r}")
    return scorer


def scorer_columns(names: list[str]) -> dict[str, str]:
    """Every enabled scorer's output columns (column -> Spark SQL type), checked for clashes."""
    out: dict[str, str] = {}
    for name in names:
        for column, sql_type in make_scorer(name).columns().items():
            if column in out:
                raise ScorerError(f"scorer {name!r} writes column {column!r}, which another enabled scorer also writes")
            out[column] = sql_type
    return out


def scorer_identity(name: str, settings: dict, paths: Any) -> str:
    """What the scorer says identifies the model it would load (`identity`), or "" for one without a model."""
    scorer = make_scorer(name)
    identity = getattr(scorer, "identity", None)
    return str(identity(dict(settings), paths)) if identity else ""


class LoadedScorers:
    """The enabled scorers of one Python worker, each loaded once (on first use)."""

    def __init__(self, settings: dict[str, dict], paths: Any) -> None:
        self.settings = settings or {}
        self.paths = paths
        self.scorers: list[Scorer] | None = None

    def _load(self) -> list[Scorer]:
        if self.scorers is None:
            loaded = []
            for name in enabled_scorers(self.settings):
                scorer = make_scorer(name)
                scorer.load(dict(self.settings[name]), self.paths)
                loaded.append(scorer)
            self.scorers = loaded
        return self.scorers

    def names(self) -> list[str]:
        return [scorer.name for scorer in self._load()]

    def score_with(self, name: str, texts: list[str], languages: list[str]) -> dict[str, list]:
        """One scorer over one batch: its column -> one value per text (checked)."""
        scorer = next(s for s in self._load() if s.name == name)
        values = scorer.score(texts, languages)
        out: dict[str, list] = {}
        for column in scorer.columns():
            got = values.get(column)
            if got is None or len(got) != len(texts):
                raise ScorerError(f"scorer {scorer.name!r} returned {0 if got is None else len(got)} values "
                                  f"for column {column!r} over {len(texts)} texts")
            out[column] = list(got)
        return out

    def score(self, texts: list[str], languages: list[str]) -> dict[str, list]:
        """All enabled scorers over one batch: column -> one value per text."""
        out: dict[str, list] = {}
        for name in self.names():
            out.update(self.score_with(name, texts, languages))
        return out


def require_model(scorer: str, path: str, trained_by: str) -> str:
    """`path` if the model file is there; otherwise the error every scorer gives for a missing model."""
    import storage

    if not storage.exists(path):
        raise ScorerError(f"scorer {scorer!r}: its model {path} is missing; train it with `{trained_by}` "
                          f"or set quality.scorers.{scorer}.enabled=false")
    return path
