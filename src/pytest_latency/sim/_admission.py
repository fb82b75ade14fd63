"""The server's concurrency limit: the slots requests are served in, and the line waiting for one.

Owns `Admission`: how many requests are being served now (what ``concurrency_slowdown`` reads),
the bounded first-in-first-out wait for a free slot (``max_concurrency``, ``max_queue``), and the
decision to turn a request away when the line is full (the server answers it with a 429). Used
from the server's event loop only, so it needs no lock. Imports only the stdlib.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import NamedTuple

__all__ = ["Admission"]


class _Waiter(NamedTuple):
    limit: int  # the slots this request's model allows (a per-request override may differ)
    granted: asyncio.Future[None]


class Admission:
    """Slots and their line. A request takes a slot with `try_enter` (now) or `wait` (in line);
    every slot taken must be given back with one `leave()`."""

    def __init__(self) -> None:
        self.serving = 0
        self._line: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        return len(self._line)

    def try_enter(self, limit: int) -> bool:
        """Take a slot now if one of `limit` is free and nobody is waiting (limit 0: no limit)."""
        if limit <= 0 or (self.serving < limit and not self._line):
            self.serving += 1
            return True
        return False

    async def wait(self, queue: int, limit: int) -> bool:
        """Wait in line for a slot (True once it is taken) if fewer than `queue` wait already;
        else refuse (False)."""
        if len(self._line) >= queue:
            return False
        waiter = _Waiter(limit, asyncio.get_running_loop().create_future())
        self._line.append(waiter)
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.leave()  # granted just as it was cancelled: hand the slot on
            elif waiter in self._line:  # `leave` may have dropped it already
                self._line.remove(waiter)
            raise
        return True

    def leave(self) -> None:
        """Give a slot back; the longest waiter whose limit allows it takes it."""
        self.serving -= 1
        line = self._line
        while line and self.serving < line[0].limit:
            waiter = line.popleft()
            if waiter.granted.cancelled():
                continue
            # Counted now, not when the waiter resumes, so a newcomer cannot take the slot.
            self.serving += 1
            waiter.granted.set_result(None)
