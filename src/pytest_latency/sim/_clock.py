"""The send clock: wake coroutines at absolute `perf_counter_ns` due times, precisely and cheaply.

Owns `SendClock`. asyncio timers land up to ~1 ms late (epoll timeouts are whole milliseconds), so
each waiter sleeps coarsely until shortly before its due time, then parks a future on a heap. One
ticker task, and only one however many streams are open, yield-spins through the last stretch and
resolves every future whose time has come. Stdlib only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time

__all__ = ["SendClock"]

# Coarse sleeps stop this long before the due time; the ticker covers the rest.
_COARSE_MARGIN_NS = 1_500_000


class SendClock:
    """Per event loop. `sleep_until(due_ns)` returns at or just after `due_ns`, never before."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._ticker: asyncio.Task[None] | None = None

    async def sleep_until(self, due_ns: int) -> None:
        remaining = due_ns - time.perf_counter_ns()
        if remaining <= 0:
            return
        if remaining > _COARSE_MARGIN_NS:
            await asyncio.sleep((remaining - _COARSE_MARGIN_NS) / 1e9)
            if time.perf_counter_ns() >= due_ns:
                return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._heap, (due_ns, next(self._seq), fut))
        if self._ticker is None or self._ticker.done():
            self._ticker = loop.create_task(self._tick())
        await fut

    async def _tick(self) -> None:
        heap = self._heap
        while heap:
            now = time.perf_counter_ns()
            while heap and heap[0][0] <= now:
                fut = heapq.heappop(heap)[2]
                if not fut.done():  # a cancelled waiter (client gone, server stopping)
                    fut.set_result(None)
            if not heap:
                return
            wait = heap[0][0] - now
            # Sleep coarsely while the next due time is far; spin (yielding) once it is close.
            await asyncio.sleep((wait - _COARSE_MARGIN_NS) / 1e9 if wait > _COARSE_MARGIN_NS else 0)
