"""What the simulated wire formats share: their Protocol, the parsed request, usage, the events.

Owns `WireFormat` (the Protocol one simulated API implements: its name and path, request parsing,
the streamed events and the whole body it answers with, its error shapes), `SimRequest` (what a
wire module extracts from a request body: prompt text, the cacheable prefix and its 1-hour part,
output limits, which channels to produce, the service tier to answer with), OpenAI's service tiers,
`Usage` (normalised token counts), `Out` (one payload the server writes at a due offset),
`WireError` (a 4xx with the provider's error shape), and SSE framing. The wire modules
(`_openai_chat`, `_openai_responses`, `_anthropic`, `_gemini`) implement it, `_apis` registers
them, the server consumes them. Stdlib only (`_schedule` for a type).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._schedule import Plan

__all__ = [
    "OPENAI_TIERS",
    "SEQ",
    "TEXT",
    "Out",
    "SimRequest",
    "SseTemplate",
    "ToolSpec",
    "Usage",
    "WireError",
    "WireFormat",
    "dumps",
    "int_field",
    "openai_tier",
    "part_text",
    "require_mapping",
    "sse",
    "text_of",
]


class WireError(Exception):
    """The request is malformed for its API; the server answers `status` with `body`."""

    def __init__(self, status: int, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The tool the simulated model calls: its name and JSON-schema of arguments."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SimRequest:
    """An API request reduced to what the simulator needs."""

    api: str
    model: str
    stream: bool
    prompt_text: str
    # Characters of prompt_text that may be read from / written to the prefix cache.
    cacheable_chars: int
    max_tokens: int | None
    # "none": no reasoning; "stream": streamed reasoning/thinking deltas; "hidden": decoded but
    # not streamed (OpenAI reasoning models), visible only as usage and delay.
    reasoning: str = "none"
    reasoning_budget: int | None = None
    tool: ToolSpec | None = None
    include_usage: bool = False  # OpenAI Chat stream_options.include_usage
    # The leading characters of the cacheable prefix asked to stay cached for an hour
    # (Anthropic's `cache_control: {"ttl": "1h"}`); the rest stays the default 5 minutes.
    long_cacheable_chars: int = 0
    # The tier the answer names as the one that served it ("" for none): the one the request
    # asked for where the API lets it choose (OpenAI's `service_tier`), else the API's default.
    service_tier: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Normalised usage: input_tokens includes cache reads and writes."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    # The part of cache_write_tokens written for an hour; None for an API that does not split
    # its writes by TTL (OpenAI's report no writes at all).
    cache_write_1h_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Out:
    """One write: payload bytes, truth kind, output tokens carried, due offset from receipt (ns).

    `piece` is the index of the streamed delta this write carries (None for framing events), so
    the server can place mid-stream faults by delta rather than by byte; `pieces` how many
    consecutive deltas from `piece` it carries (a Gemini function call arrives whole, in one
    write: a fault planned at any of its deltas replaces it).
    """

    payload: bytes
    kind: str
    tokens: int
    due_ns: int
    piece: int | None = None
    pieces: int = 1

    def carries(self, piece: int) -> bool:
        return self.piece is not None and self.piece <= piece < self.piece + self.pieces


@runtime_checkable
class WireFormat(Protocol):
    """One simulated LLM API. The wire modules implement it as modules (their functions are its
    members); a new simulated API is one more such module, registered in `_apis`."""

    API: str  # the truth record's `api`, the name pytest_latency.metrics gives it
    # The POST route it is served on; `{name}` parts (aiohttp's route syntax) reach `parse`.
    PATH: str
    # The API reports prompt-cache writes (Anthropic bills them); OpenAI reports reads only.
    REPORTS_CACHE_WRITES: bool

    def parse(self, raw: Any, route: Mapping[str, str]) -> SimRequest:
        """The decoded JSON request body → what the simulator needs; `WireError` if malformed.
        `route` holds the values of the path's `{name}` parts (Gemini's model and method)."""
        ...

    def stream_events(
        self, req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
    ) -> list[Out]:
        """Every write of a streamed answer, in order, each at its due offset.

        `finish` is "end", "length" or "tool"; `rid` is the request id, `created` the Unix time.
        """
        ...

    def json_body(
        self, req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
    ) -> dict[str, Any]:
        """The non-streamed answer."""
        ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The API's error envelope for an HTTP error `status`."""
        ...

    def stream_error(self, message: str, sequence: int) -> bytes:
        """A mid-stream error event; `sequence` is the index of the write it replaces."""
        ...


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event; `data` is JSON-encoded unless it is already a string."""
    body = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {body}\n\n".encode()


# Stand-ins rendered once into an event's JSON and swapped per event: rendering a whole chunk
# dict costs ~6 µs, swapping a string ~1 µs, and a long stream renders hundreds of deltas.
TEXT = "\u241f"
SEQ = "\u241e"
_TEXT_BYTES = dumps(TEXT).encode()
_SEQ_BYTES = dumps(SEQ).encode()


class SseTemplate:
    """An SSE event rendered once with `TEXT` (and optionally `SEQ`) where per-event values go."""

    __slots__ = ("_parts",)

    def __init__(self, data: Any, event: str | None = None) -> None:
        head, _, tail = sse(data, event).partition(_TEXT_BYTES)
        self._parts = (head.split(_SEQ_BYTES), tail.split(_SEQ_BYTES))

    def render(self, text: str, seq: int | None = None) -> bytes:
        value = json.dumps(text, ensure_ascii=False).encode()
        number = b"" if seq is None else str(seq).encode()
        head, tail = self._parts
        return number.join(head) + value + number.join(tail)


def text_of(content: Any) -> str:
    """Flatten message content (a string, or a list of typed parts) into prompt text.

    Text parts contribute their text; any other part contributes its canonical JSON (minus
    cache_control), so images, tool calls and results still weigh in the token count.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part_text(p) for p in content)
    return dumps(content)


def part_text(part: Any) -> str:
    if isinstance(part, Mapping):
        text = part.get("text")
        if isinstance(text, str):
            return text
        return json.dumps(
            {k: v for k, v in part.items() if k != "cache_control"},
            sort_keys=True,
            separators=(",", ":"),
        )
    return str(part)


def require_mapping(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise WireError(400, "request body must be a JSON object")
    return body


# OpenAI's `service_tier` values; "auto" lets the server choose, and it chooses "default".
OPENAI_TIERS = frozenset({"auto", "default", "flex", "priority", "scale"})


def openai_tier(body: Mapping[str, Any]) -> str:
    """The tier an OpenAI answer names: the one `service_tier` asked for ("auto" resolved to
    "default"); 400 for a value the API does not accept."""
    asked = body.get("service_tier")
    if asked is None:
        return "default"
    if not isinstance(asked, str) or asked not in OPENAI_TIERS:
        raise WireError(
            400, f"service_tier must be one of {', '.join(sorted(OPENAI_TIERS))}, got {asked!r}"
        )
    return "default" if asked == "auto" else asked


def int_field(body: Mapping[str, Any], *names: str) -> int | None:
    """The first present integer field of `names`; 400 if it is not a positive integer."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WireError(400, f"{name} must be a positive integer, got {value!r}")
        return value
    return None
