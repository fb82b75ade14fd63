"""Gemini's native API (`POST /v1beta/models/{model}:generateContent`, and
`:streamGenerateContent?alt=sse`): the adapter for its chunks, bodies and usage.

Owns what Gemini's answer means. The model and whether a stream was asked are the URL path's
(`/models/gemini-2.5-flash:streamGenerateContent`; capture drops the query, `alt=sse`), not the
body's. Every chunk of a stream is a whole `GenerateContentResponse`: its candidates' parts carry
the content (`text` parts are text, those marked `"thought": true` reasoning, `functionCall` and
`executableCode` parts tool calls, `inlineData` audio or other generated media; a part holding
only a `thoughtSignature`, or `text: ""`, carries none), a candidate's `finishReason` ends the
stream (the server closes after that chunk: there is no other end marker), and `usageMetadata`
is a complete snapshot on every chunk, the latest winning (the final chunk's prompt count may
differ from the first's). Usage: `promptTokenCount` INCLUDES `cachedContentTokenCount` (the
package's convention already) and leaves out `toolUsePromptTokenCount` (the results of built-in
tools the model read), which input adds; output is `candidatesTokenCount + thoughtsTokenCount`
(every generated token, the hidden thinking included), reasoning the thoughts. Gemini omits a
count that is zero (proto3 JSON), so in a usage object that reports the prompt an absent count
is 0, not unreported. The tier is `usageMetadata.serviceTier` (Vertex: `trafficType`). Errors:
Google's envelope `{"error": {"code", "message", "status"}}`, as an HTTP error body or as a
stream chunk (google-genai raises on a chunk that starts with `{"error":`).

Wire facts from recordings nobody here wrote: pydantic/pydantic-ai @ 4fda389 (2026-08-22),
tests/models/cassettes/test_google/ (test_google_model_thinking_part_iter.yaml: thought parts,
thoughtsTokenCount cumulative while candidatesTokenCount is absent; test_google_streaming_tool_
call_thought_signature.yaml: a whole functionCall in one chunk, then a `text: ""` finish chunk
whose promptTokenCount changes 55 → 257; test_google_model_web_search_tool_stream.yaml: total
572 = prompt 17 + candidates 241 + toolUsePrompt 102 + thoughts 412; test_google_stream_usage_
is_live_mid_stream.yaml: `serviceTier: "standard"`; test_google_vertex_service_tier_flex_
stream.yaml: `trafficType: "ON_DEMAND_FLEX"`), tests/models/cassettes/test_multimodal_tool_
returns/test_mixed_content_ordering[google_2_5].yaml (prompt 373 with 204 cached, total 629 =
373 + 89 + 167), and googleapis/python-genai @ 6680718 (google/genai/_api_client.py: SSE `data:`
lines, `{"error":` chunks raised as APIError; types.py GenerateContentResponseUsageMetadata).
Implements `WireApi` as a module. May import only the stdlib and the metrics modules `_usage`,
`_fingerprint` and `apis._protocol`/`apis._shapes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics._usage import UsageFields, count
from pytest_latency.metrics.apis._protocol import (
    AUDIO,
    NOTHING,
    REASONING,
    TEXT,
    TOOL,
    Classified,
    Request,
)
from pytest_latency.metrics.apis._shapes import (
    as_dict,
    as_str,
    is_text,
    openai_normalised,
    provider_error,
)

NAME = "gemini.generate_content"

_STREAM = ":streamGenerateContent"
_METHODS = (":generateContent", _STREAM)
# Vertex AI names the tier by its traffic type (pydantic-ai's flex cassette: ON_DEMAND_FLEX).
_TRAFFIC_TIERS = {
    "ON_DEMAND": "standard",
    "ON_DEMAND_FLEX": "flex",
    "ON_DEMAND_PRIORITY": "priority",
}


def matches_path(path: str) -> bool:
    # Gemini API (`/v1beta/models/m:…`), Vertex (`…/publishers/google/models/m:…`), tuned models.
    return path.endswith(_METHODS)


def matches_payload(payload: Mapping[str, Any]) -> bool:
    return (
        isinstance(payload.get("candidates"), list)
        or isinstance(payload.get("usageMetadata"), dict)
        or isinstance(payload.get("promptFeedback"), dict)
    )


def request(path: str, payload: Mapping[str, Any] | None) -> Request:
    """The model is the last path segment before its `:method`; the method says the stream."""
    del payload  # Gemini's body names neither
    segment = path.rsplit("/", 1)[-1]
    name, _, method = segment.rpartition(":")
    return Request(unquote(name) or None, f":{method}" == _STREAM)


# Any envelope, whatever the path; Google's own names its kind in `status` ("UNAVAILABLE").
error = provider_error


def _part_channel(part: object) -> str | None:
    if not isinstance(part, dict):
        return None
    if is_text(part.get("text")):
        return REASONING if part.get("thought") is True else TEXT
    call = part.get("functionCall")
    if isinstance(call, dict) and call:
        # Delivered whole (its name and arguments at once): generated output, a tool call.
        return TOOL
    if is_text(as_dict(part.get("executableCode")).get("code")):
        return TOOL  # code the model wrote for the code-execution tool (its result is not)
    inline = as_dict(part.get("inlineData"))
    if is_text(inline.get("data")):
        mime = inline.get("mimeType")
        return AUDIO if isinstance(mime, str) and mime.startswith("audio/") else TEXT
    return None


def _candidates(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = payload.get("candidates")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _parts(candidate: Mapping[str, Any]) -> list[Any]:
    parts = as_dict(candidate.get("content")).get("parts")
    return parts if isinstance(parts, list) else []


def _tier(usage: object) -> str | None:
    fields = as_dict(usage)
    tier = as_str(fields.get("serviceTier"))
    if tier is not None:
        return tier
    traffic = fields.get("trafficType")
    return _TRAFFIC_TIERS.get(traffic) if isinstance(traffic, str) else None


def _answer(payload: Mapping[str, Any], *, streamed: bool) -> Classified:
    channels: list[str] = []
    candidates = _candidates(payload)
    for candidate in candidates:
        for part in _parts(candidate):
            channel = _part_channel(part)
            if channel is not None and channel not in channels:
                channels.append(channel)
    # The answer is complete when every candidate it carries has finished; the server closes the
    # stream after that chunk, so it is the stream's end as well.
    finished = bool(candidates) and all(as_str(c.get("finishReason")) for c in candidates)
    note = None
    blocked = as_str(as_dict(payload.get("promptFeedback")).get("blockReason"))
    if blocked is not None:
        # A blocked prompt is answered with feedback and no candidates: that is the answer.
        finished = True
        note = f"prompt blocked: {blocked}"
    usage = payload.get("usageMetadata")
    model = as_str(payload.get("modelVersion"))
    if not channels and usage is None and not finished and model is None:
        return NOTHING
    return Classified(
        channels=tuple(channels),
        usage=usage,
        terminal=finished and streamed,
        finished=finished,
        model=model,
        service_tier=_tier(usage),
        note=note,
    )


def event(event: str, payload: Mapping[str, Any]) -> Classified:
    del event  # chunks are unnamed `data:` lines
    return _answer(payload, streamed=True)


def body(payload: Mapping[str, Any]) -> Classified:
    return _answer(payload, streamed=False)


def read_usage(usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
    """Each chunk's `usageMetadata` is the call's usage so far, complete: the latest replaces
    the earlier. Read here into the package's meaning (`normalise_usage` copies it)."""
    prompt = count(usage.get("promptTokenCount"))
    total = count(usage.get("totalTokenCount"))
    if prompt is None and total is None:
        return previous  # not a usage report (an empty object)
    candidates = count(usage.get("candidatesTokenCount")) or 0
    thoughts = count(usage.get("thoughtsTokenCount")) or 0
    tool_prompt = count(usage.get("toolUsePromptTokenCount")) or 0
    # Omitted when zero, like every count: a prompt with a cache hit names it.
    cached = count(usage.get("cachedContentTokenCount")) or 0
    return UsageFields(
        input_tokens=None if prompt is None else prompt + tool_prompt,
        output_tokens=candidates + thoughts,
        cache_read_tokens=None if prompt is None else cached,
        reasoning_tokens=thoughts,
    )


# The counts already mean what the package means: input includes the cached tokens.
normalise_usage = openai_normalised


def _output(payload: Mapping[str, Any], out: OutputText) -> bool:
    if not isinstance(payload.get("candidates"), list):
        return False
    for index, candidate in enumerate(_candidates(payload)):
        for part in _parts(candidate):
            if not isinstance(part, Mapping):
                continue
            if part.get("thought") is not True:
                out.add(("candidate", index), part.get("text"))
            call = part.get("functionCall")
            if isinstance(call, Mapping):
                out.add_call(call.get("args"))
    return True


output_event = _output
output_body = _output
