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
