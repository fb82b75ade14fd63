"""What a peek's copy of a captured socket's queue says: how many SSE events end whole in it.

Owns `Framing`, how a socket carries its response's body (the binding names it from the
response's head and its transport: `framing_of`), and `whole_events`, which the loop monitor's
peek (`_stream._peek`) calls on the bytes it copied without taking them. `metrics` matches the
count with the events the pass read to decide which side of a stamp's lateness the kernel's
arrival time bounds (docs/metrics.md, "The kernel's arrival times"), so a miscount here is an
unsound bound there: where the bytes could mean two things, the answer is `EVENTS_UNKNOWN`.

May import `wire`; nothing else of the package, no HTTP library.
"""

from __future__ import annotations

import enum
import re
import string

from pytest_latency.wire import EVENTS_UNKNOWN, ONE_RECORD, event_ends

_HEX_DIGITS = string.hexdigits.encode()
# A whole chunk-size line (RFC 9112 7.1), matched from its start up to the first CRLF after it
# (`find`): hex digits, then whitespace only before an extension, which runs to that CRLF. One
# search and one match a chunk, in C, where the walk before split and checked each line in
# Python: `whole_events` over 1-8 KiB of one-event chunks (9-75) costs 0.82-0.89 of the walk's
# (median ratios over 40 rounds interleaved in one process; session 27). Bounded by the CRLF
# found: a match left to find the line's end itself took 2-7 ms over a 64 KiB queue of one long
# line without a CRLF or full of bare CRs (a queue read from mid-chunk, a hostile server),
# against 0.1-0.3 for the walk (review, session 27). A line it does not match takes
# `_odd_size_line`; tests/test_queued.py holds the walk before as an oracle.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]++)[ \t]*+(?:;.*)?\r\n", re.DOTALL)
# A TLS record's header: content type, version (3, x), length; application data is type 23.
_TLS_HEADER = 5
_TLS_TYPES = frozenset({20, 21, 22, 23})


class Framing(enum.Enum):
    """How a captured socket carries its response's body."""

    # HTTP/1 in the clear, no content coding, delimited by its length or the close: the body's
    # bytes as the server wrote them.
    RAW = enum.auto()
    # The same in HTTP/1.1's chunked framing: size lines around the body's bytes.
    CHUNKED = enum.auto()
    # HTTP/1 over TLS: only the records' boundaries can be read.
    TLS = enum.auto()
    # Nothing: HTTP/2 (its frames interleave streams and control), a content-coded body.
    OPAQUE = enum.auto()

    @property
    def in_the_clear(self) -> bool:
        """Whether the socket's queued bytes are this body's alone and as the server wrote them
        (no layer above the socket holds any back): HTTP/1 in the clear, not coded."""
        return self in (Framing.RAW, Framing.CHUNKED)


def framing_of(
    url: str, *, tls: bool, http1: bool, content_encoding: str, transfer_encoding: str
) -> Framing:
    """The framing of a response to `url`, read over TLS (as its transport says: a proxy may
    put TLS under an http URL) or not, in HTTP/1 or not, with its head's Content-Encoding (a
    coded body's bytes are not its events) and Transfer-Encoding."""
    if not http1 or content_encoding.strip().lower() not in ("", "identity"):
        return Framing.OPAQUE
    if tls or not url.startswith("http://"):
        return Framing.TLS
    return Framing.CHUNKED if "chunked" in transfer_encoding.lower() else Framing.RAW


def whole_events(queued: bytearray, size: int, framing: Framing) -> tuple[int, bool]:
    """How many SSE events end in the first `size` bytes of `queued`, and whether they end at
    one's end. `EVENTS_UNKNOWN` where that cannot be told: a queue that filled the buffer (more
    may follow), one not at a chunk's start, a body's bytes that begin with a line end (they may
    end an event whose first line end was read before) or hold a line end `event_ends` does not
    count ("\\r" alone, "\\n\\r\\n"). For TLS, `ONE_RECORD` where the queue is exactly one whole
    record (one server write, whole), else `EVENTS_UNKNOWN`."""
    if not 0 < size < len(queued) or framing is Framing.OPAQUE:
        return EVENTS_UNKNOWN, False
    if framing is Framing.TLS:
        return (ONE_RECORD if _one_record(queued, size) else EVENTS_UNKNOWN), False
    if framing is Framing.RAW:
        return _events(queued, 0, size, True)
    spans, whole = _chunks(queued, size)
    if spans is None:
        return EVENTS_UNKNOWN, False
    if len(spans) == 1:
        # The usual queue, one chunk, is read where it lies (a peek a pass on a loaded loop:
        # copying and joining cost more).
        ((start, end),) = spans
        return _events(queued, start, end, whole)
    # Joined through a view: one copy of each chunk's bytes, not two. Released before the
    # return: a view alive would stop the caller's buffer from being resized.
    with memoryview(queued) as view:
        data = b"".join([view[start:end] for start, end in spans])
    return _events(data, 0, len(data), whole)


def _events(data: bytes | bytearray, start: int, end: int, whole: bool) -> tuple[int, bool]:
    """`whole_events` of the body's bytes `data[start:end]`, `whole` where nothing of the
    queue is cut short after them."""
    if start >= end or data[start] in b"\r\n":
        return EVENTS_UNKNOWN, False
    # A CR not ending a CRLF, or an LF line end before a CRLF empty line ("\n\r\n" outside
    # "\r\n\r\n"): line ends `event_ends` does not count.
    if data.count(b"\r", start, end) and (
        data.count(b"\r", start, end) != data.count(b"\r\n", start, end)
        or data.count(b"\n\r\n", start, end) != data.count(b"\r\n\r\n", start, end)
    ):
        return EVENTS_UNKNOWN, False
    ends = whole and data.endswith((b"\n\n", b"\r\n\r\n"), start, end)
    return event_ends(data, start, end), ends


def _hex(digits: bytes) -> bool:
    """A chunk's size as HTTP writes it: hex digits only (int() would take "0x9" or "1_0")."""
    return bool(digits) and not digits.translate(None, _HEX_DIGITS)


def _chunks(queued: bytearray, size: int) -> tuple[list[tuple[int, int]] | None, bool]:
    """Where the body's bytes lie in a chunked queue's first `size` bytes (start, end of each
    chunk's data), walking its size lines from the start, and whether the queue ended at a
    chunk's end (or at the body's); None where it does not begin with a size line or its
    framing is broken."""
    spans: list[tuple[int, int]] = []
    at = 0
    size_line = _SIZE_LINE.fullmatch
    while at < size:
        line = queued.find(b"\r\n", at, size)
        found = size_line(queued, at, line + 2) if line >= 0 else None
        if found is None:  # a size line cut short by the queue's end, or broken framing
            return _odd_size_line(queued, at, size, line, spans)
        length = int(found[1], 16)
        if length == 0:  # the last chunk: trailers may follow, and nothing of the body
            return spans, True
        start = found.end()
        end = start + length
        spans.append((start, min(end, size)))
        if end + 2 > size:  # a chunk cut short, or its closing line end
            if end < size and queued[end:size] != b"\r\n"[: size - end]:
                return None, False
            return spans, False
        if not queued.startswith(b"\r\n", end):
            return None, False
        at = end + 2
    return spans, True


def _odd_size_line(
    queued: bytearray, at: int, size: int, line: int, spans: list[tuple[int, int]]
) -> tuple[list[tuple[int, int]] | None, bool]:
    """`_chunks` where its size line at `at` (ending at `line`, the first CRLF, or -1) is not
    whole and well formed: the queue's end cut it short (after hex digits, and what a whole
    line may carry after them: whitespace, an extension, its CR; the walk ends there) or it is
    broken (None)."""
    if line >= 0:
        return None, False
    digits = bytes(queued[at:size]).split(b";", 1)[0]
    # Cut between its CR and LF, or after whitespace: read as the whole line would be (before
    # session 28 "5\r" and "5 " were broken where "5;x\r" was not; review, session 27).
    if digits.endswith(b"\r"):
        digits = digits[:-1]
    if not _hex(digits.rstrip(b" \t")):
        return None, False
    return spans, False


def _one_record(queued: bytearray, size: int) -> bool:
    """Whether the first `size` bytes of `queued` are exactly one whole TLS record."""
    if size < _TLS_HEADER or queued[0] not in _TLS_TYPES or queued[1] != 3:
        return False
    return _TLS_HEADER + int.from_bytes(queued[3:5], "big") == size
