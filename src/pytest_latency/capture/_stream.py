"""Capture's stream logic, independent of any HTTP library: how a `WireRecord` gets filled.

Owns what every binding (one module per HTTP library) calls: starting a record, noting the headers,
a body already in memory, an error and the close; the timed chunk loops (the hot path: two clock
reads, one append and the keep limit's test per chunk; the clock read taken when the consumer asks
for the next chunk is what lets `metrics` tell a server-paced stream from a consumer-paced one),
with the consuming thread's run-queue wait read around its long absences (`RunQueueWait`: a busy
machine is not a slow test body); the read-ahead readers; and the event-loop lag monitor. A binding
only translates its library's request, response and stream objects into the plain values and
iterables taken here.

Client saturation: when an async request starts, `watch_loop` makes sure a lag monitor runs on
that request's event loop while captured calls are in flight there. The monitor is one task per
loop that sleeps `LAG_TICK_NS` at a time and logs how late each wake-up is into a `LoopLag` the
in-flight records share; `metrics` reads the worst lateness within each call's window. It costs
the hot path nothing per chunk (one dict lookup and one append per request), stops by itself
once every call it watches has ended, and is cancelled like any other task when its loop shuts
down (asyncio.run, pytest-asyncio), so it never keeps a loop alive. The monitors live in
`MONITORS`, a `WeakKeyDictionary` keyed by the loop: the one piece of module-level state in
capture, because a loop is shared by every client and transport on it (auto-capture builds a
wrapper per request) and nothing else they all own outlives a request. An entry dies with its
loop, holds no reference to the loop or a test, and holds records only while they are in flight.

May import `wire`, `untrusted`, `gc_pauses`, `capture._queued` and `capture._drains`; never an
HTTP library (httpx2, httpx, aiohttp), a binding, pytest or the SDKs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import math
import os
import queue
import selectors
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from typing import Protocol

from pytest_latency.capture._drains import Drains
from pytest_latency.capture._queued import Framing, whole_events
from pytest_latency.gc_pauses import PAUSED
from pytest_latency.untrusted import safe_text
from pytest_latency.wire import (
    ASK_NS,
    AWAY_NS,
    NOTE_COST,
    READ_COST,
    WAIT_NS,
    AskedArrival,
    LoopLag,
    WireRecord,
)

Clock = Callable[[], int]


class Headers(Protocol):
    """What the bindings read of a library's headers (httpx's `Headers`, aiohttp's multidict)."""

    def get(self, key: str, default: str) -> str: ...
    def values(self) -> Iterable[str]: ...


# The loop monitor's sleep. Saturation is flagged at 50 ms of lag, which a 10 ms tick resolves;
# a faster tick (2 ms was tried) wakes the loop so often that it shows in the very timings it
# guards: async ITL error p50 rose from 0.02 to 0.2 ms against the simulator's truth.
LAG_TICK_NS = 10_000_000
# A select that took longer than this, plus PASS_EVENT_NS for each socket it returned (the
# selectors module builds its answer in Python, ~0.3 us a socket), waited for its first arrival;
# what it returned arrived within this of its return.
PASS_SLACK_NS = 200_000
PASS_EVENT_NS = 2_000
# How far past its timeout a select may return for reasons of its own: epoll counts whole
# milliseconds (Python rounds the timeout up) and a timer's slack is 50 us. Later than that, and
# later than the thread's wait for a CPU explains, the thread was kept from running where the
# guest's scheduler cannot see: a hypervisor's steal, a stopped process (`_time_passes`).
OVERSHOOT_NS = 1_000_000
# A pass whose data may have arrived over this long before its select returned (a busy loop's
# previous pass, or a woken thread's wait for a CPU) asks the kernel when the data of each
# captured socket it returned arrived: one peek, 3-5 us a socket with the reading of its queue
# (`_queued`), only where the passes alone would bound its stamps loosely (and on every pass
# whose select did not wait for a transport that stops reading between reads, whose data the
# passes cannot see arrive: `watch_socket`).
PEEK_AFTER_NS = 500_000
# And every pass whose select waited (an idle loop) asks of a captured socket it returned,
# however short, until the kernel has told of this many of its attempt's passes: the first
# events, the ttft's, whose stamps such a pass bounds by its select's return. Nothing in the
# process shows what came between the data's arrival and that return: a hypervisor's steal, or
# a loopback delivery deferred to ksoftirqd (an idle loop's first content stamped 2.1 ms after
# the simulator's write, bound at 0.56 ms by its pass, no CPU wait noted: a quiet CI run,
# session 27). The kernel's stamp of the queue is from before either. A peek and its count
# cost ~10 us here: not on a busy loop (its selects poll), where call starts crowd and a few
# percent of CPU cost a third of the ceiling (docs/load.md).
FIRST_PEEKS = 6
# A sync consumer's ask peeks only at a queue shorter than this (one buffer a body): the events
# a consumer away for a moment finds queued, which the kernel's stamp times. A longer queue is a
# consumer far behind, already flagged by its reads; counting the events in 64 KiB of it in
# Python took up to 650 us an ask, charged to the stamp of the read asked for (review, session
# 23). 8 KiB since the bytes a layer above the socket holds count with its queue (h11's: a
# consumer 1.8 ms a chunk behind a 1.5 ms stream held 5.7-8 KiB between the two; session 25).
# The count's cost, at its worst (75 events of 108 B, a chunk each): 283-305 us an ask over
# 8 KiB against 144-151 at 4, quiet on the development box (`_queued.whole_events`; session 26);
# a fifth less since its size lines are matched by a regex (median ratio 0.82-0.83 at 8 KiB,
# interleaved with the walk before in one process; session 27).
ASK_PEEK_BYTES = 8_192
# A sync read that waited for its data after a short absence keeps its thread's run-queue wait
# only from here on (`note_queued`): what `metrics._pace.wake_delay` flags is over 5 ms, and a
# prompt consumer, which waits at nearly every read, noted 57 waits for 63 reads, 43 of them 0,
# 56 % on top of its reads against the keep limit (review, session 24).
WAKE_NOTE_NS = 1_000_000
# A wait for a CPU longer than this between a read's arrival stamp and the run-queue counter's
# reading after it (the code between is microseconds: a `thread_time_ns` system call, a few
# appends) is the next absence's, and `note_queued` carries it there. The read's CPU-time
# syscall is a preemption point: beside CPU hogs a pass loop's thread was preempted there for
# 2.6 ms, the wait noted with the read before (10.6 ms against its 9.1 ms absence, capped there)
# and the absence after came out 3.6 ms of the consumer's own, a chunk counted consumer-bound
# (a hog run of CI, session 26; session 27).
CARRY_NS = 100_000
# Linux's SO_TIMESTAMPNS (asm-generic's number, which the socket module does not name; other
# architectures number it otherwise and are left alone): the kernel stamps each arrival on the
# wall clock, and a peek with room for ancillary data reads the stamp of the newest data it
# copied (TCP merges a later arrival into the queue's last buffer under the newer stamp).
_TIMESTAMPNS = (
    35 if sys.platform == "linux" and os.uname().machine in {"x86_64", "aarch64"} else None
)
_PEEK_FLAGS = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_DONTWAIT", 0)
_STAMP_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
# A peek copies up to this much of the queue (one buffer a monitored loop): then its time stamp
# is the newest data's, and its bytes say how many events were whole by then (`_queued`). A
# queue past this is rare (a stalled consumer; asyncio's transports take up to 256 KiB a read)
# and says nothing.
# Copying a stream's usual queue, one or two events of a few hundred bytes, costs no more than a
# one-byte peek (2.2 us either way, measured here).
PEEK_BYTES = 65_536
# The most the two wall-clock reads around a peek's perf_counter read may be apart for its
# arrivals to be mapped to perf_counter (each off by at most half of it); more, and the pass's
# peeks are dropped, its stamps keeping the passes' bounds.
CLOCK_PAIR_NS = 50_000
# Every this many ticks (50 ms) the monitor drops the calls that have ended; with none left, it
# stops.
LAG_SCAN_TICKS = 5

# The Stainless SDKs (anthropic, openai) number their retries in this request header.
RETRY_COUNT_HEADER = "x-stainless-retry-count"


class _End(enum.Enum):
    """Marks the end of a read-ahead body in its queue."""

    END = enum.auto()


# ---- the record ----------------------------------------------------------------------------------


def url_without_query(scheme: str, host: str, port: int | None, path: str) -> str:
    """scheme://host[:port]/path: what a record keeps of a URL (a query may carry a key)."""
    return f"{scheme}://{host}{f':{port}' if port else ''}{path}"


def attempt_number(retry_count: str) -> int:
    """The attempt a request is (0 for the first), from its `RETRY_COUNT_HEADER` value."""
    try:
        return int(retry_count)
    except ValueError:
        return 0


def start_record(
    method: str, url: str, request_body: bytes, attempt: int, clock: Clock
) -> WireRecord:
    return WireRecord(
        method=method, url=url, request_body=request_body, t_start_ns=clock(), attempt=attempt
    )


def note_headers(
    record: WireRecord, t_headers_ns: int, status: int, content_type: str, content_encoding: str
) -> None:
    """Note the response's head; `t_headers_ns` is read before the headers are looked up."""
    record.t_headers_ns = t_headers_ns
    record.status = status
    record.content_type = content_type
    record.content_encoding = content_encoding


def note_prefetched(record: WireRecord, body: bytes, clock: Clock) -> None:
    """The body was in memory when the response came back (mocks, caching layers): its stream is
    never iterated, so it is recorded as one read with no arrival time worth anything."""
    now = clock()
    record.prefetched = True
    if keep_read(record, record.keep_limit - len(body) - READ_COST, now, now, body) >= 0:
        record.reads.append((now, now, body))
    record.t_eof_ns = now


def note_error(
    record: WireRecord, exc: BaseException, clock: Clock, secrets: Sequence[str] = ()
) -> None:
    """The attempt failed with `exc`. Its message is kept as one line with `secrets` (the
    request's header values, where the caller has them) and key-shaped strings redacted: h11
    quotes an illegal header value, API key included, in its exception. A cancellation is the
    caller stopping the attempt, not the attempt failing (`WireRecord.cancelled`)."""
    if isinstance(exc, asyncio.CancelledError) and record.error is None:
        record.cancelled = True
    elif record.error is None:
        record.error = type(exc).__name__
        record.error_message = safe_text(str(exc), 500, secrets)
    if record.t_closed_ns is None:
        record.t_closed_ns = clock()


def note_closed(record: WireRecord, clock: Clock) -> None:
    if record.t_closed_ns is None:
        record.t_closed_ns = clock()


def finished(record: WireRecord) -> bool:
    return record.t_eof_ns is not None or record.t_closed_ns is not None or record.error is not None


# ---- the hot path ------------------------------------------------------------------------------


def keep_read(record: WireRecord, room: int, asked: int, arrived: int, chunk: bytes) -> int:
    """The slow path of the keep limit (`wire.KEEP_LIMIT`). A reader keeps `room`, what is left
    of `record.keep_limit` after each read's bytes and `READ_COST`, and appends a read itself
    while it stays >= 0; past that it calls this. The read that crosses the limit is kept up to
    it, later ones are counted, not kept. Returns the room, negative once the limit is reached
    (the caller then appends nothing: this has kept what fits)."""
    if room >= 0:
        return room
    if not record.capped:
        fit = room + len(chunk)  # the room before this read, less its READ_COST
        if fit > 0:
            record.reads.append((asked, arrived, chunk[:fit]))
            record.dropped_bytes += len(chunk) - fit
            return -1
    record.dropped_reads += 1
    record.dropped_bytes += len(chunk)
    record.t_dropped_ns = arrived
    return -1


try:  # POSIX; per thread on Linux alone
    import resource

    _RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:
    _RUSAGE_THREAD = None


def _sleeps() -> int | None:
    """How many times the calling thread has given up its CPU by itself (to wait: for an
    event, a lock, the GIL), or None where the platform does not count them per thread."""
    if _RUSAGE_THREAD is None:
        return None
    return resource.getrusage(_RUSAGE_THREAD).ru_nvcsw  # 0.4 us


class RunQueueWait:
    """The calling thread's time spent runnable but waiting for a CPU (Linux schedstat's
    run_delay, ns), from /proc/thread-self/schedstat: the handle is bound to the thread that
    opened it. `raw` is one `pread` (~1 µs) and keeps the counter's line unparsed; `parse`
    (~1 µs) runs only where a wait matters. Where the kernel does not expose it, `fd` is -1,
    `read` gives None, and every delay counts as the reader's own."""

    __slots__ = ("fd", "thread")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.thread = threading.get_ident()

    @classmethod
    def open(cls) -> RunQueueWait:
        try:
            return cls(os.open("/proc/thread-self/schedstat", os.O_RDONLY))
        except OSError:
            return cls(-1)

    def raw(self) -> bytes:
        """The counter's line as read (b"" where it cannot be read)."""
        if self.fd < 0:
            return b""
        try:
            return os.pread(self.fd, 64, 0)
        except OSError:
            return b""

    @staticmethod
    def parse(raw: bytes) -> int | None:
        try:
            return int(raw.split()[1])
        except (ValueError, IndexError):
            return None

    def read(self) -> int | None:
        return self.parse(self.raw())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        # A body never read nor closed (a response dropped unread): its handle goes with it.
        with contextlib.suppress(Exception):
            self.close()


def note_queued(
    record: WireRecord,
    queue: RunQueueWait,
    index: int,
    since: bytes,
    note: bool,
    least: int = 0,
    carried: int = 0,
    arrived: int = 0,
) -> tuple[bytes, int]:
    """Read `index` has just arrived (at `arrived`, on perf_counter), more than `WAIT_NS` after
    the one before: read the counter (the new `since`), and where `note`, note how long its
    thread waited for a CPU since the last reading (`since`: before the absence, or at the
    headers). Noted where the consumer had been away over `AWAY_NS` before asking; a sync body's
    also from `ASK_NS` on, as it asks its socket (how far behind a consumer is, and whose doing,
    adds up over absences each too short to count alone: `metrics._pace.behind`), and where the
    read waited for its data: a thread woken by its data's arrival on a busy machine waits for a
    CPU before it stamps it (`metrics._pace.wake_delay`): kept there only from `least` on, as a
    wait under the target says nothing a flag needs, and a prompt consumer waits at nearly every
    read.

    A wait between the arrival's stamp and the counter's reading belongs to the absence after
    the read, not before it (`CARRY_NS`): returned with the new `since` as the next reading's
    `carried`, which that note counts and this one does not."""
    # The time since the stamp is read before the counter: a stall after the counter's reading
    # is the next note's already, and counted here it would carry a wait from before the stamp.
    late = time.perf_counter_ns() - arrived if arrived else 0
    now = queue.raw()
    carry = 0
    if late > CARRY_NS or note:
        before, after = RunQueueWait.parse(since), RunQueueWait.parse(now)
        if before is not None and after is not None:
            waited = after - before
            carry = min(late, waited) if late > CARRY_NS else 0
            ns = waited - carry + carried
            if note and ns >= least >= 0:
                record.queued.append((index, ns))
    return now, carry


def note_paused(record: WireRecord, index: int, since: int, note: bool) -> int:
    """`note_queued`'s twin for garbage collection, over about the same span: the collector's
    summed pause time now (the new `since`, returned), and where `note`, how much of it fell
    since the last reading. A pause between the read's arrival stamp and this reading stays
    with this read, not carried as `note_queued` carries a wait for a CPU: a collection there
    (set off by the notes' own allocations) is rare, and nothing times it apart."""
    now = PAUSED[0]
    if note and now > since:
        record.paused.append((index, now - since))
    return now


try:  # POSIX; not Windows, nor wasi or emscripten
    import fcntl
    import termios

    _FIONREAD: int | None = termios.FIONREAD
except (ImportError, AttributeError):
    _FIONREAD = None
CAN_ASK_UNREAD = _FIONREAD is not None


def unread_bytes(fd: int) -> int:
    """How many bytes socket `fd` holds that no one has read (FIONREAD, Linux's SIOCINQ); 0
    where it cannot say (closed since, or no FIONREAD here)."""
    if _FIONREAD is None:
        return 0
    try:
        answer = fcntl.ioctl(fd, _FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(answer, sys.byteorder)


def _held_bytes(held: Callable[[], bytes] | None, framing: Framing) -> bytes:
    """The bytes a layer above the socket holds unread (`TimedBody.watch_socket`'s `held`),
    from where the body's next read starts: b"" for none, or where it cannot say. In chunked
    framing h11 discards the line end that closes a chunk only as it reads the next, so what it
    holds may begin with it, which is no chunk's (h11 >= 0.16 holds it whole or not at all: a
    lone LF there is an error it raises)."""
    if held is None:
        return b""
    try:
        data = held()
    except Exception:  # the layer changed under us: say nothing rather than something wrong
        return b""
    return data.removeprefix(b"\r\n") if framing is Framing.CHUNKED else data


def _queue_reader(body: TimedBody | AsyncTimedBody) -> RunQueueWait:
    """The body's run-queue reader, for the thread that iterates it (it was opened with the
    headers, normally in the same thread; a body handed to another thread reopens, and the
    absence before its first read goes without a reading). One that reads nothing (`fd` -1)
    for a body on an injected clock."""
    reader = body._queue
    if reader is None:
        return RunQueueWait(-1)
    if reader.thread == threading.get_ident():
        return reader
    reader.close()
    body._queue = reader = RunQueueWait.open()
    body._since = b""
    return reader


class TimedBody:
    """A body stamped as the consumer reads it: each chunk when the consumer asked for it and
    when it arrived. A binding subclasses it with its library's stream base class.

    `__iter__` is the generator itself, not a function it calls: a generator method runs the
    loop ~5 ns per chunk faster than a module-level generator function (CPython 3.11, measured
    against the same bytecode).

    Where the consumer was away longer than `AWAY_NS` before asking for a chunk, the loop also
    notes how much of the time since the last reading its thread spent waiting for a CPU
    (`note_queued`): a busy machine, which `metrics` tells apart from a slow test body. The
    counter is read (unparsed, one `pread`) on every chunk that arrived more than `WAIT_NS`
    after the one before: after a long absence, and after a read that waited for its data,
    where the next absence may start. A chunk that came sooner had neither, and the next reading
    spans it: nothing to wait for a CPU in 0.3 ms but a preemption, which would have made the
    chunk late. A consumer that is behind finds its data buffered and pays one comparison a
    chunk."""

    def __init__(self, chunks: Iterable[bytes], record: WireRecord, clock: Clock) -> None:
        self._chunks = chunks
        self._record = record
        self._clock = clock
        # Opened here, with the headers (the absence before the first read starts now); only on
        # the clock the scheduler's counter shares (an injected clock's gaps are not ns).
        self._queue = RunQueueWait.open() if clock is time.perf_counter_ns else None
        self._since = b"" if self._queue is None else self._queue.raw()
        self._paused = PAUSED[0]
        self._socket = -1
        # Where the socket stamps arrivals: it, how it carries the body, and the buffer its
        # peeks copy into (made at the first).
        self._stamped: socket.socket | None = None
        self._framing = Framing.OPAQUE
        self._buffer: bytearray | None = None
        self._held: Callable[[], bytes] | None = None

    def watch_socket(
        self, sock: object, framing: Framing, held: Callable[[], bytes] | None = None
    ) -> None:
        """Ask `sock` (the socket the body is read from, where the binding knows it and its
        bytes are this body's alone and as the server wrote them: HTTP/1 in the clear, carried
        in `framing`) how many bytes it holds unread at each ask after an absence
        (`WireRecord.ready`) and, where the kernel stamps arrivals, when the newest of them
        came and what whole events they hold (`WireRecord.asked_arrivals`). Not where the
        platform cannot ask (no FIONREAD), nor of a socket without a descriptor.

        `held`, where the binding can say, returns the bytes a layer above the socket has taken
        off it and not yet handed on (h11's receive buffer): they are read before the socket's
        and came before any of them, so they count with the socket's at each ask. Without
        them, a consumer behind a chunked stream whose reads took several chunks off the socket
        at once had the kernel's count set against the buffer's events, and the socket's were
        left to their late stamps: litellm's, 5-10 ms late on a 2 ms-a-token stream (session 25)."""
        if not CAN_ASK_UNREAD:
            return
        self._held = held
        try:
            fd = sock.fileno()  # type: ignore[attr-defined]  # a socket of any make, or none
        except Exception:
            return
        if not isinstance(fd, int) or fd < 0:
            return
        self._socket = fd
        # Set whether or not the kernel stamps: the held bytes are read by it too (a review
        # found a chunk's leftover line end counted in `ready` where the stamps were refused).
        self._framing = framing
        # Arrivals from now on are stamped: the body's, which come after its head.
        if isinstance(sock, socket.socket) and _stamp_arrivals(sock):
            self._stamped = sock

    def _ask(self) -> tuple[int, tuple[int, int, bool] | None]:
        """What no one has read as the consumer asks after an absence: its bytes, held above
        the socket (`watch_socket`'s `held`) and in it (0 for none, or where it cannot say), and
        where the kernel stamped the socket's and the peek copied the whole queue, the newest's
        arrival as a `perf_counter_ns` reading, the events whole in the held bytes and the
        queue together and whether they end at one's end (`_queued.whole_events`)."""
        unread = unread_bytes(self._socket)
        held = _held_bytes(self._held, self._framing)
        pending = unread + len(held)
        sock = self._stamped
        # Only a socket that holds data is peeked: Python waits for one with a timeout (the
        # HTTP libraries' sync sockets) to be readable before it calls, MSG_DONTWAIT or not.
        # Nor one that holds the buffer's worth or more: a peek that fills it says nothing.
        if sock is None or unread <= 0 or pending >= ASK_PEEK_BYTES:
            return pending, None
        clocks = _clock_pair()
        if clocks is None:
            return pending, None
        buffer = self._buffer
        if buffer is None:
            self._buffer = buffer = bytearray(ASK_PEEK_BYTES)
        # The held bytes first, then the socket's after them: the stream as it will be read.
        buffer[: len(held)] = held
        try:
            size, stamp = _peek_stamp(sock, buffer, len(held))
        except OSError:  # closed since
            return pending, None
        if stamp is None:
            return pending, None
        now, wall = clocks
        whole, ends = whole_events(buffer, len(held) + size, self._framing)
        return pending, (now - (wall - stamp), whole, ends)

    def __iter__(self) -> Iterator[bytes]:
        record, clock = self._record, self._clock
        reads = record.reads
        chunks = iter(self._chunks)
        room, cost = record.keep_limit, READ_COST
        queue = _queue_reader(self)
        fd = queue.fd
        since, slow, away, ask = self._since, WAIT_NS, AWAY_NS, ASK_NS
        carried = 0  # the last reading's wait after its read's arrival (`note_queued`)
        paused = self._paused
        timed = clock is time.perf_counter_ns
        cpu_time = time.thread_time_ns
        sock = self._socket
        previous = record.t_headers_ns or clock()
        try:
            while True:
                # Stored as well: a read still in flight when the test ends is seen (+1 store).
                record.t_asked_ns = asked = clock()
                # After an absence, the read's own CPU time (see `WireRecord.read_cpu`) and the
                # bytes its socket held (`WireRecord.ready`): one test a chunk, two clock_gettime
                # calls and an ioctl an absence. Noted only for a read that is kept, and charged
                # to the limit (`NOTE_COST`).
                if asked - previous > ask and room >= 0:
                    cpu = cpu_time() if fd >= 0 and asked - previous > away else -1
                    unread, kernel = self._ask() if sock >= 0 and timed else (0, None)
                else:
                    cpu, unread, kernel = -1, 0, None
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                arrived = clock()
                if cpu >= 0:
                    record.read_cpu.append((len(reads), cpu_time() - cpu))
                    room -= NOTE_COST
                if unread > 0:
                    record.ready.append((len(reads), unread))
                    room -= NOTE_COST
                    if kernel is not None:  # a 4-tuple of 4 ints: ~170 B
                        record.asked_arrivals.append(AskedArrival(len(reads), *kernel))
                        room -= 2 * NOTE_COST
                # One test a chunk (+~40 ns): only a read that came more than WAIT_NS after the
                # last one can end a long absence or start one after waiting (see the class).
                if arrived - previous > slow and timed and room >= 0:
                    away_long = asked - previous > ask
                    notes = len(record.queued) + len(record.paused)
                    if fd >= 0:
                        since, carried = note_queued(
                            record,
                            queue,
                            len(reads),
                            since,
                            away_long or arrived - asked > slow,
                            0 if away_long else WAKE_NOTE_NS,
                            carried,
                            arrived,
                        )
                    paused = note_paused(record, len(reads), paused, away_long)
                    room -= NOTE_COST * (len(record.queued) + len(record.paused) - notes)
                previous = arrived
                # The keep limit: a subtraction and a test per chunk (+0.11 us measured against
                # the loop without it, docs/performance.md §8), a call past it.
                room -= len(chunk) + cost
                if room >= 0:
                    reads.append((asked, arrived, chunk))
                else:
                    room = keep_read(record, room, asked, arrived, chunk)
                yield chunk
        except GeneratorExit:  # the consumer stopped early: not a failure of the call
            raise
        except Exception as exc:
            note_error(record, exc, clock)
            raise
        finally:
            queue.close()
            self._buffer = None
        record.t_eof_ns = clock()

    def close(self) -> None:
        """Stamp the close; the binding then closes the body being read."""
        note_closed(self._record, self._clock)
        if self._queue is not None:
            self._queue.close()


class AsyncTimedBody:
    """The async `TimedBody` (the consumer's thread is the loop's)."""

    def __init__(self, chunks: AsyncIterable[bytes], record: WireRecord, clock: Clock) -> None:
        self._chunks = chunks
        self._record = record
        self._clock = clock
        self._queue = RunQueueWait.open() if clock is time.perf_counter_ns else None
        self._since = b"" if self._queue is None else self._queue.raw()
        self._paused = PAUSED[0]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        record, clock = self._record, self._clock
        reads = record.reads
        chunks = self._chunks.__aiter__()
        room, cost = record.keep_limit, READ_COST
        queue = _queue_reader(self)
        fd = queue.fd
        since, slow, away = self._since, WAIT_NS, AWAY_NS
        carried = 0  # the last reading's wait after its read's arrival (`note_queued`)
        paused = self._paused
        timed = clock is time.perf_counter_ns
        probe = prober(record)  # the loop monitor's mid-pass probe, or None
        previous = record.t_headers_ns or clock()
        try:
            while True:
                # Stored as well: a read still in flight when the test ends is seen (+1 store).
                record.t_asked_ns = asked = clock()
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                arrived = clock()
                if probe is not None:
                    probe(arrived)
                if arrived - previous > slow and timed and room >= 0:
                    note = asked - previous > away
                    if fd >= 0:
                        since, carried = note_queued(
                            record, queue, len(reads), since, note, 0, carried, arrived
                        )
                    paused = note_paused(record, len(reads), paused, note)
                    if note:  # what the two notes may have cost
                        room -= 2 * NOTE_COST
                previous = arrived
                room -= len(chunk) + cost
                if room >= 0:
                    reads.append((asked, arrived, chunk))
                else:
                    room = keep_read(record, room, asked, arrived, chunk)
                yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:  # CancelledError included: the call did not finish
            note_error(record, exc, clock)
            raise
        finally:
            queue.close()
        record.t_eof_ns = clock()

    async def aclose(self) -> None:
        """Stamp the close; the binding then closes the body being read."""
        note_closed(self._record, self._clock)
        if self._queue is not None:
            self._queue.close()


# ---- read-ahead ----------------------------------------------------------------------------------


class ReadAhead:
    """Reads a body in a thread as it arrives, whatever the consumer does, so a test body that
    sleeps or awaits I/O between chunks does not shift the stamps. It cannot help a consumer that
    holds the GIL (CPU-bound work): that is what the consumer-bound flag is for."""

    def __init__(self, chunks: Iterable[bytes], record: WireRecord, clock: Clock) -> None:
        self._chunks = chunks
        self._record = record
        self._clock = clock
        self._queue: queue.SimpleQueue[bytes | BaseException | _End] = queue.SimpleQueue()
        self._closing = False
        record.read_ahead = True
        threading.Thread(target=self._pump, name="pytest-latency-read-ahead", daemon=True).start()

    def _pump(self) -> None:
        record, clock = self._record, self._clock
        room = record.keep_limit
        try:
            for chunk in self._chunks:
                now = clock()
                room -= len(chunk) + READ_COST
                if room >= 0:
                    record.reads.append((now, now, chunk))
                else:
                    room = keep_read(record, room, now, now, chunk)
                self._queue.put(chunk)
            record.t_eof_ns = clock()
            self._queue.put(_End.END)
        except BaseException as exc:
            if not self._closing:  # closing early makes the blocked read fail: not an error
                note_error(record, exc, clock)
            self._queue.put(exc)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self._queue.get()
            if item is _End.END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stamp the close; the binding then closes the body being read."""
        self._closing = True
        note_closed(self._record, self._clock)


class AsyncReadAhead:
    """The async read-ahead: a task on the request's event loop fills a queue. It cannot help a
    consumer that blocks the loop."""

    def __init__(self, chunks: AsyncIterable[bytes], record: WireRecord, clock: Clock) -> None:
        self._chunks = chunks
        self._record = record
        self._clock = clock
        self._queue: asyncio.Queue[bytes | BaseException | _End] = asyncio.Queue()
        self._closing = False
        record.read_ahead = True
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        record, clock = self._record, self._clock
        room = record.keep_limit
        try:
            async for chunk in self._chunks:
                now = clock()
                room -= len(chunk) + READ_COST
                if room >= 0:
                    record.reads.append((now, now, chunk))
                else:
                    room = keep_read(record, room, now, now, chunk)
                self._queue.put_nowait(chunk)
            record.t_eof_ns = clock()
            self._queue.put_nowait(_End.END)
        except BaseException as exc:
            if not self._closing:
                note_error(record, exc, clock)
            self._queue.put_nowait(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._queue.get()
            if item is _End.END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        """Stamp the close and stop the reading task; the binding then closes the body."""
        self._closing = True
        note_closed(self._record, self._clock)
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


# ---- the event-loop lag monitor ------------------------------------------------------------------


class _Peer:
    """A captured socket the passes may ask the kernel about, and the attempts read on it;
    `every_pass` where its transport stops reading between the consumer's reads (anyio's), so
    that its data may wait in the kernel unseen by the passes however short they are; and how
    it carries its body, which says what the bytes queued on it can tell (`_queued`)."""

    __slots__ = ("every_pass", "framing", "records", "sock")

    def __init__(self, sock: socket.socket, every_pass: bool, framing: Framing) -> None:
        self.sock = sock
        self.every_pass = every_pass
        self.framing = framing
        self.records: list[WireRecord] = []


class LagMonitor:
    """The lag monitor of one event loop (see the module docstring). It must not reference its
    loop: it is the value of a WeakKeyDictionary keyed by that loop."""

    __slots__ = ("drains", "inflight", "log", "sockets")

    def __init__(self) -> None:
        self.inflight: list[WireRecord] = []
        self.log: LoopLag | None = None  # the current run's log; None while stopped
        # The current run's captured sockets by descriptor (`watch_socket`).
        self.sockets: dict[int, _Peer] = {}
        # The current run's mid-pass probes of those sockets (None where the passes are not
        # timed or the platform has no epoll).
        self.drains: Drains | None = None

    def watch(self, record: WireRecord, loop: asyncio.AbstractEventLoop) -> None:
        if self.log is None:
            self.log = LoopLag(LAG_TICK_NS)
            self.sockets = {}
            # The loop's thread's run-queue wait, read by the ticks and around waiting selects:
            # opened here, on that thread (`watch_loop` runs on the loop), closed by `_run`.
            waited = RunQueueWait.open()
            # Only where captured sockets are watched (`watch_socket`, which needs the kernel's
            # receive time stamps).
            drains = Drains.open() if _TIMESTAMPNS is not None else None
            undo = _time_passes(loop, self.log, waited, self.sockets, drains)
            if undo is None and drains is not None:
                drains.close()
            self.drains = drains if undo is not None else None
            # An empty context: the monitor outlives the test that started it and must not keep
            # that test's context variables (and what they reference) alive.
            run = self._run(self.log, waited, undo, self.drains)
            task = contextvars.Context().run(loop.create_task, run)
            # A loop run by hand and closed without cancelling its tasks leaves this one
            # pending; asyncio would log "Task was destroyed but it is pending!" when it is
            # collected. The task is the plugin's bookkeeping, not the user's work: say nothing.
            task._log_destroy_pending = False  # type: ignore[attr-defined]  # asyncio.Task's own, untyped
            if self.drains is not None:
                # Cancelled before its first step (a loop shut down at once), `_run`'s cleanup
                # never runs: the epoll's descriptor goes with the task all the same.
                task.add_done_callback(functools.partial(_close_drains, self.drains))
        record.loop_lag = self.log
        self.inflight.append(record)

    async def _run(
        self,
        log: LoopLag,
        waited: RunQueueWait,
        undo: Callable[[], None] | None,
        drains: Drains | None,
    ) -> None:
        clock = time.perf_counter_ns
        tick_s = LAG_TICK_NS / 1e9
        ticks = 0
        try:
            while True:
                before, queued, paused = clock(), waited.read(), PAUSED[0]
                await asyncio.sleep(tick_s)
                woke = clock()
                late = woke - before - LAG_TICK_NS
                # What of the lateness the loop thread spent runnable but waiting for a CPU (a
                # busy machine) and what garbage collection held it; the rest is the loop's own
                # doing (CPU work or a blocking call).
                now_queued = waited.read()
                own = None if queued is None or now_queued is None else late - (now_queued - queued)
                log.add(woke, late, own, PAUSED[0] - paused)
                ticks += 1
                if ticks % LAG_SCAN_TICKS == 0:
                    self.inflight = [r for r in self.inflight if not finished(r)]
                    if not self.inflight:
                        return
                    _prune(self.sockets, drains)
        finally:
            if undo is not None:
                undo()
            if drains is not None:
                drains.close()
            waited.close()
            # Cancelled at loop shutdown or stopped: the next call on this loop starts a new run.
            if self.log is log:
                self.log = None
                self.inflight = []
                self.sockets = {}
                self.drains = None


def _close_drains(drains: Drains, _: object) -> None:
    drains.close()


def _prune(sockets: dict[int, _Peer], drains: Drains | None = None) -> None:
    """Forget the sockets whose attempts have all ended."""
    for fd, peer in list(sockets.items()):
        peer.records = [r for r in peer.records if not finished(r)]
        if not peer.records:
            del sockets[fd]
            if drains is not None:
                drains.forget(fd)


def _peek(
    ready: list[tuple[selectors.SelectorKey, int]],
    sockets: dict[int, _Peer],
    index: int,
    long: bool,
    noted: list[tuple[WireRecord, object, int]],
    buffer: bytearray,
    polled: bool = True,
    watched_since: dict[int, int] | None = None,
    returned_before: frozenset[int] | set[int] = frozenset(),
) -> None:
    """Ask the kernel when the data queued on each captured socket in `ready` arrived (each
    one after a `long` pass, else, after a select that did not wait (`polled`), those peeked
    every pass that were not watched for reading through the pass before, or were returned
    by it (`watched_since`, each descriptor's pass of its last registration for reading, None
    for unknown; `returned_before`, the descriptors the last select returned: its reader may
    have left data behind, asyncio's taking 256 KiB at most, or failed), copying
    the queue into `buffer` without taking it, and note that and the events whole in it on the
    one attempt in flight there (`WireRecord.arrivals_ns`) as pass `index`'s; and in `noted`,
    with the reader's handle, for `_unread` to take back if the pass did not read it."""
    now = wall = 0
    for key, events in ready:
        peer = _peer_of(key, events, sockets)
        if peer is None:
            continue
        # Not watched through the last select: registered since (anyio's receive), or not known.
        fresh = watched_since is None or watched_since.get(key.fd, index) >= index
        # A socket watched through the last select, which did not return it, had no data then:
        # what it has now came since, as the passes bound it. (anyio over TLS pauses only the
        # TLS layer, and its socket stays registered: data read from it and held there is not
        # the kernel's to tell of.)
        unseen = polled and peer.every_pass and (fresh or key.fd in returned_before)
        if not (long or unseen or (not polled and _early(peer))):
            continue
        if not wall:  # the kernel's stamps are wall-clock
            clocks = _clock_pair()
            if clocks is None:
                return
            now, wall = clocks
        try:
            size, stamp = _peek_stamp(peer.sock, buffer)
        except OSError:  # closed since (the descriptor may be another socket's now), or drained
            continue
        if stamp is not None:
            record = _sole_attempt(peer)
            if record is not None:
                whole, ends = whole_events(buffer, size, peer.framing)
                record.arrival_passes.append(index)
                record.arrivals_ns.append(now - (wall - stamp))
                record.arrival_events.append(whole)
                record.arrival_ends.append(ends)
                record.arrival_fresh.append(fresh)
                noted.append((record, _reader(key), index))


def _early(peer: _Peer) -> bool:
    """Whether the one attempt on `peer` has had fewer than `FIRST_PEEKS` of its passes told of
    by the kernel (its first events' stamps are asked about however short their pass)."""
    record = _sole_attempt(peer)
    return record is not None and len(record.arrival_passes) < FIRST_PEEKS


def _stamp_arrivals(sock: socket.socket) -> bool:
    """Have the kernel stamp each arrival on `sock` from now on (SO_TIMESTAMPNS, which
    `_peek_stamp` reads); False where the platform has no such stamps or the socket refuses."""
    if _TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _clock_pair() -> tuple[int, int] | None:
    """A `perf_counter_ns` reading and the wall clock's at the same moment (the kernel's
    arrival stamps are wall-clock), or None where the two wall-clock reads around it came over
    `CLOCK_PAIR_NS` apart: a thread switch or a preemption between them would shift every
    arrival mapped with the pair by as much (review, session 19)."""
    before, now, after = time.time_ns(), time.perf_counter_ns(), time.time_ns()
    if after - before > CLOCK_PAIR_NS:
        return None
    return now, (before + after) // 2


def _peek_stamp(sock: socket.socket, buffer: bytearray, at: int = 0) -> tuple[int, int | None]:
    """Copy `sock`'s queue into `buffer` from `at` on without taking it: how many bytes it
    copied, and the kernel's wall-clock stamp (ns) of the newest of them where the socket
    stamps arrivals (SO_TIMESTAMPNS), else None. Raises OSError where the socket holds nothing
    (it does not wait) or is closed."""
    into = memoryview(buffer)[at:] if at else buffer
    size, ancillary, _, _ = sock.recvmsg_into([into], _STAMP_SPACE, _PEEK_FLAGS)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack_from("qq", data)
            return size, seconds * 1_000_000_000 + nanoseconds
    return size, None


def _peer_of(key: selectors.SelectorKey, events: int, sockets: dict[int, _Peer]) -> _Peer | None:
    """The captured socket a select returned ready for reading, or None: not captured, or
    closed since and its number another's now (review, session 20)."""
    peer = sockets.get(key.fd) if events & selectors.EVENT_READ else None
    return peer if peer is not None and peer.sock.fileno() == key.fd else None


def _sole_attempt(peer: _Peer) -> WireRecord | None:
    """The one attempt in flight on `peer`'s socket, where what the kernel says of the socket
    is its alone: not two attempts on one socket (HTTP/2), whose data the kernel cannot tell
    apart, nor one past its keep limit (it keeps no more stamps to bound)."""
    live = [r for r in peer.records if not finished(r)]
    peer.records = live
    return live[0] if len(live) == 1 and not live[0].capped else None


def _reader(key: selectors.SelectorKey) -> object:
    """The reader's handle of a selector key of asyncio's (its data: reader's, writer's)."""
    handles = getattr(key, "data", None)
    return handles[0] if isinstance(handles, tuple) else None


def _drained(
    ready: list[tuple[selectors.SelectorKey, int]],
    sockets: dict[int, _Peer],
    index: int,
    drains: Drains,
    noted: list[tuple[WireRecord, object, int]],
) -> None:
    """Note on the one attempt in flight on each captured socket in `ready` the last time a
    probe found it empty (`Drains.empty_at`): what pass `index` reads on it arrived after
    (`WireRecord.drained_ns`); and in `noted`, with the reader's handle, for `_unread` to take
    back if the pass did not read it."""
    for key, events in ready:
        peer = _peer_of(key, events, sockets)
        # Not where a layer above the socket may hold bytes back (TLS, HTTP/2: what the pass
        # reads there may be older than the socket's last empty; review, session 20).
        if peer is None or not peer.framing.in_the_clear:
            continue
        empty = drains.empty_at(key.fd)
        if empty is None:
            continue
        record = _sole_attempt(peer)
        if record is not None:
            record.drained_passes.append(index)
            record.drained_ns.append(empty)
            noted.append((record, _reader(key), index))


def _unread(noted: list[tuple[WireRecord, object, int]]) -> None:
    """Take back the arrivals of the pass just run whose socket it did not read after all: its
    reader was cancelled before it ran (anyio stops reading when its consumer, run earlier in
    the pass, finds a chunk still buffered), so the data peeked waits for a later pass, and a
    stamp mapped to this one is of older data. A reader cancelled after it ran (aiohttp pausing
    in its own callback) loses its arrival too: the passes' bound then holds, as without one.
    The same for the pass's drained times (`_drained`)."""
    for record, handle, index in noted:
        cancelled = getattr(handle, "cancelled", None)
        passes = record.arrival_passes
        if cancelled is not None and not cancelled():
            continue
        if passes and passes[-1] == index:
            for kept in record.arrival_notes:
                kept.pop()
        if record.drained_passes and record.drained_passes[-1] == index:
            record.drained_passes.pop()
            record.drained_ns.pop()
    noted.clear()


def fed_by_protocol(sock: object) -> bool:
    """Whether an async body over `sock` (`watch_socket`'s) is read off it by the loop's
    protocol callback, a pass before the consumer's task takes it (anyio's TCP streams, over TLS
    too): a TCP socket. Not a Unix socket, which anyio reads in the consumer's task, nor none
    (a test double's body, made in the task)."""
    raw = _raw_socket(sock)
    return isinstance(raw, socket.socket) and raw.family in (socket.AF_INET, socket.AF_INET6)


def _raw_socket(sock: object) -> object:
    """The socket under asyncio's TransportSocket, or `sock` itself."""
    return getattr(sock, "_sock", sock)


def _monitor_of(record: WireRecord) -> LagMonitor | None:
    """The running loop's monitor, where it logs `record`'s passes; else None."""
    log = record.loop_lag
    if log is None:
        return None
    try:
        monitor = MONITORS.get(asyncio.get_running_loop())
    except (RuntimeError, TypeError):
        return None
    return monitor if monitor is not None and monitor.log is log else None


def prober(record: WireRecord) -> Callable[[int], None] | None:
    """The probe a captured async body calls with each read's stamp (`Drains.probe`), where
    the running loop's monitor logs `record`'s passes and can probe; else None."""
    monitor = _monitor_of(record)
    return None if monitor is None or monitor.drains is None else monitor.drains.probe


def watch_socket(
    record: WireRecord, sock: object, framing: Framing, *, every_pass: bool = False
) -> None:
    """Have the passes of `record`'s loop ask the kernel when the data on `sock` (the
    attempt's connection, once its head is in: a `socket.socket` or asyncio's wrapper of one)
    arrived, where a long pass would bound its stamps loosely, or in `every_pass` that reads
    it where its transport stops reading between reads (see `_Peer`); and what whole events
    its queue held, as far as its `framing` lets the bytes tell. Nothing where the loop's
    passes are not timed or the platform has no receive time stamps."""
    raw = _raw_socket(sock)
    if _TIMESTAMPNS is None or not isinstance(raw, socket.socket):
        return
    monitor = _monitor_of(record)
    if monitor is None or not _stamp_arrivals(raw):
        return
    fd = raw.fileno()
    peer = monitor.sockets.get(fd)
    if peer is None or peer.sock is not raw:
        monitor.sockets[fd] = peer = _Peer(raw, every_pass, framing)
        if monitor.drains is not None:
            if peer is not None:
                monitor.drains.forget(fd)  # a socket closed since, its number reused
            monitor.drains.watch(fd, time.perf_counter_ns())
    # A connection kept alive carries each response in its own framing (a JSON body's length,
    # then a stream's chunks): the newest attempt's, the one a peek reads, not the first's
    # (review, session 21: a stream parsed as RAW could count a chunk's closing CRLF as an
    # event's end).
    peer.framing = framing
    peer.records.append(record)


def _time_passes(
    loop: asyncio.AbstractEventLoop,
    log: LoopLag,
    waited: RunQueueWait,
    sockets: dict[int, _Peer],
    drains: Drains | None = None,
) -> Callable[[], None] | None:
    """Log each pass of `loop` (`LoopLag.readies_ns`, `earliest_ns`, `woken_ns`: `waited` is
    its thread's run queue) by timing its selector's `select`, on the instance only (another
    loop's selector is untouched), and after a long one ask the kernel about the captured
    `sockets` it returned (`_peek`), and note when `drains` last saw each empty (`_drained`);
    returns the undo. None where the loop has no selector to time (uvloop, a proactor loop):
    the ticks alone then bound the stamps."""
    selector = getattr(loop, "_selector", None)  # asyncio.BaseSelectorEventLoop's own
    # A proactor loop keeps its IocpProactor there, whose select is not a readiness poll.
    if not isinstance(selector, selectors.BaseSelector):
        return None
    if "select" in getattr(selector, "__dict__", ()):
        return None
    select = selector.select
    readies, earliest, clock = log.readies_ns.append, log.earliest_ns.append, time.perf_counter_ns
    wokens = log.woken_ns.append
    last = [clock()]

    passes = log.readies_ns
    Ready = list[tuple[selectors.SelectorKey, int]]
    noted: list[tuple[WireRecord, object, int]] = []  # the last pass's arrivals (`_peek`)
    buffer = bytearray(PEEK_BYTES)  # this loop's peeks' (one thread's: no other writes it)
    # The pass each descriptor was last registered for reading before (`register`, `modify`):
    # anyio's transports register their socket at each receive and drop it after, so a socket
    # registered before the last pass's select was watched through it (`_peek`). One
    # registered before the passes were timed was watched through all of them: a pooled
    # connection's, which aiohttp's transport keeps registered between calls. Not known, each
    # of its peeks read as one of data that may have waited unseen, and its call's last event,
    # whole in one queue with the stream's end, was bounded from the call's read before it:
    # 20 ms, a call in 10 flagged on the connection its warm-up left (bench_ceiling, session 29).
    registered = selector.get_map()
    watched_since: dict[int, int] | None = (
        {}
        if registered is None
        else {k.fd: -1 for k in registered.values() if k.events & selectors.EVENT_READ}
    )
    returned: list[set[int]] = [set()]  # the descriptors the last select returned
    register, modify = selector.register, selector.modify

    def registering(fileobj: object, events: int, data: object = None) -> selectors.SelectorKey:
        key = register(fileobj, events, data)  # type: ignore[arg-type]  # as the selector takes
        if events & selectors.EVENT_READ and watched_since is not None:
            watched_since[key.fd] = len(passes)
        return key

    def modifying(fileobj: object, events: int, data: object = None) -> selectors.SelectorKey:
        try:
            was = selector.get_key(fileobj).events  # type: ignore[arg-type]
        except (KeyError, RuntimeError, ValueError):  # modify says why, as it would have
            was = 0
        key = modify(fileobj, events, data)  # type: ignore[arg-type]
        newly = events & selectors.EVENT_READ and not was & selectors.EVENT_READ
        if newly and watched_since is not None:
            watched_since[key.fd] = len(passes)
        return key

    def timed(timeout: float | None = None) -> Ready:
        if noted:
            _unread(noted)
        if len(passes) >= log.pass_limit:
            return select(timeout)
        polled = clock()
        waits, before, slept = False, b"", None
        ready: Ready = select(0)
        if timeout != 0 and not ready:
            # Nothing was queued: what a wait returns came during it. Polled first, for epoll
            # returns at once what is queued, and the thread's wait for the GIL after that
            # would pass for a wait (review, session 20).
            waits, polled = True, clock()
            before, slept = waited.raw(), _sleeps()
            ready = select(timeout)
        now = clock()
        # A wait (the loop had nothing to run) ends at the first arrival: what it returns
        # arrived since, give or take building its list, and the loop's thread waiting for a
        # CPU once woken (a busy machine: 5-6 ms beside a simulator serving 150 streams on 2
        # cores, invisible otherwise). A poll that did not wait returns what may have arrived
        # any time after the last pass polled (not after its select returned: its return may
        # have waited for the GIL). So may a wait in which the thread slept twice: the second
        # sleep, the GIL held by another thread once epoll returned, may have followed an
        # arrival (a stamp 7.6 ms late read back as 0.3 at most: 75 anthropic streams,
        # bench_ceiling, session 20).
        margin = PASS_SLACK_NS + PASS_EVENT_NS * len(ready)
        woke = waits and now - polled > margin
        if woke:
            start, end = waited.parse(before), waited.read() if before else None
            woken = end - start if start is not None and end is not None else 0
            # Slept once (epoll's wait); a second sleep, voluntary too, is a wait for the GIL
            # (a preemption is not voluntary, and is in `woken`). Never slept: epoll found
            # its data queued when called, and the time to its return was not a wait but
            # whatever kept the thread from it, which the counters may not show (beside
            # three CPU hogs on this 2-CPU virtual machine, session 22: waits of 96-112 ms
            # that never slept, 3.5-3.9 ms of them waiting for a CPU and under 0.1 on it,
            # bounded data 65-115 ms too late; a hypervisor's steal fits).
            now_slept = _sleeps()
            woke = slept is None or now_slept is None or now_slept - slept == 1
        # A wait that ended later than its timeout and its thread's wait for a CPU explain lost
        # time the thread never saw: what it returned may have come at any time of the wait,
        # and the wait was not the loop's doing. On a virtual machine whose hypervisor stole
        # 960 ms of CPU in a 1.5 s round, such waits had 36 of 150 aiohttp streams' events
        # 5-9.7 ms late under bounds of 2-3 ms, unflagged (bench_ceiling, session 29).
        lost = (
            woke
            and timeout is not None
            and timeout > 0
            and now - woken - margin - polled > math.ceil(timeout * 1e3) * 1_000_000 + OVERSHOOT_NS
        )
        if lost:
            # The whole wait, less its building (past its timeout, by the test above).
            first, woken, woke = polled, now - margin - polled, False
        elif woke:
            first = now - margin - woken
        else:
            first, woken = last[0], 0
        if sockets and ready:
            # A select that waited returned only data that arrived while it waited (any queued
            # before would have ended the wait at once): its bound is tight, and a transport's
            # pause in reading hid nothing. Only a poll can return data that waited unseen.
            long = now - first > PEEK_AFTER_NS
            _peek(
                ready,
                sockets,
                len(passes),
                long,
                noted,
                buffer,
                polled=not woke,
                watched_since=watched_since,
                returned_before=returned[0],
            )
        returned[0] = {key.fd for key, _ in ready} if sockets else set()
        if drains is not None:
            if sockets and ready:
                _drained(ready, sockets, len(passes), drains, noted)
            drains.selected(now)
        earliest(first)
        wokens(woken)
        readies(now)
        # What the next pass's select returns and this one's did not came to the socket after
        # this one collected its list (where it waited and woke, once woken), but the bound is
        # kept from this pass's poll: a loopback delivery the kernel defers (its softirq work
        # left to ksoftirqd, on a busy or stolen CPU) puts data in the socket milliseconds after
        # it was sent. Bounded from the wake instead, 52 of 200 aiohttp streams had events
        # 5.2-9.5 ms late against their sending under bounds of 1.2-4.7 ms, unflagged, in a
        # round with 540 ms of steal (bench_ceiling, session 29). From the poll, wider by the
        # wait, no late call went unflagged in the runs before and after, which had less steal.
        last[0] = polled
        return ready

    try:
        selector.select = timed  # type: ignore[method-assign]  # on the instance, undone below
        if {"register", "modify"} & set(vars(selector)):
            # Another tool's wrappers: the passes are timed, but registrations are not known,
            # so sockets peeked every pass are peeked on every poll.
            watched_since = None
        else:
            selector.register = registering  # type: ignore[method-assign]
            selector.modify = modifying  # type: ignore[method-assign]
    except AttributeError:  # a selector with __slots__
        return None

    def undo() -> None:
        own = vars(selector)
        for name, wrapper in (("select", timed), ("register", registering), ("modify", modifying)):
            if own.get(name) is wrapper:
                delattr(selector, name)

    return undo


MONITORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LagMonitor] = (
    weakref.WeakKeyDictionary()
)


def watch_loop(record: WireRecord, clock: Clock) -> None:
    """Have the running loop's lag monitor cover `record` while it is in flight."""
    # The lag log is stamped with perf_counter_ns: a record on another clock cannot be compared.
    if clock is not time.perf_counter_ns:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on an asyncio loop (trio, or a sync caller of an async transport)
        return
    if loop.is_closed():
        return
    try:
        monitor = MONITORS.get(loop)
        if monitor is None:
            monitor = MONITORS[loop] = LagMonitor()
    except TypeError:  # a loop implementation that cannot be weakly referenced
        return
    monitor.watch(record, loop)
