"""PII in one document: find, count per type, replace with typed placeholders (`<EMAIL>`, `<PHONE>`, ...).

Regular expressions plus validation (Luhn for cards, `ipaddress` for public IPs), as datatrove
(`formatters/pii.py`) and Dolma do: Presidio, the library for this, needs spaCy models downloaded at run time.
Each pattern is written to leave dates, prices and version numbers alone (tests/jobs/test_quality_pii.py).
"""
from __future__ import annotations

import ipaddress
import re
from typing import Callable

# type -> placeholder; also the order replacements run in (secrets first: a key may look like anything)
PLACEHOLDERS = {"secret": "<SECRET>", "email": "<EMAIL>", "card": "<CARD_NUMBER>", "national_id": "<NATIONAL_ID>",
                "ip": "<IP_ADDRESS>", "phone": "<PHONE>"}
COLUMNS = {f"pii_{kind}": "int" for kind in PLACEHOLDERS}

# (literal marker, pattern): a pattern runs only on texts holding its marker (a substring test costs ~nothing)
SECRETS = (
    ("PRIVATE KEY-----", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----")),
    ("AKIA", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),                           # AWS access key id
    ("_", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b")),                     # GitHub tokens
    ("github_pat_", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    ("xox", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),                 # Slack
    ("AIza", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),                      # Google API key
    ("k_", re.compile(r"\b[sr]k_(?:live|test)_[0-9A-Za-z]{20,}\b")),          # Stripe
    ("sk-", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{32,}\b")),             # OpenAI-style
    ("eyJ", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")),  # JSON Web Token
)
EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                   r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b")
# The card, IP and phone patterns start with the character their match must start with, and check what stands
# before that character with a lookbehind placed after it: `(?<![\d.,])\d` is written `\d(?<![\d.,]\d)`.
# Python's re then scans for candidate characters instead of trying a lookbehind at every position: 2-3x less
# time on real pages, the same matches (tests/jobs/test_quality_pii.py holds the plain forms and compares).
CARD = re.compile(r"\d(?<![\d.,]\d)(?:[ -]?\d){12,18}(?![\d.,]\d)")
NATIONAL_ID = re.compile("|".join((
    r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b",            # US social security number
    r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b",  # UK national insurance number
)))
IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?![\w]|\.\d)")
IPV6 = re.compile(r"[0-9A-Fa-f](?<![\w:][0-9A-Fa-f])[0-9A-Fa-f]{0,3}:(?:[0-9A-Fa-f]{1,4}:){0,6}"
                  r"(?::|(?::[0-9A-Fa-f]{1,4}){1,7}|[0-9A-Fa-f]{1,4})(?![\w:])")
PHONE = re.compile("|".join((
    # international: +CC then 6-14 more digits in groups, e.g. +44 20 7946 0958, +1 (415) 555-2671, +49-30-901820
    r"\+(?<![\w+]\+)\d{1,3}(?:[ .\-]?\(\d{1,4}\))?(?:[ .\-]?\d{1,5}){2,6}(?![\w])",
    # North American without a country code: (415) 555-2671, 415-555-2671, 415.555.2671
    r"(?:\((?<![\w(]\()\d{3}\) ?|\d(?<![\w(]\d)\d{2}[.\-])\d{3}[.\-]\d{4}(?![\w])",
)))


# Hand-written, not python-stdnum's `luhn.is_valid`: not a dependency, and it would be added for these eight lines.
def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match) -> bool:
    digits = re.sub(r"\D", "", match.group())
    return 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn_ok(digits)


def _public_ip(match: re.Match) -> bool:
    try:
        return ipaddress.ip_address(match.group()).is_global
    except ValueError:
        return False


def _phone(match: re.Match) -> bool:
    return 7 <= sum(ch.isdigit() for ch in match.group()) <= 15


# type -> [(pattern, validator)]
# type -> [(marker, pattern, validator)]; "" = always run
PATTERNS: dict[str, list[tuple[str, re.Pattern, Callable[[re.Match], bool] | None]]] = {
    "secret": [(marker, pattern, None) for marker, pattern in SECRETS],
    "email": [("@", EMAIL, None)],
    "card": [("", CARD, _card)],
    "national_id": [("", NATIONAL_ID, None)],
    "ip": [(".", IPV4, _public_ip), (":", IPV6, _public_ip)],
    "phone": [("", PHONE, _phone)],
}


def redact(text: str | None) -> tuple[str, dict[str, int]]:
    """`(text with typed placeholders, {"pii_<type>": count})`."""
    counts = {column: 0 for column in COLUMNS}
    if not text:
        return text or "", counts
    for kind, patterns in PATTERNS.items():
        column, placeholder = f"pii_{kind}", PLACEHOLDERS[kind]
        for marker, pattern, valid in patterns:
            if marker not in text:
                continue

            def replace(match: re.Match) -> str:
                if valid is not None and not valid(match):
                    return match.group()
                counts[column] += 1
                return placeholder
            text = pattern.sub(replace, text)
    return text, counts


def counts(text: str | None) -> dict[str, int]:
    return redact(text)[1]
