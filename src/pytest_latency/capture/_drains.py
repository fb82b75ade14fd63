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

Each probe, and each of the loop's selects, also asks the kernel's byte counts of the sockets
that received data since (`capture._received`, which places the events of a queue that never
empties).

Owns that epoll and the times it shows; `capture._stream` calls it. May import only the standard
library and `capture._received`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time

from pytest_latency.capture._received import Received

# At a captured body's read at least this long after the last probe or the loop's last select.
# One epoll_wait and a look at the descriptors it names, 1-2 us: a 10 ms pass probes 40 times,
# under 1 % of it; a stream's event is then bounded within this of its arrival in a long pass.
PROBE_EVERY_NS = 250_000


class Drains:
    """The probes of one loop monitor's run, and for each socket they hold, the last time one
    found it empty."""

    __slots__ = ("_epoll", "_last", "_prior", "_since", "_streak", "received")

    def __init__(self, epoll: select.epoll, received: Received | None = None) -> None:
        self._epoll = epoll
        # The byte counts of the sockets in the clear (None where the platform has none).
        self.received = received
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
            epoll = make()
        except OSError:  # out of descriptors: the passes alone bound the stamps
            return None
        return cls(epoll, Received.open())

    def watch(self, fd: int, now: int, counted: socket.socket | None = None) -> None:
        """Hold the socket numbered `fd` from `now` on (no probe before `now` speaks for it);
        and count what `counted`, that socket, receives, where its bytes are its body's as
        written (in the clear)."""
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:  # held already (a socket reused for another attempt)
            return
        except (OSError, ValueError):  # closed since, or the monitor closed
            return
        self._since[fd] = now
        # Counted only where the probes hold it too: an asking trusts their word that a socket
        # holds nothing (review, session 21).
        if counted is not None and self.received is not None:
            self.received.watch(counted)

    def forget(self, fd: int) -> None:
        """Stop holding the socket numbered `fd` (its attempts have ended)."""
        self._since.pop(fd, None)
        self._streak.pop(fd, None)
        if self.received is not None:
            self.received.forget(fd)
        # Closed: the kernel dropped it itself.
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._epoll.unregister(fd)

    def selected(self, now: int, returned: set[int]) -> None:
        """The loop's select returned the descriptors `returned` at `now`: what it did not
        return was empty then, as far as the passes go; the next probe waits `PROBE_EVERY_NS`
        from here. Asks the counts (`Received.selected`)."""
        self._last = now
        if self.received is not None:
            self.received.selected(returned)

    def probe(self, now: int) -> None:
        """A captured body's read at `now`: at least `PROBE_EVERY_NS` since the last probe or
        select, ask which held sockets hold data."""
        if now - self._last < PROBE_EVERY_NS or not self._since:
            return
        self._last = now
        room = len(self._since) + 1
        looked = time.perf_counter_ns()
        try:
            found = self._epoll.poll(0, room)
        except (OSError, ValueError):
            return
        received = self.received
        streak = self._streak
        if len(found) >= room:
            # A full answer may have left a socket out, which would pass for empty: say
            # nothing of this probe, and start over.
            streak.clear()
            self._prior = 0
            if received is not None:
                received.ask()
            return
        named = {fd for fd, _ in found}
        # After this probe: a socket holding data now holds it through the asking (no reader
        # runs in between).
        if received is not None:
            received.ask(named, looked)
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
        """Let the epolls go (again: a no-op)."""
        self._epoll.close()
        if self.received is not None:
            self.received.close()
        self._since.clear()
        self._streak.clear()
