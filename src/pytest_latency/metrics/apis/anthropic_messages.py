"""Anthropic Messages (`POST /v1/messages`): the adapter for its events, bodies and usage.

Owns what Anthropic's stream means: `content_block_delta`s carry text, thinking, tool-input and
compaction content (signature and citation deltas carry none), `message_start` and the cumulative
`message_delta`s carry usage in pieces (and the service tier, `usage.service_tier`),
`message_stop` ends the stream; `input_tokens` EXCLUDES `cache_read_input_tokens` and
`cache_creation_input_tokens`, so the normalised input is the three summed; the writes' split by
TTL is `cache_creation.ephemeral_1h_input_tokens` (the 1-hour part of the total). Implements
`WireApi` as a module. May import only the stdlib and the metrics modules `_usage`,
`_fingerprint` and `apis._protocol`/`apis._shapes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics._usage import Usage, UsageFields, UsageOutOfRange, count
from pytest_latency.metrics.apis._protocol import (
    NOTHING,
    REASONING,
    TEXT,
    TOOL,
    Classified,
)
from pytest_latency.metrics.apis._shapes import (
    as_dict,
    as_str,
    body_request,
    is_text,
    provider_error,
    service_tier,
)

NAME = "anthropic.messages"

_TYPES = frozenset(
    {
        "message",
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
# delta type → (the field holding its content, the channel, the answer when it has content)
_DELTAS = {
    "text_delta": ("text", Classified(channels=(TEXT,))),
    "thinking_delta": ("thinking", Classified(channels=(REASONING,))),
    "input_json_delta": ("partial_json", Classified(channels=(TOOL,))),
    # Context compaction: the model's summary of the conversation so far, generated in a pass
    # of its own before the answer and delivered whole in one delta (anthropic-sdk-python's and
    # pydantic-ai's recordings). Generated output the call waits for, like thinking, and not
    # the answer: it counts for ttft, not for ttfo.
    "compaction_delta": ("content", Classified(channels=(REASONING,))),
}
# signature_delta: an integrity signature for a thinking block, never shown to anyone.
# citations_delta: a pointer into the *input* documents attached to the text being written;
# the generated words themselves arrive as text_delta. Neither is output the user waits for.
_NON_CONTENT_DELTAS = frozenset({"signature_delta", "citations_delta"})
_STOP = Classified(terminal=True)


def matches_path(path: str) -> bool:
    # /v1/messages/count_tokens and /v1/messages/batches do not match: they are not messages.
    return path.endswith("/messages")


def matches_payload(payload: Mapping[str, Any]) -> bool:
    return payload.get("type") in _TYPES


# The model and the stream are named in the body.
request = body_request
# Any envelope, whatever the path: proxies and compatible servers mix them.
error = provider_error


def event(event: str, payload: Mapping[str, Any]) -> Classified:
    kind = payload.get("type", event)
    if kind == "content_block_delta":
        delta = as_dict(payload.get("delta"))
        dtype = delta.get("type")
        spec = _DELTAS.get(dtype) if isinstance(dtype, str) else None
        if spec is not None:
            return spec[1] if is_text(delta.get(spec[0])) else NOTHING
        if dtype in _NON_CONTENT_DELTAS:
            return NOTHING
        return Classified(note=f"unknown delta type {str(dtype)[:40]}")
    if kind == "message_start":
        message = as_dict(payload.get("message"))
        usage = message.get("usage")
        return Classified(
            usage=usage, model=as_str(message.get("model")), service_tier=_tier(usage)
        )
    if kind == "message_delta":
        usage = payload.get("usage")
        return Classified(usage=usage, service_tier=_tier(usage))
    if kind == "message_stop":
        return _STOP
    return NOTHING


def body(payload: Mapping[str, Any]) -> Classified:
    usage = payload.get("usage")
    return Classified(usage=usage, model=as_str(payload.get("model")), service_tier=_tier(usage))


def _tier(usage: object) -> str | None:
    # Anthropic names the tier inside the usage object ("standard", "priority", "batch").
    return service_tier(as_dict(usage))


def read_usage(usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
    """`message_start` sends the input side, each `message_delta` cumulative counts that may
    repeat it: merged field by field, the latest count winning."""
    details = as_dict(usage.get("output_tokens_details"))
    counted = usage
    iterations = usage.get("iterations")
    if isinstance(iterations, list) and iterations:
        # A call that ran several passes (context compaction, an advisor model) reports the
        # top-level counts of its final `message` pass only; the call as a whole is the sum of
        # its iterations (pydantic-ai's compaction cassette: cache read 55,096 and output 83 + 8
        # in the compaction pass, top-level 0 and 8; issue #14, item 7).
        passes = [i for i in iterations if isinstance(i, dict)]
        counted = {key: _summed(passes, key) for key in _COUNTS}
        one_hour = _summed_1h(passes)
    else:
        one_hour = _one_hour(usage)
    piece = UsageFields(
        input_tokens=count(counted.get("input_tokens")),
        output_tokens=count(counted.get("output_tokens")),
        cache_read_tokens=count(counted.get("cache_read_input_tokens")),
        cache_write_tokens=count(counted.get("cache_creation_input_tokens")),
        reasoning_tokens=count(details.get("thinking_tokens", details.get("reasoning_tokens"))),
        cache_write_1h_tokens=one_hour,
    )
    merged = previous.merged(piece)
    total, long = merged.cache_write_tokens, merged.cache_write_1h_tokens
    if total is not None and long is not None and long > total:
        # The 1-hour writes are a part of all writes: a larger part is a server or proxy bug,
        # and a price for it would bill a negative 5-minute write.
        raise UsageOutOfRange(f"1-hour cache writes {long} exceed the cache writes {total}")
    return merged


_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _summed(passes: list[dict[str, Any]], key: str) -> int | None:
    """The sum of one count over the iterations that sent it (None when none did)."""
    return _sum_sent(count(i.get(key)) for i in passes)


def _one_hour(usage: Mapping[str, Any]) -> int | None:
    """The 1-hour part of a usage object's cache writes: `cache_creation` splits them by TTL
    (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`); None when it is not sent."""
    return count(as_dict(usage.get("cache_creation")).get("ephemeral_1h_input_tokens"))


def _summed_1h(passes: list[dict[str, Any]]) -> int | None:
    """The 1-hour cache writes over the iterations that split theirs (None when none did)."""
    return _sum_sent(_one_hour(i) for i in passes)


def _sum_sent(values: Iterable[int | None]) -> int | None:
    sent = [v for v in values if v is not None]
    return sum(sent) if sent else None


def normalise_usage(fields: UsageFields) -> Usage:
    # Anthropic's input_tokens excludes both cache counts; the total is the three summed.
    uncached = fields.input_tokens
    read, write = fields.cache_read_tokens, fields.cache_write_tokens
    return Usage(
        input_tokens=None if uncached is None else uncached + (read or 0) + (write or 0),
        output_tokens=fields.output_tokens,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=fields.reasoning_tokens,
        # A part of the total only: with no total sent there is nothing for it to be a part of.
        cache_write_1h_tokens=None if write is None else fields.cache_write_1h_tokens,
    )


def output_event(payload: Mapping[str, Any], out: OutputText) -> bool:
    if payload.get("type") != "content_block_delta":
        return False
    delta = payload.get("delta")
    index = payload.get("index", 0)
    index = index if isinstance(index, int) else 0
    if isinstance(delta, Mapping):
        out.add(("block", index), delta.get("text"))
        out.add(("block", index), delta.get("partial_json"), tool=True)
    return True


def output_body(payload: Mapping[str, Any], out: OutputText) -> bool:
    content = payload.get("content")
    if not isinstance(content, list):
        return False
    for index, block in enumerate(content):
        if isinstance(block, Mapping):
            out.add(("block", index), block.get("text"))
            out.add_object(("block", index), block.get("input"))
    return True
