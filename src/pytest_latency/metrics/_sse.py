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

# `\r\n` first so a pair inside one buffer is one line ending; a lone `\r` at the very end of the
# buffer is a line ending too, and a `\n` opening the next chunk is then swallowed (see `feed`).
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
    """Feed chunks in arrival order; each call returns the events the chunk completed."""

    __slots__ = ("_buf", "_data", "_event", "_has_data", "_skip_lf", "_started")

    def __init__(self) -> None:
        self._buf = b""
        self._skip_lf = False
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._has_data = False

    def feed(self, chunk: bytes, t_ns: int, read: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        if not chunk:
            return out
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        pos = 0
        for match in _EOL.finditer(buf):
            self._line(buf[pos : match.start()], t_ns, read, out)
            pos = match.end()
        if pos and buf[pos - 1 : pos] == b"\r":
            # The CR may be the first half of a CRLF split across chunks.
            self._skip_lf = True
        self._buf = buf[pos:]
        return out

    def finish(self, t_ns: int, read: int) -> list[SseEvent]:
        """End of input. Unlike the WHATWG algorithm, a last event that lacks its blank line is
        still dispatched: servers that close right after the final `data:` line did send it."""
        out: list[SseEvent] = []
        if self._buf:
            self._line(self._buf, t_ns, read, out)
            self._buf = b""
        self._line(b"", t_ns, read, out)
        return out

    def _line(self, raw: bytes, t_ns: int, read: int, out: list[SseEvent]) -> None:
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
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        # `id` and `retry` steer reconnection, which a recorded attempt never does; other
        # field names are ignored by the spec.
