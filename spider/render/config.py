"""The `render:` section of conf/crawl.yaml as a typed object (every value and its reason lives there)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RenderConfig:
    enabled: bool
    executable: str
    pages: int
    timeout_s: float
    settle_s: float
    scroll_steps: int
    scroll_grace_s: float
    timer_wait_s: float
    js_heap_mb: int
    max_dom_bytes: int
    block_resource_types: list[str]
    max_subrequests: int
    max_repeats: int
    cache_mb: int
    cache_types: list[str]
    cache_max_age_s: float
    min_html_bytes: int
    thin_text_chars: int
    spa_text_chars: int
    min_text_ratio: float
    min_gain_chars: int
    host_render_after: int
    host_stop_after: int
    host_memory_size: int
    restart_after_renders: int
    browser_service_hosts: list[str]

    def __post_init__(self) -> None:
        if self.pages < 1:
            raise ValueError("crawl.render.pages must be >= 1 (the number of Chromium pages rendering at once)")
        if self.timeout_s <= 0 or self.js_heap_mb < 16:
            raise ValueError("crawl.render.timeout_s must be > 0 and crawl.render.js_heap_mb >= 16")
        if self.spa_text_chars < self.thin_text_chars:
            raise ValueError("crawl.render.spa_text_chars must be >= thin_text_chars (a shell marker widens the rule)")
        unknown = set(self.block_resource_types) - {"image", "font", "media", "stylesheet", "websocket", "other"}
        if unknown:
            raise ValueError(f"crawl.render.block_resource_types has unknown Playwright resource types {sorted(unknown)}")
        if self.cache_mb < 0 or not set(self.cache_types) <= {"script", "stylesheet"}:
            raise ValueError("crawl.render.cache_mb must be >= 0 and crawl.render.cache_types a subset of [script, "
                             "stylesheet]: a page's fetch and XHR answers are its own data, not shared code")
        odd = [h for h in self.browser_service_hosts if not h or any(c in h for c in ", /:*~")]
        if odd:
            raise ValueError(f"crawl.render.browser_service_hosts must be bare host names, not {odd}")
