"""Quality stage: language ID, heuristic signals, PII, model scorers -> silver.signals; filters as views -> silver.quality."""
