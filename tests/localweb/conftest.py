"""One small local web for the whole test session; helpers that speak absolute-form HTTP to it."""
from __future__ import annotations

import pytest

from localweb import LocalWeb, load_config
from localweb_client import IANA, SMALL


@pytest.fixture(scope="session")
def cfg():
    return load_config(SMALL)


@pytest.fixture(scope="session")
def web(cfg):
    replay = [IANA] if IANA.exists() else []
    with LocalWeb(cfg, replay=replay) as running:
        yield running
