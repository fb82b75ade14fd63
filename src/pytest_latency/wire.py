"""The wire record: what capture stamps for one HTTP attempt, and nothing more.

Owns the `WireRecord` data type shared by `capture` (which fills it on the hot path) and `metrics`
(which parses it after the call). Holding only raw bytes and clock readings keeps the hot path to
two clock reads and an append per chunk; every interpretation (SSE, JSON, usage) happens later,
in `metrics`.
Stdlib only; imports nothing from the package.

Request headers are never stored (they carry API keys). The request body is held in memory so
`metrics` can read the model and the stream flag; outputs never contain it (`metrics` keeps
sizes and hashes, and text only when `text_limit` asks for it).

Also owns `LoopLag`, the event-loop lag log a capture-side monitor fills while async calls are in
flight on a loop, which the records of those calls share (docs/metrics.md, "Client saturation").
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


class LoopLag:
    """How late an event loop woke up from short sleeps while captured calls were in flight.

    One log per monitoring run (from the first call in flight on a loop until none is): parallel
    arrays of wake-up stamps (`time.perf_counter_ns()`, ascending) and how late each wake-up was
    (ns past the requested sleep). Two 8-byte integers per wake-up, so capture's 10 ms tick costs
    1.6 kB per second of monitoring; the log lives as long as the records that share it.
    """

    __slots__ = ("lates_ns", "tick_ns", "wakes_ns")

    def __init__(self, tick_ns: int) -> None:
        self.tick_ns = tick_ns
        self.wakes_ns: array[int] = array("q")
        self.lates_ns: array[int] = array("q")

    def add(self, woke_ns: int, late_ns: int) -> None:
        self.wakes_ns.append(woke_ns)
        self.lates_ns.append(late_ns)

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
    # How many characters of prompt and output text `metrics` may keep for this attempt (the
    # plugin's --latency-capture-text). 0, the default, keeps none: hashes and sizes only.
    text_limit: int = 0

    @property
    def complete(self) -> bool:
        return self.t_eof_ns is not None and self.error is None

    @property
    def body(self) -> bytes:
        return b"".join(chunk for _, _, chunk in self.reads)
