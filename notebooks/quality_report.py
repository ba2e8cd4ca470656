# Databricks notebook source
# MAGIC %md
# MAGIC # weblm: what each stage kept and dropped, and why
# MAGIC The numbers of `python -m jobs.report` (the same functions): the funnel per stage, drops per reason,
# MAGIC retention per language and host, and a histogram of every quality signal with its thresholds.
# MAGIC Runs as a Databricks notebook (where `spark` and `display` exist) or locally:
# MAGIC `.venv/bin/python notebooks/quality_report.py` after `make demo`.  Reads the lake; writes nothing.

# COMMAND ----------

import pandas as pd

from conf.paths import load_paths
from jobs import report_html
from jobs.base import build_session
from jobs.config import load_jobs_config
from jobs.report import collect

cfg = load_jobs_config()
paths = load_paths()
try:
    spark  # noqa: F821 - predefined on Databricks
except NameError:
    spark, _ = build_session(cfg, paths, None, "weblm-notebook")
try:
    show = display  # noqa: F821 - Databricks renders DataFrames and figures
except NameError:
    def show(frame):
        print(frame.to_string() if hasattr(frame, "to_string") else frame, end="\n\n")

report = collect(spark, cfg, paths)
overall = report["overall"]
print(f"kept text share {overall.get('kept_text_share')} in {overall.get('final_table')} "
      f"(target {overall['target_kept_share']}): {overall.get('verdict')}")

# COMMAND ----------

# MAGIC %md ## Funnel: documents, characters and tokens per stage (tokens marked estimated where not measured)

# COMMAND ----------

funnel = pd.DataFrame([
    {"stage": s["stage"], "status": s["status"], "documents_in": s.get("input", {}).get("documents"),
     "kept": s.get("kept", {}).get("documents"), "dropped": s.get("dropped_total", {}).get("documents"),
     "chars_kept": s.get("kept", {}).get("chars"), "tokens_kept": s.get("kept", {}).get("tokens"),
     "tokens_estimated": s.get("kept", {}).get("tokens_estimated")} for s in report["stages"]])
show(funnel)

# COMMAND ----------

# MAGIC %md ## Drops per stage and reason

# COMMAND ----------

reasons = pd.DataFrame([{"stage": s["stage"], "reason": reason, **m} for s in report["stages"]
                        for reason, m in (s.get("dropped") or {}).items()])
show(reasons if len(reasons) else pd.DataFrame({"note": ["nothing dropped"]}))

# COMMAND ----------

# MAGIC %md ## Retention per language and per host

# COMMAND ----------

show(pd.DataFrame(report["retention"]["languages"]))
show(pd.DataFrame(report["retention"]["hosts"]))

# COMMAND ----------

# MAGIC %md ## TDM reservations: hosts whose `/.well-known/tdmrep.json` reserves mining, and their licence policies

# COMMAND ----------

show(pd.DataFrame(report["tdm_reservations"]) if report["tdm_reservations"]
     else pd.DataFrame({"note": ["no host's TDMRep file reserves text and data mining"]}))

# COMMAND ----------

# MAGIC %md ## Signal histograms (red: the thresholds of `quality.filters`)

# COMMAND ----------

histograms = report["signal_histograms"].get("columns", {})
show(pd.DataFrame([{"signal": column, "rows": h["rows"], "missing": h["missing"],
                    "thresholds": ", ".join(t["reason"] for t in h["thresholds"])}
                   for column, h in histograms.items()]))
# the page's own plots: on Databricks displayHTML shows them inline; locally, write the page and open it
try:
    displayHTML(report_html.histogram_grid(report))  # noqa: F821
except NameError:
    print("open the full page with: python -m jobs.report --out report.html")
