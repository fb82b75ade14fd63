"""The per-call body scan: what a decoded response body says, whatever its API.

Owns the steps between a decoded body and the numbers `_call` assembles: which API the call spoke
(its path, then its payloads' shape, through `apis`), whether the body is a stream, one JSON object
or neither, the walk over its events in arrival order (content events with their stamps and reads,
usage, the model, the latest service tier, the first provider error, the end marker, notes, output
text), and the error kind the call ends with. It knows no API's shapes: every question about a
payload goes to the call's adapter. May import only the stdlib, `pytest_latency.wire`,
`pytest_latency.untrusted` and its sibling metrics modules.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import Any

from pytest_latency.metrics import apis
from pytest_latency.metrics._body import DecodedBody
from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics._sse import SseEvent, SseParser
from pytest_latency.metrics._usage import UsageTracker
from pytest_latency.metrics.apis import Classified, WireApi
from pytest_latency.untrusted import safe_text, safe_token
from pytest_latency.wire import EVENT_LIMIT, WireRecord

MAX_NOTES = 20
MAX_NOTE_CHARS = 300
MAX_ERROR_DETAIL_CHARS = 500


@dataclass(slots=True)
class Scan:
    """What the body told us, whatever its format."""

    adapter: WireApi
    streamed: bool = False
    content: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)  # t, read, ch
    usage: UsageTracker | None = None
    error: str | None = None
    error_message: str | None = None
    # The stream's own end marker was read ([DONE], message_stop, response.completed, an error
    # event, a whole JSON body): the body ended, whether or not the client read on to EOF.
    terminal: bool = False
    # When the first end marker (or error event) arrived: the body's end for a client that
    # stopped there rather than read on to EOF.
    t_end_marker_ns: int | None = None
    finished: bool = False  # a finish reason arrived (the end marker may still follow)
    model: str | None = None
    service_tier: str | None = None  # the latest the server named (Responses: created, then final)
    # The walk stopped at `wire.EVENT_LIMIT` events: how many decoded bytes were left unparsed.
    capped: bool = False
    unparsed_bytes: int = 0
    invalid_utf8_lines: int = 0  # SSE lines that were not UTF-8 (the SDKs raise on them)
    notes: list[str] = field(default_factory=list)
    output: OutputText = field(default_factory=OutputText)
    # Each SSE event the parser dispatched at a blank line: the read that brought it; and the
    # read whose events the body's end dispatched (a last event without its blank line), -1
    # for none. `metrics._ends` matches them with the kernel's counts of whole events.
    event_reads: array[int] = field(default_factory=lambda: array("i"))  # reads < 2**31
    end_read: int = -1

    @property
    def api(self) -> str:
        return self.adapter.NAME

    def note(self, text: str) -> None:
        # Notes quote the server (a delta type, a reason): one printable line each, and a
        # bounded number of them, whatever a hostile stream sends.
        text = safe_text(text, MAX_NOTE_CHARS)
        if text in self.notes or len(self.notes) > MAX_NOTES:
            return
        self.notes.append(text if len(self.notes) < MAX_NOTES else "more notes dropped")


def json_object(data: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return value if isinstance(value, dict) else None


def scan_body(path: str, content_type: str, asked_stream: bool, body: DecodedBody) -> Scan:
    """Scan a decoded body; the API is the path's, or sniffed from the payloads."""
    scan = Scan(apis.for_path(path))
    if body.opaque is not None:
        scan.note(f"opaque: {body.opaque}")
        return scan
    kind = body_kind(content_type, asked_stream, body)
    if kind == "sse":
        _scan_sse(scan, body)
    elif kind == "json":
        _scan_json(scan, body.data)
    return scan


def body_kind(content_type: str, asked_stream: bool, body: DecodedBody) -> str:
    mime = content_type.split(";", 1)[0].strip().lower()
    head = body.head(64).lstrip()
    # No SSE stream starts with "{": an error body sent with the stream's content type is JSON.
    if mime.endswith("json") or head.startswith((b"{", b"[")):
        return "json"
    if mime == "text/event-stream":
        return "sse"
    # No or a generic content type (mocks, odd proxies): sniff the bytes.
    if head.startswith((b"data:", b"event:", b":", b"id:")) or (asked_stream and head):
        return "sse"
    return "other"


# How much of a decoded piece the SSE parser is fed at a time (see `_scan_sse`).
FEED_BYTES = 65_536


def _scan_sse(scan: Scan, body: DecodedBody) -> None:
    """Walk the events as the parser completes them: an event's payload is classified and
    dropped, so memory follows what the call keeps (content stamps, usage, output pieces), not
    every parsed payload at once (a flood of tiny events made that gigabytes). Until the API is
    known (a path no adapter owns) the events are held, unparsed, and walked once a payload
    names it, or at the end with the unknown API."""
    scan.streamed = True
    parser = SseParser()
    walk = None if scan.adapter is apis.UNKNOWN_API else _Walk(scan)
    held: list[SseEvent] = []
    last: tuple[int, int] | None = None
    pieces = body.pieces
    for index, (read, arrived, piece) in enumerate(pieces):
        if not piece:
            continue
        last = (arrived, read)
        # At most FEED_BYTES at a time, so the event limit is checked often: one read of a gzip
        # bomb can inflate to 64 MiB, a million events.
        for start in range(0, len(piece), FEED_BYTES):
            events = parser.feed(piece[start : start + FEED_BYTES], arrived, read)
            scan.event_reads.extend(event.read for event in events)
            walk = _take(scan, walk, held, events) if walk is None else walk.take(events)
            if (len(held) if walk is None else walk.count) < EVENT_LIMIT:
                continue
            # Stop after the slice that reached the limit; the events it completed are kept.
            scan.capped = True
            scan.unparsed_bytes = max(len(piece) - start - FEED_BYTES, 0) + sum(
                len(p) for _, _, p in pieces[index + 1 :]
            )
            scan.note(
                f"capped: walked the first {EVENT_LIMIT:,} events; "
                f"{scan.unparsed_bytes:,} decoded bytes after them not parsed"
            )
            break
        if scan.capped:
            last = None
            break
    if last is not None:
        events = parser.finish(*last)
        if events:
            scan.end_read = last[1]
        walk = _take(scan, walk, held, events) if walk is None else walk.take(events)
    if walk is None:
        walk = _Walk(scan).take(held)
    walk.close()
    scan.invalid_utf8_lines = parser.invalid_lines


def _take(
    scan: Scan, walk: _Walk | None, held: list[SseEvent], events: list[SseEvent]
) -> _Walk | None:
    """Hold `events` until one's payload names the API; then walk them all and return the walk."""
    for index, event in enumerate(events):
        held.append(event)
        if _is_done(event):
            continue
        payload = json_object(event.data)
        if payload is not None and (sniffed := apis.for_payload(payload)) is not apis.UNKNOWN_API:
            scan.adapter = sniffed
            walk = _Walk(scan).take(held)
            held.clear()
            return walk.take(events[index + 1 :])
    return walk


def _is_done(event: SseEvent) -> bool:
    # OpenAI's end marker, an SSE-level sentinel whatever the API. (Length first: a huge data
    # field is not copied by strip() just to be compared.)
    return len(event.data) < 32 and event.data.strip() == "[DONE]"


class _Walk:
    """The events of one SSE body in arrival order, once its adapter is known."""

    __slots__ = (
        "classify",
        "count",
        "done",
        "error_of",
        "non_json",
        "output_event",
        "scan",
        "usage",
    )

    def __init__(self, scan: Scan) -> None:
        adapter = scan.adapter
        self.scan = scan
        self.usage = scan.usage = UsageTracker(adapter)
        # Bound once: `event` runs once per event of every call.
        self.output_event, self.error_of, self.classify = (
            adapter.output_event,
            adapter.error,
            adapter.event,
        )
        self.done = False
        self.non_json = 0
        self.count = 0  # events walked

    def take(self, events: list[SseEvent]) -> _Walk:
        self.count += len(events)
        for event in events:
            self.event(event)
        return self

    def event(self, event: SseEvent) -> None:
        scan = self.scan
        if _is_done(event):
            # Later events (if any) are still read.
            self.done = True
            if scan.t_end_marker_ns is None:
                scan.t_end_marker_ns = event.t_ns
            return
        payload = json_object(event.data)
        if payload is None:
            self.non_json += 1
            if event.event == "error" and scan.error is None:
                scan.error, scan.error_message = "error", event.data[:200] or None
            return
        self.output_event(payload, scan.output)
        failure = self.error_of(payload)
        if failure is not None:
            # Usage may ride on the error chunk (OpenRouter's mid-stream error): keep it.
            info = Classified(
                error=failure.kind,
                error_message=failure.message,
                terminal=True,
                usage=payload.get("usage"),
            )
        else:
            info = self.classify(event.event, payload)
        if info.channels:
            scan.content.append((event.t_ns, event.read, info.channels))
        if info.usage is not None:
            self.usage.update(info.usage)
        if info.error is None and event.event == "error":
            info_error: str | None = "error"
        else:
            info_error = info.error
        if info_error is not None and scan.error is None:
            scan.error, scan.error_message = info_error, info.error_message
        scan.terminal = scan.terminal or info.terminal
        if info.terminal and scan.t_end_marker_ns is None:
            scan.t_end_marker_ns = event.t_ns
        scan.finished = scan.finished or info.finished
        if scan.model is None and info.model is not None:
            scan.model = info.model
        if info.service_tier is not None:
            scan.service_tier = info.service_tier
        if info.note is not None:
            scan.note(info.note)

    def close(self) -> None:
        self.scan.terminal = self.scan.terminal or self.done
        if self.non_json:
            self.scan.note(f"{self.non_json} event(s) with non-JSON data")


def _scan_json(scan: Scan, data: bytes) -> None:
    payload = json_object(data)
    if payload is None:
        scan.note("body is not a JSON object")
        return
    if scan.adapter is apis.UNKNOWN_API:
        scan.adapter = apis.for_payload(payload)
    adapter = scan.adapter
    adapter.output_body(payload, scan.output)
    failure = adapter.error(payload)
    if failure is not None:
        info = Classified(error=failure.kind, error_message=failure.message)
    else:
        info = adapter.body(payload)
    scan.usage = UsageTracker(adapter)
    scan.usage.update(info.usage)
    scan.error, scan.error_message = info.error, info.error_message
    scan.model = info.model
    scan.service_tier = info.service_tier
    scan.terminal = True
    if info.note is not None:
        scan.note(info.note)


def scan_error(
    record: WireRecord, scan: Scan, *, capped: bool = False
) -> tuple[str | None, str | None]:
    """The first cause wins: the server's status, then its error event, then the transport.
    A `capped` body's end was never read, so its missing end marker is no error."""
    kind, detail = _first_error(record, scan, capped)
    if kind is None:
        return None, None
    # Both may quote the server or an exception: one printable line, no secrets (issue #15).
    return kind, None if detail is None else safe_text(detail, MAX_ERROR_DETAIL_CHARS)


def _first_error(record: WireRecord, scan: Scan, capped: bool) -> tuple[str | None, str | None]:
    server_kind = None if scan.error is None else safe_token(scan.error)
    if record.status is not None and record.status >= 400:
        return f"http_{record.status}", server_kind
    if server_kind is not None:
        prefix = "sse_error" if scan.streamed else "body_error"
        return f"{prefix}:{server_kind}", scan.error_message
    if record.t_cut_ns is not None:
        return "outlived_test", "still streaming when the test's body ended; measured up to then"
    if record.error is not None:
        return safe_token(record.error), record.error_message
    if scan.invalid_utf8_lines:
        # The SDKs decode every line as UTF-8 and raise UnicodeDecodeError: the application
        # got an exception, whatever arrived (issue #14, item 9).
        return "bad_encoding", f"{scan.invalid_utf8_lines} line(s) of the stream not valid UTF-8"
    if scan.usage is not None and scan.usage.rejected is not None:
        return "bad_usage", f"usage dropped: {scan.usage.rejected}"
    if (
        scan.streamed
        and scan.adapter is not apis.UNKNOWN_API
        and record.t_eof_ns is not None
        and not record.prefetched
        and not scan.terminal
        and not scan.finished
        and not capped
    ):
        # The server ended the body cleanly but never sent the stream's end marker: a cut stream.
        return "truncated", "stream ended without its end marker"
    return None, None
