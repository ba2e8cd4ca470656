"""events.<domain>'s calendar: /calendar/YYYY/MM links to the next and previous month forever,
the classic crawler trap. Pages are made on request; only the first month is in the truth."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from localweb.pages import render_page
from localweb.responses import Response, html_response
from localweb.text import TextGenerator
from localweb.truth import PageTruth

if TYPE_CHECKING:
    from localweb.sites import GeneratedWeb

MONTH_PATH = re.compile(r"^/calendar/(\d{4})/(\d{2})$")


class CalendarTrap:
    prefix = "/calendar/"

    def __init__(self, web: "GeneratedWeb", host: str):
        self.web, self.host = web, host
        year, month = web.cfg.calendar_start.split("-")
        self.start = (int(year), int(month))

    def url(self, year: int, month: int) -> str:
        return f"http://{self.host}/calendar/{year:04d}/{month:02d}"

    def page(self, year: int, month: int) -> tuple[PageTruth, Response]:
        gen = TextGenerator("en", self.web.rng(self.host, "calendar", year, month))
        title = f"Events in {year:04d}-{month:02d}"
        paragraphs = [f"Day {day}: {gen.sentence()}"
                      for day in sorted(gen.rng.sample(range(1, 29), self.web.cfg.calendar_events_per_month))]
        prev_ym = (year, month - 1) if month > 1 else (year - 1, 12)
        next_ym = (year, month + 1) if month < 12 else (year + 1, 1)
        pager = '<p class="pager">' + " ".join(
            f'<a href="{self.url(*ym)}">{label}</a>' for ym, label in ((prev_ym, "« previous month"),
                                                                       (next_ym, "next month »"))) + "</p>\n"
        body = render_page(self.web.chrome[self.host], title, paragraphs, extra_html=pager)
        truth = PageTruth(self.url(year, month), self.host, 200, "calendar", title, "en", "\n\n".join(paragraphs),
                          note="infinite trap: links to the previous and next month")
        return truth, html_response(body)

    def respond(self, target: str) -> Response | None:
        match = MONTH_PATH.match(target)
        if not match:
            return None
        year, month = int(match[1]), int(match[2])
        # Years 1..9998 keep both neighbours printable as YYYY: ~120,000 months is infinite for any crawl.
        if not (1 <= year <= 9998 and 1 <= month <= 12):
            return None
        return self.page(year, month)[1]

    def add_start_truth(self) -> None:
        truth, _ = self.page(*self.start)
        self.web.truth.pages[truth.url] = truth
