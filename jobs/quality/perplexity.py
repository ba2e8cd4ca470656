"""Perplexity under a per-language 5-gram KenLM, CCNet's recipe (cc_net `perplexity.py`, `text_normalizer.py`).

Per document, as cc_net's mine.py runs it: the text is normalized (lowercase, accents removed, digits -> 0, Unicode
punctuation unified, non-printing characters removed: the newlines too, so the lines run together), cut into
SentencePiece pieces, and scored by KenLM as one sentence with its boundaries: perplexity = 10 ** (-log10 p /
(pieces + 1)).  cc_net's DocLM would split on newlines, but its MultiSentencePiece step has already deleted them;
`per_line=True` scores line by line instead and pools the log-probs (what DocLM does on text that keeps them).
The document's bucket is `head` below the language's 30th-percentile cut-off, `middle` below the 60th, else `tail`
(cc_net `PerplexityBucket`).  The model of a language is a folder written by `python -m jobs.quality.train_kenlm`:
`sp.model`, `lm.binary` and `model.json` (cut-offs, corpus, settings).  Pure functions here; the Spark side is the quality job's scorer plumbing.
"""
from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import storage
from conf.paths import is_uri, join
from jobs.quality.scorers import ScorerError

log = logging.getLogger("weblm.jobs.quality.perplexity")

TRAIN_COMMAND = "python -m jobs.quality.train_kenlm"
SP_FILE, LM_FILE, META_FILE = "sp.model", "lm.binary", "model.json"
NO_MODEL = "no_model"        # the bucket of a document whose language has no model (CCNet says "all")
EMPTY = "empty"              # the bucket of a document with no scorable text

# CCNet's normalization, re-implemented: cc_net is not on PyPI and the steps are a few lines of unicodedata.
# The punctuation table is cc_net's UNICODE_PUNCT (full-width and typographic marks -> ASCII).
_PUNCT = str.maketrans({
    "，": ",", "。": ".", "、": ",", "„": '"', "”": '"', "“": '"', "«": '"', "»": '"', "１": '"', "」": '"',
    "「": '"', "《": '"', "》": '"', "´": "'", "∶": ":", "：": ":", "？": "?", "！": "!", "（": "(", "）": ")",
    "；": ";", "–": "-", "—": " - ", "．": ". ", "～": "~", "’": "'", "…": "...", "━": "-", "〈": "<", "〉": ">",
    "【": "[", "】": "]", "％": "%", "►": "-",
})
_NON_PRINTING = re.compile("[" + "".join(map(chr, [*range(0, 32), *range(127, 160)])) + "]")
_DIGIT = re.compile(r"\d")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")   # ASCII has no combining marks: only these runs need the NFD pass


def _strip_accents(run: re.Match) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", run.group()) if unicodedata.category(c) != "Mn")


def normalize(line: str) -> str:
    """CCNet's `normalize(line)`: strip, lowercase, accents removed, every digit -> 0, punctuation unified,
    control characters removed."""
    line = line.strip()
    if not line:
        return line
    line = line.lower()
    line = _NON_ASCII.sub(_strip_accents, line)   # a whole document is one line: ASCII runs skip the slow pass
    line = _DIGIT.sub("0", line)
    line = line.translate(_PUNCT)
    return _NON_PRINTING.sub("", line)


def perplexity(log10_prob: float, n_tokens: int) -> float:
    """CCNet's `pp`: 10 ** (-sum of log10 probabilities / tokens, counting one end-of-sentence per line)."""
    return 10.0 ** (-log10_prob / n_tokens)


def bucket(value: float | None, cutoffs: tuple[float, float] | None) -> str:
    """`head` below the first cut-off, `middle` below the second, else `tail`."""
    if cutoffs is None:
        return NO_MODEL
    if value is None:
        return EMPTY
    head, tail = cutoffs
    return "head" if value < head else "middle" if value < tail else "tail"


@dataclass
class LanguageModel:
    """One language's SentencePiece + KenLM pair and its bucket cut-offs."""
    language: str
    sp: object
    lm: object
    cutoffs: tuple[float, float] | None
    meta: dict

    def pieces(self, line: str) -> str:
        """A normalized line as space-separated SentencePiece pieces: what KenLM was trained on."""
        return " ".join(self.sp.encode(normalize(line), out_type=str))

    def score(self, text: str, per_line: bool = False) -> float | None:
        """The document's perplexity; None when it has no text to score.

        `per_line=False` is what cc_net's mine.py runs (and what its published perplexities are): the whole
        document normalized at once, which deletes its newlines (control characters), scored as one sentence."""
        lines = [n for n in map(normalize, text.split("\n") if per_line else [text]) if n]
        total, n_tokens = 0.0, 0
        for pieces in self.sp.encode(lines, out_type=str):     # one call for the document's lines
            if pieces:
                total += self.lm.score(" ".join(pieces), bos=True, eos=True)
                n_tokens += len(pieces) + 1                      # pieces + the end of sentence
        return round(perplexity(total, n_tokens), 1) if n_tokens else None


def load_language_model(folder: str | os.PathLike, language: str) -> LanguageModel:
    """Load `<folder>/{sp.model, lm.binary, model.json}` (local folder)."""
    import kenlm
    import sentencepiece as spm

    folder = Path(folder)
    for name in (SP_FILE, LM_FILE, META_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"the {language} perplexity model in {folder} lacks {name}: "
                                    f"train it with `{TRAIN_COMMAND} --language {language}`")
    meta = json.loads((folder / META_FILE).read_text())
    cut = meta.get("cutoffs") or {}
    cutoffs = (float(cut["head"]), float(cut["tail"])) if "head" in cut and "tail" in cut else None
    sp = spm.SentencePieceProcessor(model_file=str(folder / SP_FILE))
    return LanguageModel(language, sp, kenlm.Model(str(folder / LM_FILE)), cutoffs, meta)


def models_root(settings: dict, paths) -> str:
    """Where the per-language model folders live: `model_dir`, or `<lake>/models/kenlm` (paths.table naming)."""
    return settings.get("model_dir") or paths.table("models.kenlm")


def _local_copy(folder: str, paths) -> str:
    """A local folder with the model files: the folder itself, or a cached copy of a URI."""
    if not is_uri(folder):
        return folder
    digest = storage.sha256(join(folder, META_FILE))[:16]
    local = os.path.join(paths.cache_dir, "kenlm", digest)
    if not os.path.isfile(os.path.join(local, LM_FILE)):
        storage.copy_tree(folder, local)
    return local


def available_languages(root: str) -> list[str]:
    """Languages with a trained model folder under `root`."""
    if not storage.isdir(root):
        return []
    return sorted(os.path.basename(d.rstrip("/")) for d in storage.listdir(root)
                  if storage.exists(join(root, os.path.basename(d.rstrip("/")), META_FILE)))


class PerplexityScorer:
    """The `perplexity` scorer (jobs/quality/scorers.py): `perplexity` and `perplexity_bucket` columns.

    Settings (`quality.scorers.perplexity`): `model_dir` ("" = <lake>/models/kenlm), `languages` ([] = every
    trained one; a listed language without a model is an error), `per_line` (false: the document as one
    sentence, as cc_net's mine.py; true: line by line).  Documents in a language without a model get a null perplexity and the bucket `no_model`.
    """
    name = "perplexity"

    def __init__(self) -> None:
        self.models: dict[str, LanguageModel] = {}
        self.per_line = False

    def columns(self) -> dict[str, str]:
        return {"perplexity": "double", "perplexity_bucket": "string"}

    def identity(self, settings: dict, paths) -> str:
        """Each language's model.json digest: a retrained model (a new `training_id`) is a new identity."""
        root = models_root(settings, paths)
        languages = list(settings.get("languages") or []) or available_languages(root)
        return ",".join(f"{language}:{storage.sha256(join(root, language, META_FILE))}" for language in languages
                        if storage.exists(join(root, language, META_FILE)))

    def load(self, settings: dict, paths) -> None:
        root = models_root(settings, paths)
        wanted = list(settings.get("languages") or []) or available_languages(root)
        if not wanted:
            raise ScorerError(f"scorer 'perplexity': no KenLM model under {root}; train one with "
                                    f"`{TRAIN_COMMAND} --language en` or set quality.scorers.perplexity.enabled=false")
        self.per_line = bool(settings.get("per_line", False))
        for language in wanted:
            folder = join(root, language)
            if not storage.exists(join(folder, META_FILE)):
                raise ScorerError(f"scorer 'perplexity': no {language} model at {folder}; train it with "
                                        f"`{TRAIN_COMMAND} --language {language}` or drop {language} from "
                                        "quality.scorers.perplexity.languages")
            self.models[language] = load_language_model(_local_copy(folder, paths), language)
        log.info("perplexity models loaded: %s", ", ".join(sorted(self.models)))

    def score(self, texts: list[str], languages: list[str]) -> dict[str, list]:
        values, buckets = [], []
        for text, language in zip(texts, languages):
            model = self.models.get(language)
            value = model.score(text or "", self.per_line) if model else None
            values.append(value)
            buckets.append(bucket(value, model.cutoffs) if model else NO_MODEL)
        return {"perplexity": values, "perplexity_bucket": buckets}
