"""How the per-stage report reads the lake in a handful of Spark queries instead of a hundred.

The report asks some forty questions (documents and bytes per stage, per drop reason, per host...), most of them
about how one table's documents fare in another.  Asked one by one, each is a join and a Spark action: planning, a
Delta snapshot and scheduling for a few rows of answer, most of the report's time on a small lake.  Instead:

- `Fates`: one row per document with what every table says about it (present or not, its characters, text
  bytes, drop reason...), built by one union and one `groupBy(doc_id)` over all the tables, and cached;
- `Tally`: each question registers its rows (a condition on the fates, or any frame), labelled with the question
  and its group key; one `groupBy(question, key)` over them all answers every question.

    tally = Tally(fates)
    pages = tally.ask(fates.present("bronze.pages"), html_bytes=fates.col("bronze.pages", "html_bytes"))
    tally.run()
    tally.one(pages) -> {"documents": 9, "html_bytes": 81234}
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MEASURES = ("documents", "chars", "text_bytes", "html_bytes", "tokens")
STRING_FIELDS = ("host", "status", "language", "reason", "outcome", "truncated")   # every other field is a count (long)
NO_KEY = ""


class Fates:
    """One row per doc_id: for each table added, `<tag>` (1 when the table holds the document, else null) and
    `<tag>__<field>` (the field's value in that table; a table with several rows for a document gives the
    largest)."""

    def __init__(self) -> None:
        self._tables: dict[str, tuple] = {}
        self.df = None

    @staticmethod
    def tag(name: str) -> str:
        return re.sub(r"\W", "_", name)

    def add(self, name: str, df, **fields) -> None:
        """The table `name` (a frame with doc_id) and the fields to keep of it, each a Column over `df`."""
        tag = self.tag(name)
        if tag in self._tables:   # one table in two roles (tokenize reads what dedup wrote): its fields merge
            fields = {**self._tables[tag][1], **fields}
        self._tables[tag] = (df, fields)

    def has(self, name: str) -> bool:
        return self.tag(name) in self._tables

    def present(self, name: str):
        from pyspark.sql import functions as F

        return F.col(self.tag(name)).isNotNull()

    def col(self, name: str, field: str) -> str:
        return f"{self.tag(name)}__{field}"

    def build(self):
        """The fates of every document, cached: one union of the tables' slim projections, one shuffle."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        if not self._tables:
            return None
        names = list(dict.fromkeys(f for _, fields in self._tables.values() for f in fields))

        def typed(column, field):
            return column.cast("string" if field in STRING_FIELDS else "long").alias(field)

        branches = [df.select("doc_id", F.lit(tag).alias("_table"),
                              *[typed(fields[f] if f in fields else F.lit(None), f) for f in names])
                    for tag, (df, fields) in self._tables.items()]
        pivot = []
        for tag, (_, fields) in self._tables.items():
            mine = F.col("_table") == tag
            pivot.append(F.max(F.when(mine, F.lit(1))).alias(tag))
            pivot += [F.max(F.when(mine, F.col(f))).alias(self.col(tag, f)) for f in fields]
        self.df = functools.reduce(DataFrame.unionByName, branches).groupBy("doc_id").agg(*pivot).cache()
        self.df.count()   # built now, once: the tally's questions then only read it
        return self.df

    def release(self) -> None:
        if self.df is not None:
            self.df.unpersist()


@dataclass(frozen=True)
class Question:
    id: int
    measures: tuple[str, ...]   # which of MEASURES its answer holds


class Tally:
    """Questions answered together: the number of rows (or the sum of a weight) and the sums of some columns,
    overall or per value of a key.  A question about the fates is a condition on their rows; all of those become
    one projection (each row yields the labelled rows of the questions it matches, exploded), so the query has
    one branch for them, not one per question; a question about another frame is a branch of its own."""

    def __init__(self, fates: Fates | None = None) -> None:
        self.fates = fates
        self._on_fates: list = []       # per question about the fates: a struct, null where its condition fails
        self._frames: list = []         # per question about another frame: its labelled rows
        self._questions: list[Question] = []
        self._answers: dict[tuple[int, str], dict] | None = None

    def ask(self, where=None, *, key=None, weight=None, **sums) -> Question:
        """Of the fates' rows where `where` holds (a Column; None: every row).  `key` groups (a column name or a
        Column); `sums` maps measures (chars, text_bytes, html_bytes, tokens) to columns."""
        from pyspark.sql import functions as F

        question, row = self._labelled(key, weight, sums)
        labelled = F.struct(*row)
        self._on_fates.append(labelled if where is None else F.when(where, labelled))
        return question

    def measure(self, df, *, key=None, weight=None, **sums) -> Question:
        """Of the rows of any frame."""
        question, row = self._labelled(key, weight, sums)
        self._frames.append(df.select(*row))
        return question

    def _labelled(self, key, weight, sums) -> tuple[Question, list]:
        from pyspark.sql import functions as F

        def column(c):
            return F.col(c) if isinstance(c, str) else c

        unknown = set(sums) - set(MEASURES)
        assert not unknown, f"not a measure: {unknown}"
        question = Question(len(self._questions), ("documents", *[m for m in MEASURES if m in sums]))
        self._questions.append(question)
        return question, [
            F.lit(question.id).alias("question"),
            (column(key).cast("string") if key is not None else F.lit(NO_KEY)).alias("key"),
            (column(weight) if weight is not None else F.lit(1)).cast("long").alias("documents"),
            *[(column(sums[m]) if m in sums else F.lit(None)).cast("long").alias(m) for m in MEASURES[1:]]]

    def run(self) -> None:
        """Answer every question with one Spark query."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        self._answers = {}
        branches = list(self._frames)
        if self._on_fates:
            matched = F.filter(F.array(*self._on_fates), lambda row: row.isNotNull())
            branches.append(self.fates.df.select(F.explode(matched).alias("row")).select("row.*"))
        if not branches:
            return
        rows = (functools.reduce(DataFrame.unionByName, branches)
                .groupBy("question", "key").agg(*[F.sum(m).alias(m) for m in MEASURES]).collect())
        for row in rows:
            self._answers[(row["question"], "None" if row["key"] is None else row["key"])] = row.asDict()

    def _answer(self, question: Question, row: dict | None) -> dict:
        out = {m: int((row or {}).get(m) or 0) for m in question.measures}
        if "tokens" in out:
            out["tokens_estimated"] = False
        return out

    def one(self, question: Question) -> dict:
        """The answer of a `measure`: zeros when no row matched."""
        assert self._answers is not None, "Tally.run() first"
        return self._answer(question, self._answers.get((question.id, NO_KEY)))

    def many(self, question: Question) -> dict[str, dict]:
        """The answers of a `measure_by`, largest group (documents) first, then by key."""
        assert self._answers is not None, "Tally.run() first"
        found = [(key, self._answer(question, row)) for (qid, key), row in self._answers.items() if qid == question.id]
        return dict(sorted(found, key=lambda kv: (-kv[1]["documents"], kv[0])))

    def counts(self, question: Question) -> dict[str, int]:
        """The answers of a `measure_by` as key -> documents (or the sum of its weight)."""
        return {key: m["documents"] for key, m in self.many(question).items()}
