"""A local web for the demo and the tests: generated multi-host sites and WARC replays behind
one HTTP forward proxy on 127.0.0.1 (see SEAMS.md §1)."""
from localweb.config import LocalWebConfig, load_config
from localweb.web import LocalWeb

__all__ = ["LocalWeb", "LocalWebConfig", "load_config"]
