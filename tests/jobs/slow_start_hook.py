"""An extractor module whose import takes far longer than a test's `extract.start_timeout_s`:
a sandbox child that never reports ready (loaded by import path in the child only)."""
import time

time.sleep(30)


def extract(html, status, content_type, charset, url, cfg):
    return "never_reached"
