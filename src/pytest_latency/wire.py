"""The wire record: what capture stamps for one HTTP attempt, and nothing more.

Owns the `WireRecord` data type shared by `capture` (which fills it on the hot path) and `metrics`
(which parses it after the call). Holding only raw bytes and clock readings keeps the hot path to
a clock read and an append; every interpretation (SSE, JSON, usage) happens later in `metrics`.
Stdlib only; imports nothing from the package.

Request headers are never stored (they carry API keys). The request body is held in memory so
`metrics` can read the model and the stream flag; outputs never contain it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    @property
    def complete(self) -> bool:
        return self.t_eof_ns is not None and self.error is None

    @property
    def body(self) -> bytes:
        return b"".join(chunk for _, _, chunk in self.reads)
