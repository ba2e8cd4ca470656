"""Selective JavaScript rendering (issue 10): plain HTML first, headless Chromium only for pages that need it.

`rule` decides per response (pure functions, every signal recorded), `memory` remembers per host what
rendering gave, `pool` renders in a bounded set of Chromium pages driven by Playwright, `warc_record` builds
the `conversion` record that stores a rendered DOM next to the untouched response (SEAMS §2), and
`middleware` wires the three into the Scrapy crawl.
"""
