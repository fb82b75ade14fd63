"""The wire record: what capture stamps for one HTTP attempt, and nothing more.

Owns the `WireRecord` data type shared by `capture` (which fills it on the hot path) and `metrics`
(which parses it after the call). Holding only raw bytes and clock readings keeps the hot path to
two clock reads and an append per chunk (and a read of the scheduler's counter around the
consumer's long absences); every interpretation (SSE, JSON, usage) happens later, in `metrics`.
Stdlib only; imports nothing from the package.

Request headers are never stored (they carry API keys). The request body is held in memory so
`metrics` can read the model and the stream flag; outputs never contain it (`metrics` keeps
sizes and hashes, and text only when `text_limit` asks for it).

Also owns what one record may keep (docs/metrics.md, "What a call keeps"): `KEEP_LIMIT` bytes, each
read charged its body bytes plus `READ_COST` for its stamps, so a hostile or endless body costs a
bounded amount of memory however it is cut (each note of a consumer's absence before a read,
`NOTE_COST`, is charged too). Past the limit capture keeps no more bytes and no more stamps, but
counts them (`dropped_bytes`, `dropped_reads`) and keeps the last arrival, so the call is flagged
`capped` with its timing up to the limit intact. `DECODED_LIMIT` bounds the decoded body the same
way (a gzip bomb), where `metrics` inflates it, and `EVENT_LIMIT` the SSE events it walks.

Also owns the consumer-bound detector's two thresholds (`WAIT_NS`, `AWAY_NS`), which capture
reads to know when to note the scheduler's run-queue counter, and `LoopLag`, the event-loop lag
log a capture-side monitor fills while async calls are in flight on a loop, which the records of
those calls share (docs/metrics.md, "Client saturation").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

# What one record keeps of a body: the reads' bytes plus READ_COST per read (what a read's entry
# costs in memory besides its bytes: a 3-tuple 64 B, two stamps 32 B each, a bytes header 33 B, a
# list slot 8 B on CPython 3.11), 64 MiB in all. A 128k-token OpenAI chat stream (~230 B an event,
# one event a read) takes ~50 MiB; the limit bounds the reads kept to 64 MiB / 170 B = 394,758.
KEEP_LIMIT = 64 * 1024 * 1024
READ_COST = 170
# What a note of the consumer's absence costs besides (`read_cpu`, `queued`, `paused`, `ready`:
# a 2-tuple 56 B, two ints 28-32 B each, a list slot 8 B), charged to the same limit: a consumer
# away before every read (a test body doing 2 ms of work a chunk) adds up to four notes a read, and
# past the limit they were kept for reads that were not. Only kept reads are noted.
NOTE_COST = 130
# The most a compressed body is inflated to, per call (`metrics`): a gzip bomb stops here.
DECODED_LIMIT = 64 * 1024 * 1024
# The consumer-bound detector's thresholds (sdk-findings §3.5), here because capture reads them
# too: a read that returned in under WAIT_NS after the consumer had been away for over AWAY_NS
# found its data already buffered, so its stamp is when the test asked, not when the server
# sent. A buffered read still costs 0.12-0.2 ms in httpcore+h11, so a sync read's wait is its
# wall time less its own CPU time (`WireRecord.read_cpu`). Capture reads the scheduler's
# run-queue counter around such absences (`WireRecord.queued`).
WAIT_NS = 300_000
AWAY_NS = 1_000_000
# A sync consumer away this long before a read has its socket asked what it holds (`ready`, and
# the kernel's arrival time of a short queue, `asked_arrivals`; an ioctl, 1.3 us, and where
# data is there a peek and its count, ~10 us): litellm's sync stream parses each event of a
# 2 ms-a-token stream in just under AWAY_NS, stays 10-26 ms behind it, and no read of that
# stretch was noted (session 24). A prompt SDK consumer's own work between reads (16-105 us,
# docs/performance.md §2) does not reach it.
ASK_NS = 250_000
# What a read may take on the wire besides its body's bytes, at most: a chunk's size line and
# line ends (HTTP/1.1 chunked, up to 20 bytes; chunk extensions longer than 44 bytes are not
# allowed for). `metrics` counts a read as come by an earlier ask (`WireRecord.ready`, HTTP/1 in
# the clear) only where its bytes and this fit in what the socket held then.
READY_SLACK_BYTES = 64
# The most SSE events `metrics` walks per call (15-30 us each on a loaded 2-core VM: JSON,
# classification, usage): 64 MiB of 47-byte events (1.4 M) took 22 s; at the limit 6-8 s. Twice
# the events of a 128k-token stream.
EVENT_LIMIT = 262_144

# What a peek says of the events whole in a socket's queue (`WireRecord.arrival_events`) where it
# cannot count them: nothing known, or (TLS) only that the queue was one whole record.
EVENTS_UNKNOWN = -1
ONE_RECORD = -2


class AskedArrival(NamedTuple):
    """What the kernel said of a sync consumer's socket when it asked for a read after an
    absence and the socket held bytes not yet read (`WireRecord.asked_arrivals`)."""

    read: int  # the index of the read asked for
    # The kernel's time stamp of the newest data queued (SO_TIMESTAMPNS), as a
    # `perf_counter_ns` reading.
    arrived_ns: int
    # The SSE events whole in the queue (`capture._queued.whole_events`; EVENTS_UNKNOWN where
    # its bytes say nothing), and whether it ended at one's end.
    events: int
    ends: bool


def event_ends(data: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """How many SSE events end in `data[start:end]` (its empty lines): the one count that
    capture's peek at a socket's queue and `metrics`' reading of the body both make, so that
    they agree. Only "\n\n" and "\r\n\r\n": a peek that finds another line end ("\r" alone)
    counts nothing."""
    return data.count(b"\n\n", start, end) + data.count(b"\r\n\r\n", start, end)


def events_ended(chunks: Iterable[bytes]) -> Iterator[int]:
    """How many SSE events end in each of a body's `chunks`, in order (`event_ends`): an end
    split across two chunks is the later one's."""
    tail = b""
    for chunk in chunks:
        joined = tail + chunk
        yield event_ends(joined) - event_ends(tail)
        tail = joined[-3:]


# The most loop passes one lag log keeps (24 B each: 48 MB). A monitoring run lasts while calls
# are in flight on the loop, so a soak test streaming without a pause for an hour at ~2,000
# passes a second would pass it; past it, the later stamps have no bound (the ticks still run).
PASS_LIMIT = 2_000_000


class LoopLag:
    """How late an event loop woke up from short sleeps while captured calls were in flight.

    One log per monitoring run (from the first call in flight on a loop until none is): parallel
    arrays of wake-up stamps (`time.perf_counter_ns()`, ascending) and how late each wake-up was
    (ns past the requested sleep). Two 8-byte integers per wake-up, so capture's 10 ms tick costs
    1.6 kB per second of monitoring; the log lives as long as the records that share it.
    """

    __slots__ = (
        "earliest_ns",
        "lates_ns",
        "owns_ns",
        "pass_limit",
        "paused_ns",
        "readies_ns",
        "tick_ns",
        "wakes_ns",
        "woken_ns",
    )

    def __init__(self, tick_ns: int) -> None:
        self.tick_ns = tick_ns
        self.wakes_ns: array[int] = array("q")
        self.lates_ns: array[int] = array("q")
        # How much of each lateness was the loop's own doing (CPU work, a blocking call): the
        # lateness less the time its thread waited, runnable, for a CPU (a busy machine, which
        # no change to the test's code would cure; issue #14).
        self.owns_ns: array[int] = array("q")
        # How much of each lateness garbage collection held the process (`gc_pauses`): neither
        # the loop's own code nor the machine.
        self.paused_ns: array[int] = array("q")
        # Each pass of the loop, where its selector can be timed (asyncio's selector loops):
        # when its select returned (the pass's callbacks run after it), and the earliest the
        # data those callbacks read can have arrived. A busy loop polls without waiting, and
        # what its select returns may have arrived any time after the pass before polled; an
        # idle one waits, and the kernel ends the wait at the first arrival. `metrics` bounds
        # each stamp's lateness with them. Three 8-byte integers a pass: at 200 streams, about
        # 5,000 passes a second, 120 kB a second of monitoring.
        self.readies_ns: array[int] = array("q")
        self.earliest_ns: array[int] = array("q")
        # And how much of that (a waiting select's) the loop's thread, woken by the arrival,
        # then waited for a CPU: the machine's part of a late stamp, not the client's.
        self.woken_ns: array[int] = array("q")
        # The most passes one log keeps (`PASS_LIMIT`); past it, no stamp has a bound.
        self.pass_limit = PASS_LIMIT

    def add(
        self, woke_ns: int, late_ns: int, own_ns: int | None = None, paused_ns: int = 0
    ) -> None:
        """A wake-up `late_ns` past its time, `paused_ns` of it garbage collection and `own_ns`
        (None: all the rest) the loop's own work."""
        paused = max(min(paused_ns, late_ns), 0)
        rest = late_ns - paused
        self.wakes_ns.append(woke_ns)
        self.lates_ns.append(late_ns)
        self.owns_ns.append(rest if own_ns is None else max(min(own_ns - paused, rest), 0))
        self.paused_ns.append(paused)

    def __len__(self) -> int:
        return len(self.wakes_ns)


@dataclass(slots=True, eq=False)
class WireRecord:
    """One HTTP attempt as seen at the transport. Times are `time.perf_counter_ns()` readings."""

    method: str
    url: str  # scheme://host[:port]/path, query string dropped
    request_body: bytes
    t_start_ns: int
    # x-stainless-retry-count: 0 for the first attempt, n for the n-th SDK retry.
    attempt: int = 0
    # Set by whoever registers the record (the plugin's attribution); capture leaves it alone.
    owner: str | None = None
    t_headers_ns: int | None = None
    status: int | None = None
    content_type: str = ""
    content_encoding: str = ""
    # (asked_ns, arrived_ns, data) per read: asked = when the consumer asked for the next chunk,
    # arrived = when the transport handed it over. arrived − asked is the wait; asked − previous
    # arrived is the time the consumer was away (the consumer-bound detector needs both).
    reads: list[tuple[int, int, bytes]] = field(default_factory=list)
    t_eof_ns: int | None = None  # the body was read to its end
    t_closed_ns: int | None = None
    error: str | None = None  # exception type name, e.g. "ReadTimeout", "RemoteProtocolError"
    # The caller cancelled the attempt (asyncio's CancelledError while it waited for the head or
    # a read): a hedge's loser, the caller's own asyncio.timeout. It stopped there, as a stream
    # the caller closed early does; it did not fail (`error` stays None).
    cancelled: bool = False
    error_message: str | None = None
    # The body was already in memory when the transport returned (e.g. a mock built with content=):
    # the reads carry no arrival times worth anything.
    prefetched: bool = False
    # The body was read as it arrived (the read-ahead option), not when the consumer asked:
    # asked == arrived in every read, and the consumer-bound detector does not apply.
    read_ahead: bool = False
    # The lag log of the event loop this (async) attempt ran on; None for sync calls, for a
    # transport with an injected clock, and where no loop monitor could run.
    loop_lag: LoopLag | None = None
    # How many passes of that loop after the pass whose callback read a chunk off the socket
    # the chunk is stamped: 0 where capture stamps inside that callback (aiohttp's reader is
    # fed there), 1 where it stamps in the consumer's task, which the callback wakes for the
    # next pass (httpx2/httpx over anyio or asyncio streams, the read-ahead task).
    stamp_passes: int = 1
    # When the kernel says the data read in some of those passes arrived: (the pass's index in
    # `loop_lag`, the arrival as a `perf_counter_ns` reading), one entry per pass that a long
    # busy pass (`capture`'s PEEK_AFTER_NS) made worth asking about, or every polling pass for
    # anyio's transports (they stop reading between reads), for this attempt's socket alone (none
    # while another attempt shares it: HTTP/2). The peek copies the queue without taking it,
    # and the time stamp (SO_TIMESTAMPNS) is that of the newest data it copied. With it, what
    # the queue held (`capture._queued`): `arrival_events`, the SSE events whole in it
    # (EVENTS_UNKNOWN where its bytes say nothing: HTTP/2, a coded body, a queue past the
    # peek's buffer or not at a chunk's start; ONE_RECORD for TLS that was one whole record),
    # and `arrival_ends`, 1 where it ended at an event's end. `metrics` matches those with the
    # events the pass read. 21 B an entry, at most one a pass in which the attempt's socket was
    # ready, none once the record is capped: about one a kept read at most (8 MB at the keep
    # limit's 394,758 reads).
    arrival_passes: array[int] = field(default_factory=lambda: array("q"))
    arrivals_ns: array[int] = field(default_factory=lambda: array("q"))
    arrival_events: array[int] = field(default_factory=lambda: array("i"))
    arrival_ends: array[int] = field(default_factory=lambda: array("b"))
    # And 1 where the socket was not watched for reading through the pass before (registered
    # since, or its registrations not known): its data may have waited unseen, older than the
    # pass's earliest (anyio stops reading between receives).
    arrival_fresh: array[int] = field(default_factory=lambda: array("b"))
    # (the pass's index in `loop_lag`, a `perf_counter_ns` reading) for passes that read this
    # attempt's socket after a long pass before: the last time in that pass a probe of the
    # loop's epoll (`capture`'s PROBE_EVERY_NS) found it registered for reading and holding
    # nothing, so the data the pass read arrived after it. Same rules as the arrivals: one
    # attempt alone on the socket, none once capped, taken back if the pass did not read it.
    drained_passes: array[int] = field(default_factory=lambda: array("q"))
    drained_ns: array[int] = field(default_factory=lambda: array("q"))
    # How many characters of prompt and output text `metrics` may keep for this attempt (the
    # plugin's --latency-capture-text). 0, the default, keeps none: hashes and sizes only.
    text_limit: int = 0
    # What capture may keep of the body (see KEEP_LIMIT: bytes plus READ_COST a read), and what it
    # did not keep past that: bytes (the rest of the read that crossed the limit, then every later
    # read's), reads not kept at all, and the arrival stamp of the last of them.
    keep_limit: int = KEEP_LIMIT
    dropped_bytes: int = 0
    dropped_reads: int = 0
    t_dropped_ns: int | None = None
    # When the consumer last asked for a chunk (a read later than the last arrival is in flight),
    # and, for an attempt still reading when its test's body ended, that moment: the call is
    # then measured up to it and recorded as cut off by the test's end.
    t_asked_ns: int | None = None
    t_cut_ns: int | None = None
    # (read index, ns) for each read the consumer asked for after being away over AWAY_NS (a
    # sync consumer: ASK_NS, and a sync read that waited for its data where this is 1 ms or
    # more): how long the consuming thread waited, runnable, for a CPU (Linux
    # schedstat run_delay) from the last reading before the absence (at the headers, or at a
    # chunk that came over WAIT_NS after the one before) to that read's arrival; a wait between
    # a read's arrival stamp and the reading after it goes with the next read's note, the absence
    # it fell in (`capture.note_queued`). Empty where the kernel does not expose it, and for
    # read-ahead.
    queued: list[tuple[int, int]] = field(default_factory=list)
    # (read index, ns) for each read a sync consumer asked for after being away over AWAY_NS:
    # the consuming thread's CPU time inside that read (`time.thread_time_ns`). A buffered read
    # is CPU work through the HTTP stack, 0.12-0.2 ms alone but 0.3-0.5 ms in a large process
    # (the plugin's own suite) and more under a tracer such as coverage: over WAIT_NS, so on
    # wall time alone a consumer that was behind looked like one that waited for its data.
    # Wall time less this is the read's wait. Not for async reads: an await runs other tasks
    # on the same thread, whose CPU time is not the read's. Not the other threads': one running
    # beside a read that waits in recv, without the GIL, would erase the wait.
    read_cpu: list[tuple[int, int]] = field(default_factory=list)
    # (read index, bytes) for each read a sync consumer asked for after being away over ASK_NS
    # while its socket held bytes not yet read (FIONREAD at the ask; HTTP/1 in the clear, whose
    # bytes are this body's alone and as written: TLS's are not readable until a whole record
    # is in): those bytes had come, and the reads from that one on whose bytes fit
    # in them had come before they were asked for, however long each took (`metrics`: each
    # read's bytes plus `READY_SLACK_BYTES` for what chunked framing adds on the wire). On wall
    # time, a read held off the GIL by another thread looked like one that waited for its data:
    # litellm's first sync stream, whose logging threads held a read of an event buffered 330
    # ms earlier for 383 us (the first content's stamp went 328 ms late and unflagged, CI).
    ready: list[tuple[int, int]] = field(default_factory=list)
    # And for such an ask, where the socket stamps arrivals (Linux): when the newest of those
    # bytes arrived and what whole events they held. `metrics` takes a buffered read's events
    # that were whole there as come by that time, not when the consumer asked (litellm's sync
    # stream parses its role event for 2-3 ms, 5-15 ms beside two CPU hogs, while the first
    # content waits in the socket: its ttft was that much late and unflagged, session 23). At
    # most one per `ready` note.
    asked_arrivals: list[AskedArrival] = field(default_factory=list)
    # (read index, ns) for each read the consumer asked for after being away over AWAY_NS (a
    # sync consumer: ASK_NS): how long garbage collection held the process (`gc_pauses.PAUSED`)
    # over the same span as `queued`. A collection stops every thread: time the consumer could
    # not have read in.
    paused: list[tuple[int, int]] = field(default_factory=list)

    @property
    def reading(self) -> bool:
        """A read is in flight: the consumer asked and nothing has arrived since."""
        asked = self.t_asked_ns
        if asked is None or self.t_eof_ns is not None or self.error is not None:
            return False
        last = self.reads[-1][1] if self.reads else self.t_headers_ns
        return last is None or asked > last

    @property
    def complete(self) -> bool:
        return self.t_eof_ns is not None and self.error is None

    @property
    def capped(self) -> bool:
        """Capture stopped keeping the body at `keep_limit`."""
        return self.dropped_reads > 0 or self.dropped_bytes > 0

    @property
    def body(self) -> bytes:
        return b"".join(chunk for _, _, chunk in self.reads)

    @property
    def arrival_notes(self) -> tuple[array[int], ...]:
        """What each peek noted, one entry each in every array, in step: its pass, the
        arrival, the events whole, whether at an event's end, whether fresh."""
        return (
            self.arrival_passes,
            self.arrivals_ns,
            self.arrival_events,
            self.arrival_ends,
            self.arrival_fresh,
        )
