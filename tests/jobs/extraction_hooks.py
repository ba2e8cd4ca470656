"""Extractors that misbehave on marker pages, for the sandbox tests (loaded by import path in the
sandbox's child, so they live in a module, not in a test file)."""
import os
import time

from jobs.text.main_text import extract_document

HANG = b"<html>weblm-test: hang</html>"
CRASH = b"<html>weblm-test: crash</html>"


def extract_or_misbehave(html, status, content_type, charset, url, cfg):
    """`extract_document`, except that it never returns on HANG (trafilatura #704) and kills its own
    process on CRASH (as a segfault in lxml would)."""
    if html == HANG:
        while True:
            time.sleep(60)
    if html == CRASH:
        os._exit(139)
    return extract_document(html, status, content_type, charset, url, cfg)
