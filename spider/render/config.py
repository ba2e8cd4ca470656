"""The `render:` section of conf/crawl.yaml as a typed object (every default and its reason lives there)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RenderConfig:
    enabled: bool = False
    executable: str = "/usr/bin/chromium"
    pages: int = 2
    timeout_s: float = 15.0
    settle_s: float = 0.5
    scroll_steps: int = 3
    js_heap_mb: int = 256
    max_dom_bytes: int = 5_000_000
    block_resource_types: list[str] = field(default_factory=lambda: ["image", "font", "media"])
    max_subrequests: int = 50
    min_html_bytes: int = 512
    thin_text_chars: int = 250
    spa_text_chars: int = 1500
    min_text_ratio: float = 0.0
    min_gain_chars: int = 200
    host_render_after: int = 2
    host_stop_after: int = 2
    host_memory_size: int = 100_000
    restart_after_renders: int = 500

    def __post_init__(self) -> None:
        if self.pages < 1:
            raise ValueError("crawl.render.pages must be >= 1 (the number of Chromium pages rendering at once)")
        if self.timeout_s <= 0 or self.js_heap_mb < 16:
            raise ValueError("crawl.render.timeout_s must be > 0 and crawl.render.js_heap_mb >= 16")
        unknown = set(self.block_resource_types) - {"image", "font", "media", "stylesheet", "websocket", "other"}
        if unknown:
            raise ValueError(f"crawl.render.block_resource_types has unknown Playwright resource types {sorted(unknown)}")
