"""The render's sub-request gate (spider/render/gate.py): robots.txt once per host, whoever stops waiting."""
from __future__ import annotations

import asyncio

from spider.render.gate import SubrequestGate


def test_a_render_that_ends_while_its_sub_request_waits_for_robots_txt_does_not_stall_the_others():
    # the first sub-request to ask for a host's robots.txt belongs to a render that ends (its task cancelled); the
    # fetch goes on for the other sub-requests waiting on it, and it is asked once
    asked = []

    async def fetch_robots(url):
        asked.append(url)
        await asyncio.sleep(0.2)
        return 200, b"User-agent: *\nDisallow: /private/\n"

    async def scenario():
        gate = SubrequestGate(0.0, "weblm-test")
        first = asyncio.ensure_future(gate.allowed("http://h.test/a.js", fetch_robots))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(gate.allowed("http://h.test/private/b.js", fetch_robots))
        await asyncio.sleep(0.05)
        first.cancel()
        second_allowed = await asyncio.wait_for(second, 5)
        third_allowed = await gate.allowed("http://h.test/c.js", fetch_robots)   # cached now
        return first.cancelled(), second_allowed, third_allowed

    assert asyncio.run(scenario()) == (True, False, True)
    assert asked == ["http://h.test/robots.txt"]
