"""What became of a URL, stage by stage: the lineage read forwards (read-only).

    python -m jobs.fate URL [URL ...] [--urls FILE] [--json] [--lake DIR]
    spark-submit jobs/fate.py ...

For each URL, however it is spelled (matched by its canonical form: `same_url`), the crawl's records of it not
being fetched (bronze.unfetched: robots.txt, TDMRep, a network failure), and each capture of it in bronze.pages with
its way through the stages, by the rules the per-stage report counts (`jobs.report.stage_ways`, for these documents):
extract's outcome, quality's first failing reason (or its flags), dedup's decision (with the document kept in its
place) or what paragraphs and contamination left, tokens, and the shards and sequence indexes that export wrote it
into (gold.shard_lineage).  Every stage whose input table (as conf names it) holds the document is listed, so the
way after a drop ends unless a later stage reads around it.  `python -m trainer.provenance CHECKPOINT` goes on from
there: the documents a checkpoint was trained on.  `--json` prints one JSON object per URL instead of text.  Exits 1
when a URL has no record in the lake at all.  Where the crawl wrote a URL otherwise than it was asked for (case,
an escape, the query's order, a fragment, a default port), each record and capture says how (`url`).
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/fate.py` puts jobs/ first on sys.path; keep module names unambiguous
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import json  # noqa: E402
from datetime import datetime  # noqa: E402

import storage  # noqa: E402
from conf import ConfigError  # noqa: E402
from jobs.base import SparkJob, local_frame  # noqa: E402
from jobs.report import DROPPED, KEPT, NOT_RUN, Lake, Way, document_fates, stage_ways  # noqa: E402
from jobs.report_tally import Fates  # noqa: E402
from jobs.warc.records import host_of  # noqa: E402


def way_columns(ways: dict[str, Way]) -> list:
    """The columns `stages_of` reads from a document's row of `Fates`: each stage's outcome, reason and measures."""
    columns = []
    for way in ways.values():
        if not way.why:
            columns += [way.outcome.alias(f"{way.stage}:outcome"), way.reason.alias(f"{way.stage}:reason"),
                        *(c.alias(f"{way.stage}:{name}") for name, c in way.measures.items())]
    return columns


def stages_of(row: dict, fates: Fates, ways: dict[str, Way]) -> list[dict]:
    """A document's way through the stages after ingest, from its row of `fates` with `way_columns`, by the rules the
    per-stage report counts (`jobs.report.stage_ways`): an entry `{"stage", "outcome": kept | dropped | flagged |
    not run, "reason"?, "chars"? | "tokens"?}` for each stage whose input table (as conf names it) holds the document.
    The way ends where a stage's input table is absent (that stage, and what reads it, has not run)."""
    way: list[dict] = []
    for stage in ways.values():
        if not fates.has(stage.source):
            break                       # its input was never written: nothing from here on has run
        if row.get(fates.tag(stage.source)) is None:
            continue                    # dropped before it, or not what this stage reads
        if stage.why:
            way.append({"stage": stage.stage, "outcome": NOT_RUN})
            continue
        outcome, reason = row[f"{stage.stage}:outcome"], row[f"{stage.stage}:reason"]
        measures = {} if outcome == DROPPED else {name: row[f"{stage.stage}:{name}"] for name in stage.measures}
        way.append({"stage": stage.stage, "outcome": outcome, **({"reason": reason} if reason is not None else {}),
                    **{k: v for k, v in measures.items() if v is not None}})
    return way


def same_url(url: str) -> str:
    """The one spelling of a URL that its other spellings share: w3lib's canonical form (scheme and host in lower
    case, percent-escapes normalised, the query sorted, no fragment), without credentials or a default port."""
    from urllib.parse import urlsplit, urlunsplit

    from w3lib.url import canonicalize_url

    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host       # an IPv6 address keeps its brackets
        # w3lib keeps ports and credentials, and its strip_url lives in Scrapy's utils, which jobs do not install
        if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme.lower()):
            host = f"{host}:{parts.port}"
        return canonicalize_url(urlunsplit(parts._replace(netloc=host)))
    except ValueError:      # not a URL w3lib can parse: only its exact spelling matches
        return url


def host_spellings(host: str | None) -> set:
    """A canonical host as a crawl may have written it: as it is (an IDN in punycode, as browsers and Scrapy send
    it) and with its punycode labels in Unicode (as an IRI in another crawler's WARC may hold it)."""
    try:
        return {host, host.encode("ascii").decode("idna").lower()} if host else {host}
    except UnicodeError:    # a label that is not valid punycode: only as it is
        return {host}


DRIVER_URLS = 100_000   # the asked hosts' distinct URLs canonicalised in this process; past it, by a pandas UDF


def _spelled(df, asked: dict[str, str], driver_urls: int = DRIVER_URLS):
    """The rows of `df` (a table with `url` and `host`) whose URL is one of those asked for (`asked`: URL -> its
    `same_url`), however spelled, with the URL asked for as `asked`.  Only rows of the asked URLs' hosts are looked at
    (semi-joined, not a literal list: --urls may name many).  Their distinct URLs are canonicalised here when they
    are at most `driver_urls` (no Python worker to start), else by a pandas UDF on the executors."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    spark = df.sparkSession
    keys = local_frame(spark, sorted((key, url) for url, key in asked.items()), "key string, asked string")
    names = set().union(*({host_of(url)} | host_spellings(host_of(key)) for url, key in asked.items()))
    hosts = local_frame(spark, sorted({(h,) for h in names}, key=str), "host string")
    near = df.join(F.broadcast(hosts), df["host"].eqNullSafe(hosts["host"]), "left_semi")
    urls = [r["url"] for r in near.select("url").distinct().limit(driver_urls + 1).collect()]
    if len(urls) <= driver_urls:
        wanted = set(asked.values())
        pairs = sorted((url, key) for url in urls if url is not None and (key := same_url(url)) in wanted)
        spelled = local_frame(spark, pairs, "url string, key string")
        return near.join(F.broadcast(spelled), "url").join(F.broadcast(keys), "key")

    @pandas_udf("string")
    def canonical(urls):
        return urls.map(lambda url: same_url(url) if isinstance(url, str) else None)

    return near.withColumn("key", canonical("url")).join(F.broadcast(keys), "key")


def url_fates(spark, cfg, paths, urls: list[str]) -> list[dict]:
    """One dict per URL asked for: `url`, `not_fetched` (the crawl's records), `documents` (each capture and its way);
    a record or capture of the URL spelled otherwise by the crawl carries its `url` too.  A URL of which the lake has
    no record gets `host_captures`: how many pages of its host bronze.pages holds (0: the crawl never reached it)."""
    lake = Lake(spark, cfg, paths)
    stories = _url_fates(spark, lake, cfg, paths, urls)
    unknown = [s for s in stories if not s["documents"] and not s["not_fetched"]]
    hosts = {s["url"]: host_spellings(host_of(same_url(s["url"]))) - {None} for s in unknown}
    bronze, counts = lake.table("bronze.pages"), {}
    if bronze is not None and set().union(*hosts.values()):
        from pyspark.sql import functions as F

        wanted = local_frame(spark, sorted({(h,) for names in hosts.values() for h in names}), "host string")
        counts = dict(bronze.join(F.broadcast(wanted), "host", "left_semi").groupBy("host").count().collect())
    for story in unknown:
        story["host_captures"] = sum(counts.get(h, 0) for h in hosts[story["url"]])
    return stories


def _url_fates(spark, lake: Lake, cfg, paths, urls: list[str]) -> list[dict]:
    asked = {u: same_url(u) for u in dict.fromkeys(urls)}
    found: dict[str, dict] = {u: {"url": u, "not_fetched": [], "documents": []} for u in asked}

    def spelling(row) -> dict:
        return {"url": row["url"]} if row["url"] != row["asked"] else {}

    unfetched = lake.table("bronze.unfetched")
    if unfetched is not None:
        for r in (_spelled(unfetched, asked).orderBy("time", "doc_id")
                  .select("asked", "url", "time", "reason", "detail", "warc_file", "warc_offset").collect()):
            found[r["asked"]]["not_fetched"].append({**spelling(r), **{k: r[k] for k in (
                "time", "reason", "detail", "warc_file", "warc_offset")}})
    bronze = lake.table("bronze.pages")
    if bronze is None:
        return list(found.values())
    pages = (_spelled(bronze, asked).select("asked", "doc_id", "url", "fetch_time", "status", "warc_file",
                                            "warc_offset")
             .orderBy("fetch_time", "doc_id").collect())
    if not pages:
        return list(found.values())
    only = local_frame(spark, sorted({(p["doc_id"],) for p in pages}), "doc_id string")
    fates = document_fates(lake, only)
    ways = stage_ways(lake, fates)
    rows = {r["doc_id"]: r.asDict() for r in fates.df.select("*", *way_columns(ways)).collect()}
    fates.release()
    survivors = _survivors(lake, cfg, only)
    shards = _shards(lake, cfg, only)
    for page in pages:
        way = stages_of(rows.get(page["doc_id"], {}), fates, ways)
        for entry in way:
            if entry["stage"] == "dedup" and entry["outcome"] == DROPPED and page["doc_id"] in survivors:
                entry["duplicate_of"] = survivors[page["doc_id"]]
            if entry["stage"] == "export" and entry["outcome"] == KEPT:
                entry["sequences"] = shards.get(page["doc_id"], [])
        found[page["asked"]]["documents"].append({**{k: page[k] for k in ("doc_id", "fetch_time", "status",
                                                                          "warc_file", "warc_offset")},
                                                  **spelling(page), "stages": way})
    return list(found.values())


def _survivors(lake: Lake, cfg, only) -> dict[str, dict]:
    """doc_id -> the document dedup kept in its place (`survivor_id` and its URL), for those dropped as duplicates."""
    from pyspark.sql import functions as F

    documents, silver = lake.table(cfg.dedup.tables.documents), lake.table("silver.documents")
    if documents is None or "survivor_id" not in documents.columns:
        return {}
    mine = (documents.join(F.broadcast(only), "doc_id", "left_semi")
            .where(F.col("survivor_id").isNotNull() & (F.col("survivor_id") != F.col("doc_id")))
            .select("doc_id", "survivor_id"))
    if silver is not None:
        twins = silver.select(F.col("doc_id").alias("survivor_id"), F.col("url").alias("survivor_url")) \
            .join(F.broadcast(mine.select("survivor_id")), "survivor_id", "left_semi")   # no shuffle of every URL
        mine = mine.join(F.broadcast(twins), "survivor_id", "left")
    return {r["doc_id"]: {k: v for k, v in r.asDict().items() if k != "doc_id"} for r in mine.collect()}


def _shards(lake: Lake, cfg, only) -> dict[str, list[dict]]:
    """doc_id -> the sequences export wrote it as: shard, index in the shard, copy, mix stage."""
    from pyspark.sql import functions as F

    lineage = lake.table(cfg.export.lineage_table)
    if lineage is None:
        return {}
    out: dict[str, list[dict]] = {}
    for r in (lineage.join(F.broadcast(only), "doc_id", "left_semi").orderBy("shard", "i")
              .select("doc_id", "shard", "i", "copy", "stage").collect()):
        out.setdefault(r["doc_id"], []).append({k: r[k] for k in ("shard", "i", "copy", "stage")})
    return out


def render(story: dict) -> str:
    """One URL's story as text."""
    lines = [story["url"]]
    for record in story["not_fetched"]:
        lines.append(f"  crawl     not fetched {_when(record['time'])}: {record['reason']}"
                     + (f" ({record['detail']})" if record["detail"] else "")
                     + f"  [{record['warc_file']} @ {record['warc_offset']}]" + _as_written(record))
    if not story["documents"]:
        lines.append("  ingest    no capture in bronze.pages" + ("" if story["not_fetched"] else
                                                               " and no record of it in bronze.unfetched"))
    if "host_captures" in story:
        n = story["host_captures"]
        lines.append(f"            its host has {n:,} capture{'s' if n != 1 else ''} in bronze.pages: "
                     + ("the crawl reached the host, not this URL (still queued when it stopped, refused before the "
                        "queue: off-site, too deep, over the host's budget; or never linked)" if n else
                        "the crawl never fetched a page of it (not a seed, not linked, or off-site), or its WARC "
                        "files are not ingested yet"))
        lines.append("            the crawl's frontier says which: python -m spider.lookup URL")
    for doc in story["documents"]:
        lines.append(f"  ingest    doc {doc['doc_id']}: HTTP {doc['status']}, fetched {_when(doc['fetch_time'])}"
                     f"  [{doc['warc_file']} @ {doc['warc_offset']}]" + _as_written(doc))
        for entry in doc["stages"]:
            lines.append(f"  {entry['stage']:<9} {_entry(entry)}")
    return "\n".join(lines)


def _as_written(record: dict) -> str:
    return f"\n            as the crawl wrote it: {record['url']}" if "url" in record else ""


def _entry(entry: dict) -> str:
    text = entry["outcome"] + (f": {entry['reason']}" if "reason" in entry else "")
    if "chars" in entry:
        text += f" ({entry['chars']:,} chars)"
    if "tokens" in entry:
        text += f" ({entry['tokens']:,} tokens)"
    if "duplicate_of" in entry:
        twin = entry["duplicate_of"]
        text += f"; kept instead: doc {twin['survivor_id']}" + (f" {twin['survivor_url']}" if twin.get("survivor_url")
                                                                else "")
    for sequence in entry.get("sequences", []):
        text += f"\n            shard {sequence['shard']} sequence {sequence['i']} (copy {sequence['copy']}, " \
                f"stage {sequence['stage']})"
    return text


def _when(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, datetime) else str(value)


class FateJob(SparkJob):
    name = "fate"
    description = "what became of a URL: not fetched and why, or each capture's way through the stages to the shards"
    writes_lake = False   # it only reads

    def add_arguments(self, parser):
        parser.add_argument("urls", nargs="*",
                            help="URLs, spelled as the crawl wrote them (WARC-Target-URI) or otherwise")
        parser.add_argument("--urls", dest="url_file", help="a file of URLs, one per line (# comments)")
        parser.add_argument("--json", action="store_true", help="one JSON object per URL instead of text")

    def parse_args(self, argv):
        """The URLs named and those of --urls, checked before any Spark session starts."""
        args = super().parse_args(argv)
        args.urls = list(args.urls)
        if args.url_file:
            args.urls += [line.strip() for line in storage.read_text(args.url_file).splitlines()
                          if line.strip() and not line.lstrip().startswith("#")]
        if not args.urls:
            raise ConfigError("name at least one URL (or --urls FILE)")
        return args

    def run_job(self, spark, args):
        stories = url_fates(spark, self.cfg, self.paths, args.urls)
        for story in stories:
            print(json.dumps(story, default=str) if args.json else render(story), flush=True)
        unknown = [s["url"] for s in stories if not s["documents"] and not s["not_fetched"]]
        self.metrics.input_rows, self.metrics.output_rows = len(stories), len(stories) - len(unknown)
        self.metrics.extra["unknown_urls"] = unknown[:100]

    @classmethod
    def main(cls, argv=None) -> int:
        """0 when every URL has a record in the lake, 1 when one has none, 2 for a setting that cannot work."""
        try:
            metrics = cls().run(argv)
        except ConfigError as exc:
            print(f"jobs.{cls.name}: {exc}", file=sys.stderr, flush=True)
            return 2
        return 1 if metrics.extra.get("unknown_urls") else 0


if __name__ == "__main__":
    sys.exit(FateJob.main())
