"""Incremental Server-Sent Events parser that keeps each event's arrival stamp.

Owns the byte-level SSE grammar (WHATWG "event stream interpretation"): CRLF, CR and LF line
endings, comments, `id:`/`retry:` lines, multi-line `data:`, a leading BOM. Every event is stamped
with the arrival time of the chunk that *completed* it (the chunk holding its blank line), so a
split event is timed when the client could first have acted on it. Stdlib only; knows nothing of
any LLM API, of `WireRecord` or of the rest of the package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `\r\n` first so a pair inside one chunk is one line ending; a lone `\r` at the very end of a
# chunk is a line ending too, and a `\n` opening the next chunk is then swallowed (see `feed`).
_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event. `event` is "" when the stream sent no `event:` line."""

    event: str
    data: str
    t_ns: int  # arrival stamp of the chunk that completed the event
    read: int  # index of that chunk in the record's reads


class SseParser:
    """Feed chunks in arrival order; each call returns the events the chunk completed.

    Linear in the input: each chunk is scanned once, only its own bytes, for line endings, and
    the start of a line still open at its end is kept as a list of pieces, joined once when the
    line ends. (Joining the open line to every new chunk and scanning it again made one long line
    quadratic: a 30 MB line fed in 4 KB reads took minutes.)"""

    __slots__ = (
        "_data",
        "_event",
        "_has_data",
        "_pending",
        "_skip_lf",
        "_started",
        "invalid_lines",
    )

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the open line's pieces, no line ending among them
        self._skip_lf = False
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        # Lines that were not valid UTF-8 (read with U+FFFD in their place): the SDKs raise
        # UnicodeDecodeError on them, so the caller treats the call as failed.
        self.invalid_lines = 0

    def feed(self, chunk: bytes, t_ns: int, read: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        if not chunk:
            return out
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return out
        pending = self._pending
        # The common case of a long line: a chunk with no line ending (two C-speed scans).
        if b"\n" not in chunk and b"\r" not in chunk:
            pending.append(chunk)
            return out
        pos = 0
        for match in _EOL.finditer(chunk):
            if pending:
                pending.append(chunk[pos : match.start()])
                line = b"".join(pending)
                pending.clear()
            else:
                line = chunk[pos : match.start()]
            self._line(line, t_ns, read, out)
            pos = match.end()
        if pos < len(chunk):
            pending.append(chunk[pos:])
        elif chunk[-1:] == b"\r":
            # The CR ending this chunk may be the first half of a CRLF split across chunks. (A CR
            # inside the chunk is whole: the regex has already paired it with its LF if any.)
            self._skip_lf = True
        return out

    def finish(self, t_ns: int, read: int) -> list[SseEvent]:
        """End of input. Unlike the WHATWG algorithm, a last event that lacks its blank line is
        still dispatched: servers that close right after the final `data:` line did send it."""
        out: list[SseEvent] = []
        if self._pending:
            line = b"".join(self._pending)
            self._pending.clear()
            if line:
                self._line(line, t_ns, read, out)
        self._line(b"", t_ns, read, out)
        return out

    def _line(self, raw: bytes, t_ns: int, read: int, out: list[SseEvent]) -> None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.invalid_lines += 1
            line = raw.decode("utf-8", "replace")
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            if self._has_data:
                out.append(SseEvent(self._event, "\n".join(self._data), t_ns, read))
            self._event = ""
            self._data = []
            self._has_data = False
            return
        if line[0] == ":":
            return  # comment (keep-alive)
        # The value is sliced once, and only for the fields kept (partition, then dropping the
        # space, copied a long data line twice).
        colon = line.find(":")
        if colon < 0:
            name, start = line, len(line)
        else:
            name, start = line[:colon], colon + 1
            if line[start : start + 1] == " ":
                start += 1
        if name == "data":
            self._data.append(line[start:])
            self._has_data = True
        elif name == "event":
            self._event = line[start:]
        # `id` and `retry` steer reconnection, which a recorded attempt never does; other
        # field names are ignored by the spec.
