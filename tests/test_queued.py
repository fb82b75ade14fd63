"""What a peek makes of the bytes it copied off a socket's queue (`capture._queued`): how many SSE
events end whole in them, and whether they end at one's end, only where the bytes cannot mean
two things (a miscount there is an unsound stamp bound in `metrics`)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_latency.capture._queued import Framing, _chunks, _hex, framing_of, whole_events
from pytest_latency.wire import EVENTS_UNKNOWN, ONE_RECORD

UNKNOWN = (EVENTS_UNKNOWN, False)
EVENT = b"data: {}\n\n"


def whole(data: bytes, framing: Framing = Framing.CHUNKED, size: int = 256) -> tuple[int, bool]:
    buffer = bytearray(size)
    buffer[: len(data)] = data
    return whole_events(buffer, len(data), framing)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_the_chunked_framing_is_walked_from_the_queues_start() -> None:
    assert whole(chunk(EVENT)) == (1, True)
    assert whole(chunk(EVENT) + chunk(EVENT)) == (2, True)
    assert whole(chunk(b"data: {}\r\n\r\n")) == (1, True)  # CRLF events
    assert whole(chunk(b"data: {}\r\n\r\n").upper()) == (1, True)  # upper-case hex sizes
    assert whole(b"a;ext=1\r\n" + EVENT + b"\r\n") == (1, True)  # a chunk extension
    # Cut short: the next chunk's size line, its data, or its closing line end.
    assert whole(chunk(EVENT) + b"4") == (1, False)
    assert whole(chunk(EVENT) + b"4\r\ndata") == (1, False)
    assert whole(chunk(EVENT) + b"a\r\ndata: {}\n") == (1, False)
    assert whole(chunk(EVENT)[:-1]) == (1, False)
    # Cut after a size line's whitespace, or between its CR and LF: as its whole line would be
    # read, as one cut inside an extension is (before session 28, "a\r" and "a " were broken).
    for cut in (b"a\r", b"a ", b"a \t\r", b"a;x", b"a;x\r"):
        assert whole(chunk(EVENT) + cut) == (1, False), cut
    assert whole(chunk(EVENT) + b"a\rx") == UNKNOWN  # a bare CR inside it: broken
    # An event's end split across two chunks is counted once, where it is whole.
    assert whole(chunk(b"data: {}\n") + chunk(b"\n")) == (1, True)
    # The body's end: the last chunk is not an event ("0\r\n\r\n" read raw would be one).
    assert whole(chunk(EVENT) + b"0\r\n\r\n") == (1, True)
    assert whole(chunk(b"data: {}")) == (0, False)


def test_the_framings_line_ends_make_no_event_ends() -> None:
    """Each line of a CRLF event written as a chunk of its own: the data's line end and the
    framing's, side by side, read "\\r\\n\\r\\n" in the raw bytes, but no event ends there."""
    lines = chunk(b"event: a\r\n") + chunk(b"data: {}\r\n")
    assert whole(lines) == (0, False)
    assert whole(lines + chunk(b"\r\n")) == (1, True)
    assert whole(chunk(b": ping\r\n")) == (0, False)


@pytest.mark.parametrize(
    "data",
    [
        b"\r\n",  # the end of a chunk read before: not at a size line
        b"data: {}\n\n",  # not framed at all
        b"x\r\n" + EVENT,  # not a size
        b"0x9\r\n" + EVENT,  # int() would take it; HTTP does not
        chunk(EVENT)[:-2] + b"XX",  # a chunk not closed by a line end
        chunk(b"\ndata: {}\n\n"),  # begins with a line end: may end an event read before
        chunk(b"data: a\r\rdata: b\r\r"),  # CR-only line ends, which event_ends does not count
        chunk(b"data: a\n\r\n"),  # "\n\r\n": an event's end event_ends does not count
        b"",
    ],
)
def test_a_queue_that_could_mean_two_things_says_nothing(data: bytes) -> None:
    assert whole(data) == UNKNOWN


def test_a_queue_that_filled_the_buffer_says_nothing() -> None:
    data = chunk(EVENT)
    assert whole(data, size=len(data)) == UNKNOWN


def test_a_raw_body_is_counted_as_it_is() -> None:
    assert whole(EVENT + b"data: {", Framing.RAW) == (1, False)
    assert whole(EVENT + EVENT, Framing.RAW) == (2, True)
    assert whole(b"\n" + EVENT, Framing.RAW) == UNKNOWN


def test_tls_says_only_whether_the_queue_was_one_whole_record() -> None:
    record = bytes([23, 3, 3, 0, 40]) + bytes(40)
    assert whole(record, Framing.TLS) == (ONE_RECORD, False)
    assert whole(record + record, Framing.TLS) == UNKNOWN
    assert whole(record[:-1], Framing.TLS) == UNKNOWN
    assert whole(bytes(45), Framing.TLS) == UNKNOWN  # not a record's header
    assert whole(EVENT, Framing.OPAQUE) == UNKNOWN


def test_the_framing_is_named_from_the_head_and_the_transport() -> None:
    def of(url: str = "http://h/v1", **kw: object) -> Framing:
        args: dict[str, object] = {
            "tls": False,
            "http1": True,
            "content_encoding": "",
            "transfer_encoding": "chunked",
        }
        args.update(kw)
        return framing_of(url, **args)  # type: ignore[arg-type]

    assert of() is Framing.CHUNKED
    assert of(transfer_encoding="") is Framing.RAW
    assert of(content_encoding="identity") is Framing.CHUNKED
    assert of(content_encoding="gzip") is Framing.OPAQUE  # a coded body's bytes are not events
    assert of(http1=False) is Framing.OPAQUE  # HTTP/2
    assert of("https://h/v1") is Framing.TLS
    assert of(tls=True) is Framing.TLS  # an http URL through a TLS proxy


def test_a_size_line_begins_with_its_digits() -> None:
    """Whitespace may come before a chunk extension, not before the size: a queue read from
    mid-chunk that begins with the tail of an SSE line ("id: 4783") is not a size line
    (review, session 23: 493 of 4,578 such queues were over-counted)."""
    tail = b" 4783\r\ndata: {}\r\n\r\n"
    queued = bytearray(tail + b"\0")
    assert whole_events(queued, len(tail), Framing.CHUNKED) == (EVENTS_UNKNOWN, False)
    sized = b"4 \r\nab\n\n\r\n"  # whitespace after the digits: allowed
    assert whole_events(bytearray(sized + b"\0"), len(sized), Framing.CHUNKED) == (1, True)


def _walk_by_lines(queued: bytearray, size: int) -> tuple[list[tuple[int, int]] | None, bool]:
    """The chunked walk as it was before session 27, line by line in Python: the oracle for
    `_chunks`, which matches each size line with a regex instead (4x the cost a chunk). Since
    session 28 both read a size line the queue's end cut short after its whitespace or its CR
    as the whole line would be read (before, "5 " and "5\r" were broken, "5;x\r" was not)."""
    spans: list[tuple[int, int]] = []
    at = 0
    while at < size:
        line = queued.find(b"\r\n", at, size)
        if line < 0:
            head = bytes(queued[at:size]).split(b";", 1)[0]
            head = head[:-1] if head.endswith(b"\r") else head
            if not _hex(head.rstrip(b" \t")):
                return None, False
            return spans, False
        digits = bytes(queued[at:line]).split(b";", 1)[0].rstrip(b" \t")
        if not _hex(digits):
            return None, False
        length = int(digits, 16)
        if length == 0:
            return spans, True
        start = line + 2
        end = start + length
        spans.append((start, min(end, size)))
        if end + 2 > size:
            if end < size and queued[end:size] != b"\r\n"[: size - end]:
                return None, False
            return spans, False
        if queued[end : end + 2] != b"\r\n":
            return None, False
        at = end + 2
    return spans, True


# Size lines as servers and hostile peers write them (a template of the chunk's length, or bytes
# that are no size), and the bytes between.
_SIZE_LINES = st.sampled_from(
    [
        b"%x",
        b"%X",
        b" %x",
        b"%x ",
        b"%x\t",
        b"%x;x=1",
        b"%x ;x",
        b"%x;a\rb",
        b"%x;a\nb",
        b"0x%x",
        b"%x_0",
        b"+%x",
        b"%x x",
        b"%x\r",
        b"",
        b"g",
        b"ffffffff",
        b"0",
    ]
)


def _framed(line: bytes, data: bytes) -> bytes:
    size = line % len(data) if b"%" in line else line
    return size + b"\r\n" + data + b"\r\n"


_PIECES = st.one_of(
    st.builds(_framed, _SIZE_LINES, st.binary(max_size=12)),
    st.binary(max_size=6),
)


@settings(max_examples=400)
@given(pieces=st.lists(_PIECES, max_size=6), cut=st.integers(min_value=0, max_value=100))
@example(pieces=[_framed(b"%x;a\rb", b"abcd"), _framed(b"%x;a\nb", b"ab")], cut=100)
def test_the_size_line_match_walks_a_queue_as_the_line_by_line_walk_did(
    pieces: list[bytes], cut: int
) -> None:
    data = b"".join(pieces)
    size = min(cut, len(data))
    queued = bytearray(data + b"\0")
    assert _chunks(queued, size) == _walk_by_lines(queued, size)
