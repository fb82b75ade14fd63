"""When each byte of a captured socket was received: the kernel's running count, sampled.

A consumer more than one event behind keeps its socket's queue from ever emptying, so the
probes' empty times (`capture._drains`) say nothing of it; and the kernel's arrival time stamp is
the newest data's alone (TCP merges a later arrival into the queue's last buffer under the newer
stamp), so an older event queued before it may have come at any time since the pass before. But
the kernel counts each connection's bytes as it receives them (TCP_INFO's `tcpi_bytes_received`),
and an edge-triggered epoll names a socket once each time data comes to it, whether or not it
held some already. So, at each of the monitor's probes and the loop's selects, this asks that
epoll which sockets received data since the last asking (0.3 us), and reads the count of each it
names (0.7 us): the bytes past the last count came after the asking before and by this one. A
peek that copies the queue whole, with the count the same before and after it, places each event
whole in it on that count (`capture._queued.event_end_offsets`), and so in such a window
(`Received.window`), a probe's interval wide however far behind its consumer is.

Owns that epoll and the counts it led to; `capture._drains` asks it at each probe and select,
`capture._stream` at each peek. May import only the standard library.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import select
import socket
import struct
import sys
import termios
import time

# Where struct tcp_info (linux/tcp.h) keeps tcpi_bytes_received, an unsigned 64-bit count of
# the bytes received in order (Linux 4.1 on; the struct only grows at its end), and how much of
# it to ask for.
_BYTES_RECEIVED = 128
_INFO_SIZE = _BYTES_RECEIVED + 8
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform == "linux" else None
# tcpi_state (byte 0) where the peer has not closed: ESTABLISHED, FIN_WAIT1, FIN_WAIT2.
_OPEN_STATES = frozenset({1, 4, 5})
# The counts one socket keeps between peeks: one a read that found new data. Past this, the
# oldest go, and the bytes they placed are no longer placed (a consumer this far behind is
# beyond the queue a peek copies whole anyway).
KEPT_COUNTS = 256


def received(sock: socket.socket) -> int | None:
    """The kernel's count of the bytes `sock` has received, or None where it cannot say: a
    kernel before the count, or a connection whose peer has closed (the count takes in the
    FIN as a byte, which no read returns: each event placed from it would be a byte on, and
    have the window of the bytes after it; review, session 21)."""
    if _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_SIZE)
    except OSError:
        return None
    if len(info) < _INFO_SIZE or info[0] not in _OPEN_STATES:
        return None
    count: int = struct.unpack_from("=Q", info, _BYTES_RECEIVED)[0]
    return count


class _Counts:
    """One socket's counts: each count with the window its bytes past the one before came in."""

    __slots__ = ("after", "at", "by", "counts", "floor", "last", "sock")

    def __init__(self, sock: socket.socket, count: int, at: int) -> None:
        self.sock = sock
        self.counts: list[int] = []  # ascending
        self.after: list[int] = []  # the bytes past the count before came after this
        self.by: list[int] = []  # and by this
        self.last = count  # the last count read
        self.at = at  # when it was read (a clock read before the asking)
        # Bytes up to here are not placed: received before the socket was held, or their
        # counts dropped at KEPT_COUNTS.
        self.floor = count


class Received:
    """The counts of one loop monitor's captured sockets (see the module docstring)."""

    __slots__ = ("_asked", "_epoll", "_held", "_reading")

    def __init__(self, epoll: select.epoll) -> None:
        self._epoll = epoll
        self._held: dict[int, _Counts] = {}
        self._asked = 0  # when the last asking began (0: none yet)
        # The sockets the loop's last select returned: their reader may take their data during
        # the pass, and epoll names a socket only while it holds data, so an asking that does
        # not name one of these says nothing of what came to it (review, session 21).
        self._reading: set[int] = set()

    @classmethod
    def open(cls) -> Received | None:
        """Counts for a loop's monitor, or None where the platform has no edge-triggered epoll
        or no count of received bytes."""
        make = getattr(select, "epoll", None)
        if make is None or _TCP_INFO is None:
            return None
        try:
            return cls(make())
        except OSError:  # out of descriptors: the passes and probes alone bound the stamps
            return None

    def watch(self, sock: socket.socket) -> None:
        """Hold `sock` from now on: the bytes it received before are not placed."""
        before = time.perf_counter_ns()
        count = received(sock)
        if count is None:
            return
        try:
            fd = sock.fileno()
            self._epoll.register(fd, select.EPOLLIN | select.EPOLLET)
        except FileExistsError:  # held already (a socket reused for another attempt)
            return
        except (OSError, ValueError):  # closed since, or the monitor closed
            return
        self._held[fd] = _Counts(sock, count, before)

    def forget(self, fd: int) -> None:
        """Stop holding the socket numbered `fd`."""
        self._held.pop(fd, None)
        self._reading.discard(fd)
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._epoll.unregister(fd)

    def _since(self, fd: int, counts: _Counts) -> int:
        """When the bytes past the socket's last count came after: when that count was read,
        or the last asking that did not name it, where no reader can have taken its data
        since (it holds data as long as no one reads it, and would have been named)."""
        return counts.at if fd in self._reading else max(counts.at, self._asked)

    def _read(self, fd: int, counts: _Counts, since: int, began: int) -> int | None:
        """Read the socket's count (at `began` or after); the bytes past the last came after
        `since` and by now. The count, or None where it cannot be read."""
        count = received(counts.sock)
        if count is None:
            return None
        if count > counts.last:
            counts.counts.append(count)
            counts.after.append(since)
            counts.by.append(time.perf_counter_ns())
            counts.last = count
            if len(counts.counts) > KEPT_COUNTS:
                counts.floor = counts.counts[0]
                del counts.counts[0], counts.after[0], counts.by[0]
        counts.at = began
        return count

    def ask(self, holding: set[int] | None = None, looked: int = 0) -> None:
        """Read the count of each held socket that received data since the last asking; and
        of those `holding` data (found so by a level-triggered epoll begun at `looked`, just
        before), where one is not named, nothing came to it since it was last named, read or
        not."""
        held = self._held
        if not held:
            return
        if holding is not None and not holding and looked:
            # No socket held data when looked at: none can have been named then (epoll names
            # only those that do), and one nothing reads had nothing come since its last count.
            # As of the look, not now: the thread may have waited for the GIL since, and data
            # come meanwhile (review, session 21). No epoll_wait.
            self._asked = max(self._asked, looked)
            return
        began = time.perf_counter_ns()
        room = len(held) + 1
        named: list[tuple[int, int]] = []
        try:
            while True:
                # Edge-triggered: each descriptor named is taken off the ready list, so a full
                # answer leaves the rest for the next call.
                found = self._epoll.poll(0, room)
                named.extend(found)
                if len(found) < room:
                    break
        except (OSError, ValueError):  # the monitor closed
            # Not asked through: a socket not named may have received data since the asking
            # before, and those named were taken off the ready list: place nothing more.
            for each in held.values():
                each.floor = each.last = sys.maxsize
            return
        for fd, _ in named:
            counts = held.get(fd)
            if counts is not None:
                self._read(fd, counts, self._since(fd, counts), began)
        if holding:
            # A reader may have taken a socket's data since it was last named, and what came
            # before that with it; but where the socket holds data now, anything come since it
            # was last named would have named it again.
            names = {fd for fd, _ in named}
            for fd in self._reading & holding:
                counts = held.get(fd)
                if counts is not None and fd not in names:
                    counts.at = max(counts.at, began)
        self._asked = began

    def selected(self, returned: set[int]) -> None:
        """The loop's select returned the descriptors `returned`: read the count of each held
        socket the select before returned (its reader took its data in the pass since, unseen
        by the askings), ask, and hold the sockets now returned apart until the next select."""
        held = self._held
        self.ask()
        for fd in self._reading:
            counts = held.get(fd)
            # Those the asking named were read by it.
            if counts is not None and counts.at != self._asked:
                self._read(fd, counts, counts.at, time.perf_counter_ns())
        reading = self._reading = returned & held.keys()
        for fd in reading:
            # Not read yet: what came before this asking and was not named came after it.
            counts = held[fd]
            counts.at = max(counts.at, self._asked)

    def count(self, fd: int) -> int | None:
        """The held socket `fd`'s count (for a peek to place its queue): as the last asking
        read it, where it did (nothing came since that is not in it, if a second count after
        the peek is the same), or read now; None where it cannot be read."""
        counts = self._held.get(fd)
        if counts is None:
            return None
        if counts.at == self._asked:
            return counts.last
        return self._read(fd, counts, self._since(fd, counts), time.perf_counter_ns())

    def holds(self, fd: int, sock: object) -> bool:
        """Whether the descriptor `fd` is still held for `sock` (not another socket's since)."""
        counts = self._held.get(fd)
        return counts is not None and counts.sock is sock

    def window(self, fd: int, end: int, now: int) -> tuple[int, int] | None:
        """When the byte before count `end` of the socket `fd` came: (after, by), in
        `perf_counter_ns`; a byte not counted yet came after the last asking and by `now` (a
        peek at `now` found it queued). None where it is not placed: before the socket was
        held, or its count dropped."""
        counts = self._held.get(fd)
        if counts is None or end <= counts.floor:
            return None
        at = bisect.bisect_left(counts.counts, end)
        if at == len(counts.counts):
            return self._since(fd, counts), now
        return counts.after[at], counts.by[at]

    def read_to(self, fd: int) -> int | None:
        """The count up to which the held socket `fd`'s bytes have been read (the count less
        what is queued, FIONREAD, with the count the same before and after: nothing came
        meanwhile), or None."""
        counts = self._held.get(fd)
        if counts is None:
            return None
        before = received(counts.sock)
        try:
            queued = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return None
        if before is None or received(counts.sock) != before:
            return None
        return before - int.from_bytes(queued, sys.byteorder)

    def placed(self, fd: int, start: int) -> None:
        """The socket `fd`'s bytes before count `start` have been read: forget their counts."""
        counts = self._held.get(fd)
        if counts is None:
            return
        drop = bisect.bisect_left(counts.counts, start)
        if drop:
            counts.floor = max(counts.floor, counts.counts[drop - 1])
            del counts.counts[:drop], counts.after[:drop], counts.by[:drop]

    def close(self) -> None:
        """Let the epoll go (again: a no-op)."""
        self._epoll.close()
        self._held.clear()
        self._reading.clear()
