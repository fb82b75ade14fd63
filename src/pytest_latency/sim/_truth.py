"""The ground-truth log: what the server actually did for each request, and when.

Owns `TruthEvent`, `TruthRecord` (with the ttft/e2e/itl the plugin's accuracy tests compare
against), their JSON form, and `TruthLog`, a bounded, thread-safe store the server appends to and
tests read from any thread. Times are `time.perf_counter_ns()` readings, which on Linux come from
CLOCK_MONOTONIC and so compare directly with readings taken in another process. Stdlib only.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

__all__ = ["CONTENT_KINDS", "TruthEvent", "TruthLog", "TruthRecord"]

# Event kinds that carry output (the DESIGN's "content event"). "other" = framing (role chunk,
# block start/stop, ping, usage, [DONE]); "error" = an SSE error event.
CONTENT_KINDS = frozenset({"content", "reasoning", "tool"})


class TruthEvent(NamedTuple):
    """One SSE event (or a non-streamed body) as sent: right after its write returned."""

    t_sent_ns: int
    kind: str  # "content" | "reasoning" | "tool" | "other" | "error"
    tokens: int  # output tokens this event carries
    t_due_ns: int  # when the schedule wanted it sent; t_sent_ns - t_due_ns is the lateness
    # Just before its write began: the bytes left between this and t_sent_ns (on a busy machine
    # the server's thread may be preempted between the two, ms apart). None for the non-streamed
    # body, and in records written before it was kept.
    t_write_ns: int | None = None

    @property
    def sent_span_ns(self) -> tuple[int, int]:
        """The earliest and the latest the event's bytes can have left the server."""
        start = self.t_due_ns if self.t_write_ns is None else self.t_write_ns
        return min(start, self.t_sent_ns), self.t_sent_ns


@dataclass(frozen=True, slots=True)
class TruthRecord:
    """The server's own account of one request (one SDK attempt)."""

    request_id: str
    api: str  # "openai.chat" | "openai.responses" | "anthropic.messages"
    stream: bool
    model: str
    status: int
    t_received_ns: int
    t_headers_ns: int | None
    events: tuple[TruthEvent, ...]
    # Normalised usage as reported on the wire: input includes cached tokens.
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    fault: str | None
    attempt: int = 0  # x-stainless-retry-count of the request
    t_done_ns: int | None = None  # the response ended (last write, abort or error body)
    tail: bool = False
    prefill_ns: int = 0  # modelled prefill, so tests can check cache savings against it
    # The part of cache_write_tokens written for an hour, and the tier the answer named; None
    # with no usage reported (as the counts above), and in records written before them.
    cache_write_1h_tokens: int | None = None
    service_tier: str | None = None
    # The concurrency limit (max_concurrency, max_queue): how long the request waited for a slot
    # (inside ttfb and ttft, which run from its receipt), whether it was turned away (429), and
    # when it got its slot, which it held until t_done_ns (None: it never had one).
    queue_ns: int = 0
    rejected: bool = False
    t_slot_ns: int | None = None

    @property
    def content_events(self) -> tuple[TruthEvent, ...]:
        return tuple(e for e in self.events if e.kind in CONTENT_KINDS)

    @property
    def ttfb_ns(self) -> int | None:
        return None if self.t_headers_ns is None else self.t_headers_ns - self.t_received_ns

    @property
    def ttft_ns(self) -> int | None:
        """Received → first content-bearing event (text, reasoning or tool); None if none."""
        ev = self.content_events
        return ev[0].t_sent_ns - self.t_received_ns if ev else None

    @property
    def ttfo_ns(self) -> int | None:
        """Received → first non-reasoning content event."""
        for e in self.events:
            if e.kind in ("content", "tool"):
                return e.t_sent_ns - self.t_received_ns
        return None

    @property
    def e2e_ns(self) -> int | None:
        """Received → last content event."""
        ev = self.content_events
        return ev[-1].t_sent_ns - self.t_received_ns if ev else None

    @property
    def itl_ns(self) -> tuple[int, ...]:
        """Gaps between successive content events."""
        ev = self.content_events
        return tuple(b.t_sent_ns - a.t_sent_ns for a, b in itertools.pairwise(ev))

    @property
    def lateness_ns(self) -> tuple[int, ...]:
        """Actual minus scheduled send time of every event."""
        return tuple(e.t_sent_ns - e.t_due_ns for e in self.events)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["events"] = [list(e) for e in self.events]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TruthRecord:
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["events"] = tuple(TruthEvent(*e) for e in data.get("events", ()))
        return cls(**kwargs)


class TruthLog:
    """Append-only, bounded (oldest dropped first), safe to read while the server writes."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self._records: deque[TruthRecord] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def append(self, record: TruthRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[TruthRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
