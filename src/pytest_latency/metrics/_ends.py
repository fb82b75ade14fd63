"""How many SSE events each read of a body ended, as a peek at its socket's queue counts them.

Owns `counted_ends`, the one place a call's reads are matched with the kernel's counts of whole
events (`wire.event_ends`, which capture's peeks use too) and checked against what the SSE
parser made of the same bytes. `metrics` times a read's events by a peek's arrival only where
the two agree: a comment or a run of blank lines (counted, nothing dispatched), a line end the
count does not know ("\\r" alone, which the parser ends a line at), or an event the body's end
finished without its blank line would pair the peek's count with the wrong events, and time an
event by an arrival that came before it (review, session 23: a last event sent 150 ms after
the one the queue held came out 150 ms early).

Pure; may import only the stdlib and `pytest_latency.wire`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_latency.wire import events_ended


def counted_ends(
    chunks: Sequence[bytes], event_reads: Iterable[int], end_read: int
) -> tuple[list[int], bytearray]:
    """Each of `chunks`' count of events ended (`wire.events_ended`: an end split across two
    is the later one's), and 1 where the parser dispatched as many events there (`event_reads`,
    each dispatched event's read index) and the body's end finished none there (`end_read`,
    the read whose events `SseParser.finish` dispatched, -1 for none)."""
    ended = list(events_ended(chunks))
    parsed = [0] * len(ended)
    for read in event_reads:
        if 0 <= read < len(parsed):
            parsed[read] += 1
    agree = bytearray(e == p for e, p in zip(ended, parsed, strict=True))
    if 0 <= end_read < len(agree):
        agree[end_read] = 0
    return ended, agree
