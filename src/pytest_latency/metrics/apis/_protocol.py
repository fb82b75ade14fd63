"""The contract between the generic per-call scan and one wire API's adapter.

Owns the `WireApi` Protocol (what an adapter answers: its name, whether a URL path or a payload is
its, the model and stream its request asked for (`Request`), and, for one decoded JSON event or
non-streamed body, the provider error it signals, the
output channels it carries content on, its usage, model and service tier, whether it ends the
stream, and the output text it holds), the typed answers it gives (`Classified`,
`ProviderError`) and the channel vocabulary. May import only the stdlib and the metrics modules
`_usage` and `_fingerprint` (for types).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pytest_latency.metrics._fingerprint import OutputText
    from pytest_latency.metrics._usage import Usage, UsageFields

TEXT = "text"
REASONING = "reasoning"
TOOL = "tool"
REFUSAL = "refusal"
AUDIO = "audio"
CHANNELS = (TEXT, REASONING, TOOL, REFUSAL, AUDIO)


@dataclass(frozen=True, slots=True)
class Classified:
    """What one event (or body) means. Frozen, so adapters share constant instances."""

    channels: tuple[str, ...] = ()
    usage: object = None  # the raw usage object, for the adapter's `read_usage`
    error: str | None = None  # provider error type ("overloaded_error", "server_error", …)
    error_message: str | None = None
    terminal: bool = False  # the stream's own end marker (message_stop, response.completed, …)
    # The answer is complete (a finish reason) though the end marker may still follow: the
    # stream was not cut, whether or not the client read on to the marker.
    finished: bool = False
    model: str | None = None  # the model the server says answered
    service_tier: str | None = None  # the tier the server says served it (prices differ by tier)
    note: str | None = None


NOTHING = Classified()


class Request(NamedTuple):
    """What the request asked for: the model it named and whether it asked for a stream."""

    model: str | None
    stream: bool


class ProviderError(NamedTuple):
    kind: str  # the provider's error type or code; "error" when it names none
    message: str | None


@runtime_checkable
class WireApi(Protocol):
    """One LLM wire API. Adapters are modules (their functions are the members) or objects.

    Payloads are decoded JSON objects; an adapter never raises on a malformed one: what it cannot
    read is absent. The generic scan asks `error` first; only a payload that is no error is
    classified by `event` (streamed) or `body` (not streamed).
    """

    NAME: str  # the `api` of CallMetrics, e.g. "openai.chat"

    def matches_path(self, path: str) -> bool:
        """The request's URL path (no query, any trailing "/" removed) is this API's."""
        ...

    def matches_payload(self, payload: Mapping[str, Any]) -> bool:
        """Shape sniffing, for paths no adapter recognises (proxies, Vertex/Azure-style routes)."""
        ...

    def request(self, path: str, payload: Mapping[str, Any] | None) -> Request:
        """The model and stream the request asked for: from its JSON body (`payload`, None when
        it is not a JSON object) or, for an API that names them in the URL (Gemini's
        `/models/{model}:streamGenerateContent`), from its path."""
        ...

    def error(self, payload: Mapping[str, Any]) -> ProviderError | None:
        """The provider error the payload signals, or None."""
        ...

    def event(self, event: str, payload: Mapping[str, Any]) -> Classified:
        """One SSE event's payload; `event` is its `event:` name, "" when absent."""
        ...

    def body(self, payload: Mapping[str, Any]) -> Classified:
        """A non-streamed JSON body: usage, model, error and notes (it has no token timing)."""
        ...

    def read_usage(self, usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
        """One usage object (as `Classified.usage` carried it) folded into the call's so far."""
        ...

    def normalise_usage(self, fields: UsageFields) -> Usage:
        """The call's usage in the package's meaning (DESIGN.md "Usage normalisation")."""
        ...

    def output_event(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        """Add the output text a streamed payload carries to `out`; False: not this API's shape."""
        ...

    def output_body(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        """Add a non-streamed body's output text to `out`; False: not this API's shape."""
        ...
