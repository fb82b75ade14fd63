"""When each captured socket was last seen holding nothing: the loop monitor's mid-pass probes.

A busy event loop's pass can run for many milliseconds, and data read in the next pass may have
arrived at any time in it: the passes alone bound an event's arrival only by the start of the
pass before. The kernel's arrival time stamps tell the newest data's arrival, not the oldest's
(TCP merges a later arrival into the queue's last buffer under the newer stamp). So, at a
captured body's read at least `PROBE_EVERY_NS` into a pass, the monitor asks an epoll of its own,
which holds every captured socket for reading (level-triggered), which of them hold data,
without waiting. A socket it does not name held nothing then: what a later pass reads on it came
after. An epoll of its own, not the loop's selector's: a transport that stops reading between
reads (anyio's) drops its socket from the loop's selector, while its data waits in the kernel.

Owns that epoll and the times it shows; `capture._stream` calls it. May import only the standard
library.
"""

from __future__ import annotations

import contextlib
import select

# At a captured body's read at least this long after the last probe or the loop's last select.
# One epoll_wait and a look at the descriptors it names, 1-2 us: a 10 ms pass probes 40 times,
# under 1 % of it; a stream's event is then bounded within this of its arrival in a long pass.
PROBE_EVERY_NS = 250_000


class Drains:
    """The probes of one loop monitor's run, and for each socket they hold, the last time one
    found it empty."""

    __slots__ = ("_epoll", "_last", "_prior", "_since", "_streak")

    def __init__(self, epoll: select.epoll) -> None:
        self._epoll = epoll
        self._since: dict[int, int] = {}  # each socket's descriptor: when it was added
        # Each descriptor named by every probe since the one before which had not named it:
        # that probe's time (0: unknown, the descriptor was named by the first probe known).
        self._streak: dict[int, int] = {}
        self._prior = 0  # the last probe's time (0: none, or one that could not be read)
        self._last = 0  # the last probe's or select's time (the next probe waits a while)

    @classmethod
    def open(cls) -> Drains | None:
        """Probes for the calling loop's monitor, or None where the platform has no epoll."""
        make = getattr(select, "epoll", None)
        if make is None:
            return None
        try:
            return cls(make())
        except OSError:  # out of descriptors: the passes alone bound the stamps
            return None

    def watch(self, fd: int, now: int) -> None:
        """Hold the socket numbered `fd` from `now` on (no probe before `now` speaks for it)."""
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:  # held already (a socket reused for another attempt)
            return
        except (OSError, ValueError):  # closed since, or the monitor closed
            return
        self._since[fd] = now

    def forget(self, fd: int) -> None:
        """Stop holding the socket numbered `fd` (its attempts have ended)."""
        self._since.pop(fd, None)
        self._streak.pop(fd, None)
        # Closed: the kernel dropped it itself.
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._epoll.unregister(fd)

    def selected(self, now: int) -> None:
        """The loop's select returned at `now`: what it did not return was empty then, as far
        as the passes go; the next probe waits `PROBE_EVERY_NS` from here."""
        self._last = now

    def probe(self, now: int) -> None:
        """A captured body's read at `now`: at least `PROBE_EVERY_NS` since the last probe or
        select, ask which held sockets hold data."""
        if now - self._last < PROBE_EVERY_NS or not self._since:
            return
        self._last = now
        room = len(self._since) + 1
        try:
            found = self._epoll.poll(0, room)
        except (OSError, ValueError):
            return
        streak = self._streak
        if len(found) >= room:
            # A full answer may have left a socket out, which would pass for empty: say
            # nothing of this probe, and start over.
            streak.clear()
            self._prior = 0
            return
        named = {fd for fd, _ in found}
        for fd in [fd for fd in streak if fd not in named]:
            del streak[fd]
        prior = self._prior
        for fd in named:
            if fd not in streak:
                streak[fd] = prior
        self._prior = now

    def empty_at(self, fd: int) -> int | None:
        """The last time a probe found the socket numbered `fd` holding nothing, while held; or
        None where none did."""
        since = self._since.get(fd)
        if since is None:
            return None
        at = self._streak.get(fd, self._prior)
        return at if at and at >= since else None

    def close(self) -> None:
        """Let the epoll go (again: a no-op)."""
        self._epoll.close()
        self._since.clear()
        self._streak.clear()
