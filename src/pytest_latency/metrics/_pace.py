"""How a sync or async consumer's pace shows in its reads' stamps.

Owns the consumer-bound detector (`consumer_pace`: which content chunks were found buffered after
the consumer's own absence, garbage collection's, or its thread's wait for a CPU, and how late
their stamps were by estimate), `behind`: the most a content event's time may be late where
the consumer read it after it came, counted from the last time the call's reads pin an arrival
to (a read that waited for its data, or the kernel's arrival time at an ask), and `wake_delay`:
the most a read that waited for its data may have been stamped late by its thread's wait for a
CPU. `_call` turns them into the consumer_bound, gc_paused and cpu_starved flags.

Pure; may import only the stdlib and `pytest_latency.wire`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_latency.wire import READY_SLACK_BYTES, WAIT_NS, WireRecord

# Consumer-bound detector (sdk-findings §3.5): a read that waited under `wire.WAIT_NS` (0.3 ms; its
# wall time less its own CPU time through the HTTP stack, `WireRecord.read_cpu`) after the consumer
# had been away for over `wire.AWAY_NS` (1 ms) found its data already buffered, so its stamp is when
# the test asked, not when the server sent. The away time counts less what the consuming thread
# spent waiting for a CPU (`WireRecord.queued`): that absence is a busy machine's (`cpu_starved`),
# not the test body's.
# A chunk counts when the consumer's absence before it was over BOUND_AWAY_NS (2 ms): capture
# reads its counters after any absence over AWAY_NS, but a stamp held back less than 2 ms is
# within what the plugin promises of any call, and beside two CPU hogs the SDK's own work on one
# chunk (parsing in a cache a hog has just used) came out just over 1 ms now and then, its next
# chunk arrived meanwhile, and a `for _ in stream: pass` loop was flagged (issue #14, item 12).
BOUND_AWAY_NS = 2_000_000
# A call is consumer-bound when more than 10 % of its content chunks (and at least 2) are: one or
# two flags are usually the tail events buffered behind the last token.
CONSUMER_BOUND_FRACTION = 0.10
CONSUMER_BOUND_MIN = 2
# ... and when those chunks' stamps were held back by more than 10 ms, twice the accuracy target
# (p99 5 ms), by the estimate of `_held_back`: a buffered chunk's true arrival lies between the
# arrivals of the reads around it that waited for their data (those stamps are arrivals), spread
# evenly. On this project's 2-core VM the SDK's own work on one chunk, 0.5 ms of the thread's CPU
# at the median, takes 4-6 ms now and then (85 of 2,850 chunks; a pure CPU loop after a short
# sleep takes 10x its median 1 time in 100): the next chunks of a 4.5 ms-a-chunk stream are found
# buffered, 2-5 of 16 counted, and 6 calls in 150 were flagged, though the consumer was back in
# step a few chunks on and the estimate put their stamps 0-7.4 ms late (session 7). A consumer
# that stays behind to the end of the stream is judged on the stream's pace, or on the most it
# can have been held back (the time since the last arrival): one sleeping 25 ms a chunk, or
# doing 2 ms of work on a 0.3 ms one, is over the limit within a few chunks.
HOLD_BACK_NS = 10_000_000
# The reads `_held_back` takes for arrivals: those that waited over 1 ms for their data. A
# buffered async read can take longer than WAIT_NS, the loop running other tasks in its await
# (the lag monitor's, the test's): a consumer sleeping 12 ms a chunk on an instant stream had
# such reads 12 ms apart, taken for the stream's pace, and went unflagged (CI, session 7).
ARRIVAL_WAIT_NS = 1_000_000  # less the read's wait for a CPU and GC pauses: `_consumer_pace`
# Before the first content event, absence adds up: its stamp is ttft. The first call of a
# process through `responses.stream()` spends ~400 ms building the SDK's pydantic models after
# `response.created`, and the delta that had arrived meanwhile was stamped when the SDK asked
# (ttft 416 ms against 16 ms; issue #14, item 2). Longer than a scheduler's delay on a busy box.
FIRST_CONTENT_AWAY_NS = 20_000_000


@dataclass(slots=True)
class Pace:
    """What the consumer-bound detector found in a call's reads: the content chunks found
    buffered after an absence that was the consumer's own (`bound_chunks`), those whose absence
    was long enough only with garbage collection's pause in it (`paused_chunks`, with that
    pause), those whose absence was mostly its thread waiting for a CPU (`starved_chunks`, with
    their away and queued time), and the away time before the first content event: the
    consumer's own, the collector's, and all of it."""

    bound_chunks: int = 0
    paused_chunks: int = 0
    paused_ns: int = 0
    starved_chunks: int = 0
    starved_away_ns: int = 0
    starved_queued_ns: int = 0
    first_own_ns: int = 0
    first_paused_ns: int = 0
    first_away_ns: int = 0
    # The most any chunk of each kind was held back (`_held_back`; None for none such).
    bound_held_ns: float | None = None
    paused_held_ns: float | None = None
    starved_held_ns: float | None = None

    def bound(self, content_chunks: int, *, paused: bool = False, queued: bool = False) -> bool:
        """Whether the consumer held the call's stamps back: counting only its own absences,
        or with garbage collection's pauses (`paused`), or every absence, the machine's
        included (`queued`)."""
        chunks = self.bound_chunks
        away = self.first_own_ns
        held = [self.bound_held_ns]
        if paused or queued:
            chunks += self.paused_chunks
            away += self.first_paused_ns
            held.append(self.paused_held_ns)
        if queued:
            chunks += self.starved_chunks
            away = self.first_away_ns
            held.append(self.starved_held_ns)
        late = max((h for h in held if h is not None), default=0.0) > HOLD_BACK_NS
        return (
            chunks >= CONSUMER_BOUND_MIN
            and chunks > CONSUMER_BOUND_FRACTION * content_chunks
            and late
        ) or away > FIRST_CONTENT_AWAY_NS


class Reads:
    """A call's reads as the consumer's pace reads them, built once a call and read by
    `consumer_pace`, `behind` and `wake_delay`: how long each waited for its data, how long the
    consumer was away before it, and whose doing that absence was."""

    def __init__(self, record: WireRecord) -> None:
        self.record = record
        self.reads = record.reads
        self.headers = record.t_headers_ns or 0
        self.queued = dict(record.queued)
        self.cpu = dict(record.read_cpu)
        self.collected = dict(record.paused)
        # Each read's first ask by whose socket's word its bytes had come, or -1.
        self.origin = _come_since(record)

    def waited(self, index: int) -> int:
        """How long read `index` waited for its data: its wall time less its own CPU time; none
        where its bytes had come before it was asked for (`_come_since`)."""
        if self.origin[index] >= 0:
            return 0
        asked, arrived, _ = self.reads[index]
        return arrived - asked - self.cpu.get(index, 0)

    def absence(self, index: int) -> tuple[int, int, int]:
        """How long the consumer was away before read `index`; how much of that garbage
        collection held the process; and how much was the consumer's own, less both that and
        the wait for a CPU (neither can exceed the absence)."""
        previous = self.reads[index - 1][1] if index else self.headers
        away = max(self.reads[index][0] - previous, 0)
        own = away - min(self.queued.get(index, 0), away)
        paused = min(self.collected.get(index, 0), own)
        return away, paused, own - paused

    def waited_for_data(self, index: int) -> int:
        """`waited`, less what the reading's span spent waiting for a CPU or held by garbage
        collection (over-subtracted where those fell in the absence before: fewer arrivals,
        never a false one; beside two CPU hogs a read preempted mid-way waited milliseconds
        for its thread, not its data, and 2 ms-a-chunk work went unflagged, CI session 7)."""
        return self.waited(index) - self.queued.get(index, 0) - self.collected.get(index, 0)


def consumer_pace(on: Reads, reads: list[int]) -> Pace:
    """What the consumer-bound detector finds in the call's reads, `reads` being those that
    brought content (in order)."""
    pace = Pace()
    record = on.record
    if record.t_headers_ns is None:
        return pace
    waited, absence = on.waited, on.absence
    held_back = _held_back(record, reads, on.waited_for_data)

    # The content reads whose bytes had all come by each ask (the socket's word there): one
    # absence buffered them all, and their stamps are held back by it too.
    buffered_by: dict[int, list[int]] = {}
    for index in reads:
        ask = on.origin[index] if 0 <= index < len(on.origin) else -1
        if ask >= 0 and ask != index:
            buffered_by.setdefault(ask, []).append(index)
    counted: set[int] = set()
    for index in reads:
        if waited(index) >= WAIT_NS:
            continue
        away, paused, own = absence(index)
        if away <= BOUND_AWAY_NS:
            continue
        # This chunk and those queued behind it at its ask: a 12 ms preemption of a consumer
        # on a 1 ms stream left 12 events queued, shown up to 11 ms late at the newest one's
        # arrival, and counted as one starved chunk the call was not flagged (session 27).
        # Each chunk counts once, for the first absence that held it back.
        chunks = [c for c in (index, *buffered_by.get(index, ())) if c not in counted]
        if not chunks:
            continue
        counted.update(chunks)
        held = max(held_back(chunk) for chunk in chunks)
        if own > BOUND_AWAY_NS:
            pace.bound_chunks += len(chunks)
            pace.bound_held_ns = _most(pace.bound_held_ns, held)
        elif own + paused > BOUND_AWAY_NS:
            pace.paused_chunks += len(chunks)
            pace.paused_ns += paused
            pace.paused_held_ns = _most(pace.paused_held_ns, held)
        else:
            pace.starved_chunks += len(chunks)
            pace.starved_away_ns += away
            pace.starved_queued_ns += away - own - paused
            pace.starved_held_ns = _most(pace.starved_held_ns, held)
    # Before the first content event, absence adds up: its stamp is ttft. Had the event not been
    # there yet, the read that brought it would have waited for it and stamped its arrival.
    if reads:
        first = reads[0]
        if waited(first) < WAIT_NS:
            for index in range(first + 1):
                away, paused, own = absence(index)
                pace.first_away_ns += away
                pace.first_paused_ns += paused
                pace.first_own_ns += own
    return pace


def _most(so_far: float | None, held: float) -> float:
    return held if so_far is None else max(so_far, held)


@dataclass(frozen=True, slots=True)
class Behind:
    """How late one of a sync call's content times is at least (`behind`), and over the span
    from the ask that found its data queued to its read: the consumer's absences less the rest
    (its own), garbage collection's pauses and its thread's waits for a CPU (ns), and the
    content chunks read."""

    late_ns: int
    own_ns: int
    paused_ns: int
    queued_ns: int
    chunks: int


def behind(on: Reads, shown: Sequence[int], event_reads: Sequence[int]) -> Behind:
    """The least a content event's time (`shown`, the event's read in `event_reads`) is late by
    the socket's word: where an ask found bytes unread (`WireRecord.ready`), the reads from it
    whose bytes fit in them had come by that ask, so an event of such a read shown later than
    the ask is at least that late (0 where none is).

    litellm's sync stream parses each event of a 2 ms-a-token stream in just under 1 ms and
    falls 10-26 ms behind it, each absence too short for the detector (session 24). A lower
    bound, so never a false alarm; an upper bound counted from the last arrival the reads
    pinned flagged prompt consumers whose reads waited under `WAIT_NS` (48.7 ms said, 1.24
    true; review, session 24). What it cannot see: an event read back by the kernel to when the
    newest of several queued with it came (`_asked`) is shown that late, and nothing bounds it
    from below."""
    record, origin = on.record, on.origin
    worst: tuple[int, int, int] | None = None  # (late, the ask's read, the event's read)
    for t, read in zip(shown, event_reads, strict=True):
        ask = origin[read] if 0 <= read < len(origin) else -1
        if ask < 0:
            continue
        late = t - record.reads[ask][0]
        if late > 0 and (worst is None or late > worst[0]):
            worst = (late, ask, read)
    if worst is None:
        return Behind(0, 0, 0, 0, 0)
    late, first, last = worst
    # Whose doing, over the span from the absence that ended at that ask to the read: a note's
    # run-queue wait runs from the counter's last reading, taken only at a read that came over
    # `WAIT_NS` after the one before, so it holds the waits of the short absences and reads
    # since too; capped at its own absence, as the detector takes it, they were lost (a pass
    # loop on a third of a CPU came out its own). The first note after the span holds its tail's
    # (a wait between a read's stamp and the counter's reading after it is the next note's:
    # `capture.note_queued`).
    away = sum(on.absence(index)[0] for index in range(first, last + 1))
    queued = _noted_over(record.queued, first - 1, last)
    paused = _noted_over(record.paused, first - 1, last)
    own = max(away - queued - paused, 0)
    chunks = len({read for read in event_reads if first <= read <= last})
    return Behind(late, own, paused, queued, chunks)


def wake_delay(on: Reads, content_reads: Sequence[int]) -> int:
    """The least a sync content read that waited for its data was stamped late for its thread's
    wait for a CPU (ns): the run-queue wait noted at that read (from the counter's last reading
    to its arrival, `WireRecord.queued`) less the absence before the read (the part that can
    have been before the ask), no more than the read's own span. A thread woken by its data on
    a busy machine is runnable, not running, until a CPU is free: the openai and anthropic
    SDKs' prompt sync reads came 5-8 ms late beside a running test suite, and an in-process
    simulator's beside two CPU hogs 6-12 ms, none flagged (session 24). 0 where no such read
    was noted. A read found buffered is `behind`'s."""
    worst = 0
    for index in set(content_reads):
        ns = on.queued.get(index)
        if ns is None or on.waited(index) < WAIT_NS:
            continue
        asked, arrived, _ = on.reads[index]
        away = on.absence(index)[0]
        worst = max(worst, min(ns - away, arrived - asked))
    return worst


def _noted_over(notes: list[tuple[int, int]], first: int, last: int) -> int:
    """The sum of the (read index, ns) `notes` in reads first+1..last, and of the first after."""
    total, tail = 0, None
    for index, ns in notes:
        if first < index <= last:
            total += ns
        elif index > last and (tail is None or index < tail[0]):
            tail = (index, ns)
    return total + (tail[1] if tail is not None else 0)


def _come_since(record: WireRecord) -> list[int]:
    """For each read, the first ask by whose socket's word its bytes had come (`WireRecord.ready`),
    or -1: from each read whose ask found bytes unread, it and the reads after it whose bytes,
    each with `READY_SLACK_BYTES` for the wire's framing, fit in them."""
    reads = record.reads
    origin = [-1] * len(reads)
    if not record.ready:
        return origin
    ends = [0, *itertools.accumulate(len(read[2]) + READY_SLACK_BYTES for read in reads)]
    filled = -1  # the reads up to here have their first ask: each is set once
    for index, unread in sorted(record.ready):
        if not 0 <= index < len(reads):
            continue
        # The last read whose bytes end within `unread` of where read `index`'s begin.
        last = bisect.bisect_right(ends, ends[index] + unread) - 2
        for j in range(max(index, filled + 1), last + 1):
            origin[j] = index
        filled = max(filled, last)
    return origin


def _held_back(
    record: WireRecord, content: list[int], waited: Callable[[int], int]
) -> Callable[[int], float]:
    """How late the stamp of a buffered read was, estimated (ns): the reads
    that waited for their data (over `ARRIVAL_WAIT_NS`) were stamped on arrival, and a buffered
    read's data arrived after the last of them before it (L) and before the first after it (R),
    in order. Spread evenly between the two, read j's data came at a_L + (j - L) / (R - L) *
    (a_R - a_L). With no read that waited after it, the call's own pace stands in for R: the
    median gap between two consecutive content reads that both waited, past the first (its gap
    is ttft's); for a consumer behind to the end with no such pair, the most it can have been:
    the time since a_L (a stream sent faster than the SDK parses it, with a stall or two in the
    parsing, came out 7.6 ms)."""
    reads = record.reads
    headers = record.t_headers_ns or 0
    arrivals = [read[1] for read in reads]
    on_time = [index for index in range(len(reads)) if waited(index) >= ARRIVAL_WAIT_NS]
    is_on_time = set(on_time)
    gaps = sorted(
        arrivals[b] - arrivals[a]
        for a, b in itertools.pairwise(content[1:])
        if b == a + 1 and a in is_on_time and b in is_on_time
    )
    step = gaps[len(gaps) // 2] if gaps else None

    def held(index: int) -> float:
        at = bisect.bisect_left(on_time, index)
        left = on_time[at - 1] if at else -1
        left_arrival = arrivals[left] if left >= 0 else headers
        if at < len(on_time):
            right = on_time[at]
            share = (index - left) / (right - left)
            arrival = left_arrival + share * (arrivals[right] - left_arrival)
        elif step is not None:
            arrival = left_arrival + (index - left) * step
        else:
            # Its data came after L's at least: the time since is the most it can have been held.
            arrival = left_arrival
        return max(arrivals[index] - arrival, 0.0)

    return held
