"""The per-stage report as one self-contained HTML page: tables as HTML, plots as inline PNG (matplotlib).

`render(report)` takes the dict of `jobs.report.collect` and returns the page; nothing on it loads from
outside (no JS, no CSS or fonts from a CDN), so it opens from a bucket, a mail attachment or offline.
"""
from __future__ import annotations

import base64
import html
import io

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px} .muted{color:#777} table{border-collapse:collapse;margin:6px 0 12px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} .notrun{color:#a33;font-weight:600} .ok{color:#276;font-weight:600}
.box{border:1px solid #ccc;border-radius:6px;padding:10px 14px;background:#fafafa;display:inline-block}
.funnel td:nth-child(-n+3),.funnel th:nth-child(-n+3){text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:6px} .grid figure{margin:0;border:1px solid #eee;width:280px}
.grid img{width:280px} figcaption{font-size:12px;color:#555;padding:0 6px 4px} img{display:block}
"""


def _n(value) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"


def _pct(value) -> str:
    return "–" if value is None else f"{value:.1%}"


def _tokens(m: dict | None) -> str:
    if not m or "tokens" not in m:
        return "–"
    return ("≈ " if m.get("tokens_estimated") else "") + f"{m['tokens']:,}"


def _table(header: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


def _png(fig, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")  # no display on a cluster driver
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


# -- the parts of the page ----------------------------------------------------------------------------
def summary(report: dict) -> str:
    o = report["overall"]
    low, high = o["target_kept_share"]
    if o.get("kept_text_share") is None:
        return '<p class="box">No text stage has run: nothing to compare with the target.</p>'
    return (f'<p class="box"><b>{_pct(o["kept_text_share"])}</b> of the extracted text (characters) is kept in '
            f'<code>{html.escape(o["final_table"])}</code>: <b>{o["verdict"]}</b> ({low:.0%}–{high:.0%}). '
            f'{_n(o["documents_kept"])} of {_n(o["pages"])} fetched pages ({_pct(o["kept_document_share"])}) survive; '
            f'{_n(o["kept_text_bytes"])} bytes of text kept from {_n(o["html_bytes"])} bytes of HTML.'
            f'<br><span class="muted">Tokens marked ≈ are estimated at {_n(report["chars_per_token"])} characters per '
            f'token, measured on the tokenized documents.</span></p>')


def funnel_table(report: dict) -> str:
    rows = []
    for s in report["stages"]:
        if s["status"] != "ok":
            rows.append([html.escape(s["stage"]), f'<span class="notrun">{s["status"]}</span>',
                         html.escape(s["tables"])] + ["–"] * 7)
            continue
        i, k, d = s["input"], s["kept"], s["dropped_total"]
        rows.append([html.escape(s["stage"]), '<span class="ok">ok</span>', html.escape(s["tables"]),
                     _n(i["documents"]), _n(k["documents"]), _n(d.get("documents", 0)),
                     _pct(k["documents"] / i["documents"] if i["documents"] else None),
                     _n(k.get("chars")), _tokens(k), _n(k.get("text_bytes", k.get("html_bytes")))])
    notes = "".join(f'<li><b>{html.escape(s["stage"])}</b>: {html.escape(s["why"])}</li>'
                    for s in report["stages"] if s["status"] != "ok")
    return (_table(["stage", "status", "tables", "documents in", "kept", "dropped", "kept share", "chars kept",
                    "tokens kept", "bytes kept"], rows, "funnel")
            + (f"<ul>{notes}</ul>" if notes else ""))


def funnel_plot(report: dict) -> str:
    ran = [s for s in report["stages"] if s["status"] == "ok"]
    if not ran:
        return ""
    fig, ax = _figure(8, 0.45 * len(ran) + 1)
    names = [s["stage"] for s in ran][::-1]
    kept = [s["kept"]["documents"] for s in ran][::-1]
    dropped = [s["dropped_total"].get("documents", 0) for s in ran][::-1]
    ax.barh(names, kept, color="#3a7ca5", label="kept")
    ax.barh(names, dropped, left=kept, color="#d9a441", label="dropped")
    for y, (k, d) in enumerate(zip(kept, dropped)):
        ax.text(k + d, y, f" {k:,} kept / {d:,} dropped", va="center", fontsize=8)
    ax.set_xlabel("documents")
    ax.set_title("Funnel: documents kept and dropped per stage")
    ax.legend(loc="lower right", fontsize=8)
    ax.margins(x=0.35)
    return _png(fig, "funnel: documents kept and dropped per stage")


def reasons(stage: dict) -> str:
    dropped = stage.get("dropped") or {}
    flagged = stage.get("flagged") or {}
    if not dropped and not flagged:
        return "<p class='muted'>Nothing dropped.</p>"
    total = stage["input"]["documents"] or 1
    byte_key = "html_bytes" if stage["stage"] == "extract" else "text_bytes"
    parts = []
    for title, group in (("dropped", dropped), ("flagged (quality.mode=flag: kept, reason recorded)", flagged)):
        if not group:
            continue
        rows = [[html.escape(r), _n(m["documents"]), _pct(m["documents"] / total), _n(m.get("chars")), _tokens(m),
                 _n(m.get(byte_key))] for r, m in group.items()]
        parts.append(f"<h3>{title}</h3>" + _table(
            ["reason", "documents", "share of input", "chars", "tokens", byte_key.replace("_", " ")], rows, "reasons"))
    if len(dropped) > 1:
        fig, ax = _figure(6, 0.3 * len(dropped) + 0.8)
        items = sorted(dropped.items(), key=lambda kv: kv[1]["documents"])
        ax.barh([k for k, _ in items], [v["documents"] for _, v in items], color="#d9a441")
        ax.set_xlabel("documents dropped")
        ax.set_title(f"{stage['stage']}: drops by reason", fontsize=10)
        parts.append(_png(fig, f"{stage['stage']} drop reasons"))
    return "".join(parts)


def stage_details(stage: dict) -> str:
    name = stage["stage"]
    if stage["status"] != "ok":
        return f'<p class="notrun">not run: {html.escape(stage["why"])}</p>'
    out = [f'<p class="muted">{html.escape(stage["tables"])}</p>', reasons(stage)]
    if name == "ingest":
        out.append("<h3>HTTP statuses</h3>" + _table(["status", "pages"], [[k, _n(v)] for k, v in
                                                                          sorted(stage["http_statuses"].items())]))
        if stage["records_skipped"]:
            out.append("<h3>WARC records read but not pages</h3>" + _table(
                ["reason", "records"], [[html.escape(k), _n(v)] for k, v in sorted(stage["records_skipped"].items())]))
        if stage.get("urls_not_fetched"):
            out.append("<h3>URLs the crawl did not fetch (bronze.unfetched, by the reason of each one's latest record;"
                       " not those fetched since)</h3>" + _table(["reason", "URLs"], [[html.escape(k), _n(v)] for k, v in
                                                            sorted(stage["urls_not_fetched"].items())]))
        if stage.get("pages_truncated"):
            out.append("<h3>Pages kept whose body the crawler cut (WARC-Truncated)</h3>" + _table(
                ["reason", "pages"], [[html.escape(k), _n(v)] for k, v in sorted(stage["pages_truncated"].items())]))
    if name == "quality" and stage.get("pii_found"):
        out.append("<h3>PII replaced in kept and dropped documents</h3>" + _table(
            ["type", "matches", "documents with it"],
            [[html.escape(k), _n(v), _n(stage["documents_with_pii"].get(k))] for k, v in stage["pii_found"].items()]))
    if name == "dedup":
        out.append(f"<p>{_n(stage['chars_cut_from_kept'])} characters cut from kept documents (paragraphs, "
                   f"contamination); {_n(stage['not_decided'])} input documents had no decision.</p>")
        out.append("<h3>Cluster sizes</h3>" + _table(["documents in cluster", "clusters"],
                                                     [[_n(int(k)), _n(v)] for k, v in stage["cluster_sizes"].items()]))
    if name == "export":
        out.append(f"<p>{_n(stage['shards'])} shards, {_n(stage['sequences'])} sequences, {_n(stage['shard_tokens'])} "
                   f"tokens (EOD included), mix <code>{html.escape(str(stage['mix']))}</code>.</p>")
        if stage["realized_mix"]:
            out.append("<h3>Realized mix per source</h3>" + _table(
                ["source", "input tokens", "tokens", "share", "target share"],
                [[html.escape(k), _n(v["input_tokens"]), _n(v["tokens"]), _pct(v["share"]), _pct(v["target_share"])]
                 for k, v in stage["realized_mix"].items()]))
    return "".join(out)


def retention_tables(report: dict) -> str:
    out = []
    for key, title in (("languages", "language"), ("hosts", "host")):
        rows = report["retention"][key]
        if not rows:
            out.append(f"<p class='muted'>No retention per {title}: no text stage has run.</p>")
            continue
        extra = ["pages"] if key == "hosts" else []
        out.append(f"<h3>Per {title}</h3>" + _table(
            [title, *extra, "documents", "chars", "documents kept", "chars kept", "chars kept share"],
            [[html.escape(str(r[title])), *[_n(r[e]) for e in extra], _n(r["documents"]), _n(r["chars"]), _n(r["documents_kept"]),
              _n(r["chars_kept"]), _pct(r["chars_kept_share"])] for r in rows]))
    return "".join(out)


def reservations_table(report: dict) -> str:
    rows = report.get("tdm_reservations") or []
    if not rows:
        return ("<p class='muted'>No host's TDMRep file (/.well-known/tdmrep.json) in bronze.site_files reserves text "
                "and data mining.</p>")
    return ("<p class='muted'>Hosts whose TDMRep file reserves text and data mining: their documents are dropped "
            "(reason opt_out); a licence policy says how to ask for them.</p>" + _table(
                ["origin", "documents reserved", "locations reserved", "licence policy"],
                [[html.escape(r["origin"]), _n(r["documents"]), html.escape(", ".join(r["locations"])),
                  html.escape(", ".join(r["policies"]) or "none given")] for r in rows]))


def histogram_grid(report: dict) -> str:
    hists = report["signal_histograms"]
    if not hists:
        return '<p class="notrun">not run: silver.signals is absent (run python -m jobs.quality.job)</p>'
    figures = []
    for column, h in hists["columns"].items():
        fig, ax = _figure(3.4, 2.2)
        low, high = (h["edges"][0], h["edges"][-1]) if h["counts"] else (0.0, 1.0)
        if h["counts"]:
            ax.stairs(h["counts"], h["edges"], fill=True, color="#3a7ca5")
        reach = 10 * max(high - low, abs(high) * 0.1)
        for t in h["thresholds"]:
            for bound, style in ((t["min"], "--"), (t["max"], ":")):
                # a bound far off the data (gopher_long_doc's 100,000 words) would squash the bars: caption only
                if bound is not None and low - reach <= bound <= high + reach:
                    ax.axvline(bound, color="#c0392b", linestyle=style, linewidth=1.2)
        ax.set_title(column, fontsize=9)
        ax.tick_params(labelsize=7)
        rules = ", ".join(f"{t['reason']} {'≥ ' + _n(t['min']) if t['min'] is not None else ''}"
                          f"{'≤ ' + _n(t['max']) if t['max'] is not None else ''}" for t in h["thresholds"])
        caption = f"{_n(h['rows'])} rows, {_n(h['missing'])} missing" + (f"; keep if {rules}" if rules else "")
        figures.append(f"<figure>{_png(fig, f'histogram of {column}')}<figcaption>{html.escape(caption)}"
                       f"</figcaption></figure>")
    return (f"<p class='muted'>{_n(hists['sampled_rows'])} of {_n(hists['rows'])} rows of silver.signals; red lines "
            f"are the thresholds of quality.filters (dashed: minimum, dotted: maximum).</p>"
            f"<div class='grid'>{''.join(figures)}</div>")


def render(report: dict) -> str:
    stages = "".join(f"<h2>Stage: {html.escape(s['stage'])}</h2>{stage_details(s)}" for s in report["stages"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>weblm per-stage report</title>"
            f"<style>{CSS}</style></head><body><h1>weblm: what each stage kept and dropped</h1>"
            f"<p class='muted'>lake {html.escape(str(report['lake']))} · generated {report['generated']}</p>"
            f"{summary(report)}<h2>Funnel</h2>{funnel_table(report)}{funnel_plot(report)}{stages}"
            f"<h2>Retention</h2>{retention_tables(report)}<h2>TDM reservations</h2>{reservations_table(report)}"
            f"<h2>Signal histograms</h2>{histogram_grid(report)}"
            f"</body></html>\n")
