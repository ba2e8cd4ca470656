"""The adversarial test web behind `localweb.politeness_web`: 26 generated hosts, each with one way of
being hard to crawl politely, and the ground truth a judge needs to score a crawl against them.

Separate from the demo's generated web (`localweb.sites`) because its hosts exist to catch a crawler
out (hanging robots.txt, Retry-After, traps, gzip bombs), not to feed the pipeline pleasant text.
"""
from localweb.hostile.config import HostileConfig, hostile_config
from localweb.hostile.sites import HostileWeb
from localweb.hostile.truth import HostTruth, Truth

__all__ = ["HostileConfig", "HostileWeb", "HostTruth", "Truth", "hostile_config"]
