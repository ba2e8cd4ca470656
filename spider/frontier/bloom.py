"""The layout of the frontier's URL Bloom filter, shared by both backends (the Redis one mirrors it in Lua).

A *scalable* filter (Almeida et al. 2007, as RedisBloom's BF.RESERVE EXPANSION does): stage i holds
`capacity * growth**i` URLs at false-positive rate `fp * (1 - r) * r**i`, so the whole filter stays under `fp`
however many stages it grows, and a small crawl pays only for its first stage.  Each stage is *blocked*: a URL's
k bits all fall in one block of `block_bytes`, so a test-and-set touches one Redis string or one SQLite row.
Blocks of 65,520 bytes fill jemalloc's 64 KiB size class exactly once Redis adds its 6-byte string header.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property

HASH_BITS = 26  # three 26-bit hashes: exact in Lua's doubles, however they are combined below
HASH_MASK = (1 << HASH_BITS) - 1
MAX_STAGES = 16


def url_hashes(digest: bytes) -> tuple[int, int, int]:
    """Three independent 26-bit hashes from a URL's 16-byte fingerprint."""
    return tuple(int.from_bytes(digest[i:i + 4], "big") & HASH_MASK for i in (0, 4, 8))  # type: ignore[return-value]


@dataclass(frozen=True)
class Stage:
    capacity: int
    fp_rate: float
    blocks: int
    k: int
    block_bits: int

    @property
    def bytes(self) -> int:
        return self.blocks * self.block_bits // 8

    def positions(self, hashes: tuple[int, int, int]) -> tuple[int, list[int]]:
        """(block, bit offsets inside it): enhanced double hashing (Dillinger & Manolios 2004), k bits from two
        hashes.  Plain double hashing (b + i*step) lets URLs whose (b, step) differ by a shift share most of their
        bits: at capacity its false-positive rate measured 2.6x the stage's share (bench/frontier_ops.py)."""
        a, b, c = hashes
        x, y, out = b % self.block_bits, c % self.block_bits, []
        for i in range(self.k):
            out.append(x)
            x = (x + y) % self.block_bits
            y = (y + i + 1) % self.block_bits
        return a % self.blocks, out


HASHING = "edh1"  # the bit-position scheme: a filter built with another one would see its URLs as new


@dataclass(frozen=True)
class BloomLayout:
    capacity: int            # URLs the first stage holds at `fp_rate` (per partition)
    fp_rate: float           # bound on the whole filter's false-positive rate
    block_bytes: int = 65520
    growth: int = 2
    tightening: float = 0.5

    def __post_init__(self) -> None:
        if self.capacity < 1 or not 0 < self.fp_rate < 1:
            raise ValueError(f"Bloom filter needs capacity >= 1 and 0 < fp_rate < 1, got {self.capacity}, {self.fp_rate}")

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        out = []
        block_bits = self.block_bytes * 8
        for i in range(MAX_STAGES):
            capacity = self.capacity * self.growth ** i
            fp = self.fp_rate * (1 - self.tightening) * self.tightening ** i
            bits = math.ceil(-capacity * math.log(fp) / math.log(2) ** 2)
            blocks = max(1, math.ceil(bits / block_bits))
            k = max(1, round(math.log(2) * blocks * block_bits / capacity))
            out.append(Stage(capacity, fp, blocks, k, block_bits))
        return tuple(out)

    def stage_for(self, admitted: int) -> int:
        """The stage new URLs go into once `admitted` URLs are in the filter."""
        total = 0
        for i, stage in enumerate(self.stages):
            total += stage.capacity
            if admitted < total:
                return i
        raise OverflowError(f"the URL Bloom filter is full ({total} URLs in {MAX_STAGES} stages); "
                            f"raise frontier.bloom_capacity")

    @property
    def key(self) -> str:
        """Everything that places a URL's bits: stored with a filter, which refuses to run under another layout."""
        return (f"{HASHING} capacity={self.capacity} fp_rate={self.fp_rate!r} block_bytes={self.block_bytes} "
                f"growth={self.growth} tightening={self.tightening!r}")

    def lua_args(self) -> list[int]:
        """Per stage: blocks, k, block_bits, cumulative capacity (what the Redis script needs)."""
        out, total = [], 0
        for stage in self.stages:
            total += stage.capacity
            out += [stage.blocks, stage.k, stage.block_bits, total]
        return out


def fingerprint(canonical_url: str) -> bytes:
    """16-byte fingerprint of a canonical URL (blake2b: fast, keyed-hash quality, in the standard library)."""
    return hashlib.blake2b(canonical_url.encode("utf-8"), digest_size=16).digest()
