"""Fixtures shared by the spider tests."""
from __future__ import annotations

import pytest

from rawhttp import Answer, RawHttpServer


@pytest.fixture
def raw_server():
    """`raw_server(answer)` starts a RawHttpServer; every one started is closed after the test."""
    started: list[RawHttpServer] = []

    def start(answer: Answer, by_host: bool = False) -> RawHttpServer:
        started.append(RawHttpServer(answer, by_host))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture(params=["embedded", "redis"])
def frontier(request, tmp_path):
    """Overrides naming the crawl's frontier: none (the embedded one crawl_command names), or a real Redis server's
    URL."""
    if request.param == "embedded":
        yield []
        return
    from tests.support.redisserver import RedisServer
    server = RedisServer(tmp_path / "redis")
    try:
        yield [f"frontier.url={server.url}"]
    finally:
        server.stop()
