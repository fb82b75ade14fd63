"""The prefix cache: which leading prompt blocks are already "computed", with TTL and LRU.

Owns `PrefixCache`: block-granular prefix matching on chained block hashes (from `_tokens`), the
minimum cacheable length, expiry (a leading part of the prefix may be kept longer: a 1-hour
cache), and least-recently-used eviction by token capacity. It decides cache reads and writes;
it knows nothing about time budgets or wire formats. Imports only the stdlib. Thread-safe,
because tests reset it from outside the server's event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CacheResult", "PrefixCache"]


@dataclass(frozen=True, slots=True)
class CacheResult:
    """Tokens of the prompt read from the cache and newly written to it by one request, and the
    part of the writes that went to the long-lived (1-hour) cache."""

    read_tokens: int
    write_tokens: int
    long_write_tokens: int = 0


class PrefixCache:
    """Block-hash → expiry, in LRU order; capacity counted in tokens (blocks × block size)."""

    def __init__(self) -> None:
        self._blocks: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()

    def access(
        self,
        blocks: Sequence[bytes],
        *,
        block_tokens: int,
        min_tokens: int,
        ttl_s: float,
        capacity_tokens: int,
        now_s: float,
        long_blocks: int = 0,
        long_ttl_s: float = 0.0,
    ) -> CacheResult:
        """Read the longest cached prefix of `blocks`, then write the rest of them.

        `blocks` are the chained hashes of the cacheable prefix only; the first `long_blocks`
        of them are kept `long_ttl_s` instead of `ttl_s` (Anthropic's 1-hour cache, which must
        precede its 5-minute one). A prefix shorter than `min_tokens` is neither read nor
        written, as the hosted APIs do. A hit refreshes the TTL of the blocks it used
        (Anthropic's documented behaviour; harmless for OpenAI), never shortening it.
        """
        if len(blocks) * block_tokens < min_tokens:
            return CacheResult(0, 0)
        long_blocks = min(long_blocks, len(blocks))
        with self._lock:
            hit = 0
            for h in blocks:
                exp = self._blocks.get(h)
                if exp is None or exp <= now_s:
                    break
                hit += 1
            # A hit shorter than the minimum would not have been cached on its own: count it as
            # read only if it reaches the minimum.
            if hit * block_tokens < min_tokens:
                hit = 0
            for index, h in enumerate(blocks):
                expires = now_s + (long_ttl_s if index < long_blocks else ttl_s)
                self._blocks[h] = max(expires, self._blocks.get(h, expires))
                self._blocks.move_to_end(h)
            capacity_blocks = max(0, capacity_tokens // block_tokens)
            while len(self._blocks) > capacity_blocks:
                self._blocks.popitem(last=False)
        return CacheResult(
            hit * block_tokens,
            (len(blocks) - hit) * block_tokens,
            max(long_blocks - hit, 0) * block_tokens,
        )
