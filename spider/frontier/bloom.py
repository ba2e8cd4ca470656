"""The layout of the frontier's URL Bloom filter, shared by both backends (the Redis one mirrors it in Lua).

A *scalable* filter (Almeida et al. 2007, as RedisBloom's BF.RESERVE EXPANSION does): stage i holds
`capacity * growth**i` URLs at false-positive rate `fp * (1 - r) * r**i`, so the whole filter stays under `fp`
however many stages it grows, and a small crawl pays only for its first stage.  Each stage is *blocked*: a URL's
k bits all fall in one block of `block_bytes`, so a test-and-set touches one Redis string or one SQLite row.
Blocks of 65,520 bytes fill jemalloc's 64 KiB size class exactly once Redis adds its 6-byte string header.
Inside its block a URL's bits fall in one of `lines` equal lines (Putze et al. 2007, "cache-, hash- and
space-efficient Bloom filters"): Redis tests a known URL with one GETRANGE of its line's 1,040 bytes, where a GETBIT a
bit cost ~1 us each (~20 a URL), and SQLite touches a page or two, not ~20.  The lines' uneven load costs ~2.5 %
more bits for the same false-positive rate; each stage is sized for it (`_line_bits_per_url`).
Written here, not RedisBloom's BF.* commands (a module Debian's redis-server 7 and many managed Redis services lack,
and the embedded SQLite backend could not share it) nor a Python Bloom package (its bits live in one process).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from functools import cached_property

HASH_BITS = 26  # four 26-bit hashes: exact in Lua's doubles, however they are combined below
HASH_MASK = (1 << HASH_BITS) - 1
MAX_STAGES = 16
LINE_BYTES = 1024  # at least this per line: one GETRANGE's worth, and ~2.5 % more bits than no lines for the same FP


def url_hashes(digest: bytes) -> tuple[int, int, int, int]:
    """Four independent 26-bit hashes from a URL's 16-byte fingerprint."""
    return tuple(int.from_bytes(digest[i:i + 4], "big") & HASH_MASK for i in (0, 4, 8, 12))  # type: ignore


@dataclass(frozen=True)
class Stage:
    capacity: int
    fp_rate: float
    blocks: int
    k: int
    block_bits: int
    lines: int = 1  # per block; 1: a URL's bits anywhere in its block (the layout before lines)

    @property
    def bytes(self) -> int:
        return self.blocks * self.block_bits // 8

    @property
    def line_bits(self) -> int:
        return self.block_bits // self.lines

    def positions(self, hashes: tuple[int, int, int, int]) -> tuple[int, list[int]]:
        """(block a picks, bit offsets inside it): k bits in the line d picks, by enhanced triple hashing
        (Dillinger & Manolios 2004) of b, c and d.  Double hashing gives a URL one of only m^2 bit patterns: in a line
        of m = 8,320 bits, a fresh URL shared the whole pattern of one of its line's URLs 1 time in ~250,000 (FP
        4.5e-6 measured against 5e-7, bench/frontier_ops.py); triple hashing gives m^3.  Plain double hashing
        (b + i*step) was worse still: at capacity 2.6x the stage's share.  A filter from before lines (lines=1) keeps
        its enhanced double hashing of b and c over the whole block."""
        a, b, c, d = hashes
        m, out = self.line_bits, []
        if self.lines == 1:
            x, y = b % m, c % m
            for i in range(self.k):
                out.append(x)
                x = (x + y) % m
                y = (y + i + 1) % m
            return a % self.blocks, out
        start, x, y, z = d % self.lines * m, b % m, c % m, d // self.lines % m
        for i in range(self.k):
            out.append(start + x)
            x = (x + y) % m
            y = (y + z) % m
            z = (z + i + 1) % m
        return a % self.blocks, out


HASHING = "edh1"  # the bit-position scheme: a filter built with another one would see its URLs as new


def line_fp_rate(bits_per_url: float, line_bits: int, k: int) -> float:
    """False-positive rate of a lined filter: a line's load is Poisson around line_bits / bits_per_url URLs, and the
    rate at each load is weighed by its probability (a line that drew more URLs than its share fails more)."""
    mean = line_bits / bits_per_url
    spread = 12 * math.sqrt(mean) + 4
    total = 0.0
    for load in range(max(0, int(mean - spread)), int(mean + spread) + 1):
        weight = math.exp(load * math.log(mean) - mean - math.lgamma(load + 1))
        total += weight * (1 - math.exp(k * load * math.log1p(-1 / line_bits))) ** k
    return total


def _line_bits_per_url(fp: float, line_bits: int) -> tuple[float, int]:
    """(bits per URL, k) that hold `fp` in lines of `line_bits`: the textbook size, grown by 0.5 % steps."""
    bits = -math.log(fp) / math.log(2) ** 2
    while True:
        k = max(1, round(math.log(2) * bits))
        if line_fp_rate(bits, line_bits, k) <= fp:
            return bits, k
        bits *= 1.005


@dataclass(frozen=True)
class BloomLayout:
    capacity: int            # URLs the first stage holds at `fp_rate` (per partition)
    fp_rate: float           # bound on the whole filter's false-positive rate
    block_bytes: int = 65520
    growth: int = 2
    tightening: float = 0.5
    lines: int = 0  # per block; 0: as many as leave each at least LINE_BYTES (63 of 1,040 B); 1: before lines

    def __post_init__(self) -> None:
        if self.capacity < 1 or not 0 < self.fp_rate < 1:
            raise ValueError(f"Bloom filter needs capacity >= 1 and 0 < fp_rate < 1, got {self.capacity}, {self.fp_rate}")
        if not self.lines:
            fits = max(1, self.block_bytes // LINE_BYTES)
            object.__setattr__(self, "lines", next(n for n in range(fits, 0, -1) if self.block_bytes % n == 0))
        if self.lines < 1 or self.block_bytes % self.lines:
            raise ValueError(f"a Bloom block of {self.block_bytes} bytes does not split into {self.lines} lines")

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        out = []
        block_bits = self.block_bytes * 8
        for i in range(MAX_STAGES):
            capacity = self.capacity * self.growth ** i
            fp = self.fp_rate * (1 - self.tightening) * self.tightening ** i
            if self.lines == 1:  # the layout before lines, sized as it was
                bits = math.ceil(-capacity * math.log(fp) / math.log(2) ** 2)
                blocks = max(1, math.ceil(bits / block_bits))
                k = max(1, round(math.log(2) * blocks * block_bits / capacity))
            else:
                per_url, k = _line_bits_per_url(fp, block_bits // self.lines)
                blocks = max(1, math.ceil(per_url * capacity / block_bits))
            out.append(Stage(capacity, fp, blocks, k, block_bits, self.lines))
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

    def stages_written(self, admitted: int) -> int:
        """How many stages hold bits once `admitted` URLs are in the filter (a lookup tests each of them)."""
        try:
            return self.stage_for(admitted) + 1
        except OverflowError:
            return len(self.stages)

    @property
    def key(self) -> str:
        """Everything that places a URL's bits: stored with a filter, which refuses to run under another layout."""
        return (f"{HASHING} capacity={self.capacity} fp_rate={self.fp_rate!r} block_bytes={self.block_bytes} "
                f"growth={self.growth} tightening={self.tightening!r}"
                + (f" lines={self.lines}" if self.lines > 1 else ""))

    def kept(self, stored: str | None, suffix: str = "") -> BloomLayout:
        """The layout a filter stored as `stored` (its key + suffix) was built with, where it is this one before
        lines: that filter keeps its layout, so its URLs stay seen.  Any other difference is refused on use."""
        before = replace(self, lines=1)
        return before if self.lines > 1 and stored == before.key + suffix else self

    def lua_args(self) -> list[int]:
        """Per stage: blocks, k, line bits, cumulative capacity, lines (what the Redis script needs)."""
        out, total = [], 0
        for stage in self.stages:
            total += stage.capacity
            out += [stage.blocks, stage.k, stage.line_bits, total, stage.lines]
        return out


def fingerprint(canonical_url: str) -> bytes:
    """16-byte fingerprint of a canonical URL (blake2b: fast, keyed-hash quality, in the standard library)."""
    return hashlib.blake2b(canonical_url.encode("utf-8"), digest_size=16).digest()
