"""`LocalWeb`: the generated web plus WARC replays, served by one loopback proxy in a background thread."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Iterable

from localweb.config import LocalWebConfig, load_config
from localweb.hits import Hits
from localweb.proxy import ProxyServer
from localweb.replay import ReplayArchive, load_replay
from localweb.responses import Response, problem
from localweb.sites import GeneratedWeb
from localweb.truth import Truth

log = logging.getLogger(__name__)


class LocalWeb:
    """with LocalWeb(cfg, replay=[...]) as web: point a crawler's http proxy at web.proxy_url."""

    def __init__(self, cfg: LocalWebConfig | None = None, replay: Iterable[str | Path] = (), port: int | None = None):
        self.cfg = cfg or load_config()
        self.generated = GeneratedWeb(self.cfg)
        self.replay: ReplayArchive = load_replay(list(replay))
        clashes = self.replay.hosts & set(self.generated.hosts)
        if clashes:
            log.warning("replayed hosts %s are also generated hosts; the generated site wins", sorted(clashes))
        self.hits = Hits()
        self._port = self.cfg.port if port is None else port
        self._server: ProxyServer | None = None
        self._thread: threading.Thread | None = None

    # ---- what the tests and the spider use ---------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """The generated hostnames (replayed hosts are in `replay_hosts`)."""
        return list(self.generated.hosts)

    @property
    def replay_hosts(self) -> list[str]:
        return sorted(self.replay.hosts - set(self.generated.hosts))

    @property
    def seeds(self) -> list[str]:
        return self.generated.seeds + [s for s in self.replay.seeds if s not in self.generated.seeds]

    @property
    def truth(self) -> Truth:
        return self.generated.truth

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("LocalWeb is not serving: call start() or use it as a context manager")
        return self._server.server_address[1]

    @property
    def proxy_url(self) -> str:
        return f"http://{self.cfg.bind_host}:{self.port}"

    def respond(self, host: str, target: str) -> Response | None:
        """The answer for http://host/target without any HTTP: None for a host this web does not serve."""
        if self.generated.knows(host):
            return self.generated.respond(host, target)
        if host in self.replay.hosts:
            found = self.replay.lookup(host, target)
            if found is not None:
                return found
            return problem(404, "Not Found", f"http://{host}{target} is not in the replayed WARC files")
        return None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "LocalWeb":
        if self._server is not None:
            return self
        known = set(self.generated.hosts) | self.replay.hosts
        self._server = ProxyServer((self.cfg.bind_host, self._port), self.respond, self.hits, lambda: known)
        self._thread = threading.Thread(target=self._server.serve_forever, name="localweb-proxy", daemon=True)
        self._thread.start()
        log.info("local web serving %d generated and %d replayed hosts at %s",
                 len(self.hosts), len(self.replay_hosts), self.proxy_url)
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> "LocalWeb":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
