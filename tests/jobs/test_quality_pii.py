"""PII redaction: each type found, replaced by its typed placeholder and counted; dates, prices, versions,
private addresses and look-alike numbers left alone."""
from __future__ import annotations

import pytest

from jobs.quality.pii import COLUMNS, luhn_ok, redact


@pytest.mark.parametrize("text, expected, column", [
    ("write to jane.doe+news@example.co.uk today", "write to <EMAIL> today", "pii_email"),
    ("call +44 20 7946 0958 now", "call <PHONE> now", "pii_phone"),
    ("call +1 (415) 555-2671 now", "call <PHONE> now", "pii_phone"),
    ("ruf +49 30 901820 an", "ruf <PHONE> an", "pii_phone"),
    ("office (415) 555-2671.", "office <PHONE>.", "pii_phone"),
    ("server 8.8.8.8 down", "server <IP_ADDRESS> down", "pii_ip"),
    ("dns 2001:4860:4860::8888 up", "dns <IP_ADDRESS> up", "pii_ip"),
    ("visa 4111 1111 1111 1111 ok", "visa <CARD_NUMBER> ok", "pii_card"),
    ("amex 3782-822463-10005 ok", "amex <CARD_NUMBER> ok", "pii_card"),
    ("ssn 123-45-6789 on file", "ssn <NATIONAL_ID> on file", "pii_national_id"),
    ("NINO AB 12 34 56 C on file", "NINO <NATIONAL_ID> on file", "pii_national_id"),
    ("aws AKIAIOSFODNN7EXAMPLE key", "aws <SECRET> key", "pii_secret"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789AB here", "token <SECRET> here", "pii_secret"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- end", "<SECRET> end", "pii_secret"),
])
def test_each_type_is_replaced_by_its_placeholder_and_counted(text, expected, column):
    out, counts = redact(text)
    assert out == expected
    assert counts[column] == 1 and sum(counts.values()) == 1


@pytest.mark.parametrize("text", [
    "On 2024-01-15 at 12:30:45 the meeting opened.",          # dates and times
    "Published 15/01/2024, updated 01.02.2024.",
    "It costs $1,299.00 or EUR 1.299,99 (was 2,499).",       # prices
    "Upgrade to version 1.2.3 or v2.10.0; Python 3.11.7.",   # versions
    "Population 1,000,000 in 1999-2004; pi is 3.14159.",
    "ISBN 978-3-16-148410-0 and order 4111 1111 1111 1112.",  # fails Luhn: not a card
    "Router 192.168.1.1, loopback 127.0.0.1 and ::1, link fe80::1.",   # not public
    "Build 10.0.19045.3803 of the system.",
    "Room 101, call extension 42.",
])
def test_dates_prices_versions_and_private_addresses_are_left_alone(text):
    out, counts = redact(text)
    assert out == text, counts
    assert sum(counts.values()) == 0


def test_counts_per_type_and_empty_text():
    out, counts = redact("a@b.org, c@d.net and 8.8.4.4")
    assert out == "<EMAIL>, <EMAIL> and <IP_ADDRESS>"
    assert counts == {**{c: 0 for c in COLUMNS}, "pii_email": 2, "pii_ip": 1}
    assert redact("") == ("", {c: 0 for c in COLUMNS}) and redact(None)[0] == ""


def test_luhn():
    assert luhn_ok("4111111111111111") and luhn_ok("378282246310005")
    assert not luhn_ok("4111111111111112")


# the patterns as one would first write them, with the boundary lookbehind in front (pii.py writes it after the
# first character, for speed): the matches must be the same
PLAIN = {
    "CARD": r"(?<![\d.,])\d(?:[ -]?\d){12,18}(?![\d.,]\d)",
    "IPV4": r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)",
    "IPV6": r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,7}(?::|(?::[0-9A-Fa-f]{1,4}){1,7}|[0-9A-Fa-f]{1,4})(?![\w:])",
    "PHONE": r"(?<![\w+])\+\d{1,3}(?:[ .\-]?\(\d{1,4}\))?(?:[ .\-]?\d{1,5}){2,6}(?![\w])"
             r"|(?<![\w(])(?:\(\d{3}\) ?|\d{3}[.\-])\d{3}[.\-]\d{4}(?![\w])",
}


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_fast_patterns_match_what_the_plain_forms_match(name):
    import random
    import re

    from jobs.quality import pii

    rng = random.Random(name)
    pieces = ["4111 1111 1111 1111", "+44 20 7946 0958", "(415) 555-2671", "415.555.2671", "8.8.8.8", "10.0.0.1",
              "2001:db8::1", "fe80::1", "a:b:c:d:e:f:1:2", "1.2.3", "v2.10.4", "$1,299.00", "2024-01-15", "x"]
    alphabet = "0123456789 .-,+():abcfABx\n"
    texts = ["".join(rng.choice(pieces) if rng.random() < 0.2 else rng.choice(alphabet) for _ in range(200))
             for _ in range(400)]
    plain, fast = re.compile(PLAIN[name]), getattr(pii, name)
    found = 0
    for text in texts:
        spans = [m.span() for m in fast.finditer(text)]
        assert spans == [m.span() for m in plain.finditer(text)], text
        found += len(spans)
    assert found > 100   # the texts hold plenty of each
