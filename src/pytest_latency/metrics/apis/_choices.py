"""The `choices` shape OpenAI Chat Completions and legacy Completions share.

Owns what a `choices` chunk or body means: its deltas' content channels (text, reasoning beside
content on compatible servers, refusal, tool calls, audio; a legacy choice's `text`), its
`finish_reason` as the stream's end, its top-level `model` and `service_tier`, and its output
text per choice and per tool call. Both adapters read both shapes, as compatible servers mix
them. May import only the stdlib and the metrics modules `_fingerprint` and
`apis._protocol`/`apis._shapes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics.apis._protocol import (
    AUDIO,
    NOTHING,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    Classified,
)
from pytest_latency.metrics.apis._shapes import as_dict, as_str, is_text, service_tier


def _content_text(value: object) -> bool:
    """`delta.content` is a string, or on some compatible servers a list of content parts (a
    thinking part is not text: `_content_channels`)."""
    if isinstance(value, list):
        return any(
            isinstance(p, dict) and p.get("type") != "thinking" and is_text(p.get("text"))
            for p in value
        )
    return is_text(value)


def _thinking(value: object) -> bool:
    """Whether a list of content parts holds reasoning: Mistral's Magistral streams it as
    `{"type": "thinking", "thinking": [{"type": "text", "text": ...}]}` parts of `content`."""
    if not isinstance(value, list):
        return False
    for part in value:
        if isinstance(part, dict) and part.get("type") == "thinking":
            inner = part.get("thinking")
            if is_text(inner) or (
                isinstance(inner, list)
                and any(isinstance(i, dict) and is_text(i.get("text")) for i in inner)
            ):
                return True
    return False


def _tool_calls(value: object) -> bool:
    if not isinstance(value, list):
        return False
    for call in value:
        function = as_dict(call.get("function")) if isinstance(call, dict) else {}
        # A tool call's first delta often carries only its name: the name is generated output,
        # so it counts (Anthropic's arrives in content_block_start, which does not).
        if is_text(function.get("arguments")) or is_text(function.get("name")):
            return True
    return False


def _function_call(value: object) -> bool:  # the legacy single function call
    legacy = as_dict(value)
    return is_text(legacy.get("arguments")) or is_text(legacy.get("name"))


def _audio(value: object) -> bool:
    audio = as_dict(value)
    return is_text(audio.get("data")) or is_text(audio.get("transcript"))


# delta field → (its channel, whether a value carries content). Compatible servers (vLLM, SGLang,
# DeepSeek, OpenRouter) stream reasoning beside content.
_FIELDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "reasoning_content": (REASONING, is_text),
    "reasoning": (REASONING, is_text),
    "content": (TEXT, _content_text),
    "refusal": (REFUSAL, is_text),
    "tool_calls": (TOOL, _tool_calls),
    "function_call": (TOOL, _function_call),
    "audio": (AUDIO, _audio),
}
# One delta's channels are listed in this order, whatever the order of its fields.
_ORDER = {REASONING: 0, TEXT: 1, REFUSAL: 2, TOOL: 3, AUDIO: 4}


def _delta_channels(delta: dict[str, Any], found: list[str]) -> None:
    # Walks the delta's own fields (one or two in a typical chunk), not every field it might have:
    # this runs once per chunk of every call.
    here: list[str] = []
    for key, value in delta.items():
        spec = _FIELDS.get(key)
        if spec is not None and spec[1](value):
            here.append(spec[0])
        if key == "content" and _thinking(value) and REASONING not in here:
            here.append(REASONING)
    if len(here) > 1:
        here.sort(key=_ORDER.__getitem__)
    for channel in here:
        if channel not in found:
            found.append(channel)


def event(event: str, payload: Mapping[str, Any]) -> Classified:
    del event  # chunks are unnamed
    found: list[str] = []
    finished = False
    choices = payload.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                _delta_channels(delta, found)
            elif is_text(choice.get("text")) and TEXT not in found:  # legacy completions
                found.append(TEXT)
            finished = finished or choice.get("finish_reason") is not None
    usage = payload.get("usage")
    if usage is None:
        # Groq sends usage only inside its `x_groq` extension when stream_options is not set.
        usage = as_dict(payload.get("x_groq")).get("usage")
    model = as_str(payload.get("model"))
    tier = service_tier(payload)  # on every chunk, the tier that serves the call
    if not found and usage is None and not finished:
        if model is None and tier is None:
            return NOTHING
        return Classified(model=model, service_tier=tier)
    return Classified(
        channels=tuple(found), usage=usage, finished=finished, model=model, service_tier=tier
    )


def body(payload: Mapping[str, Any]) -> Classified:
    return Classified(
        usage=payload.get("usage"),
        model=as_str(payload.get("model")),
        service_tier=service_tier(payload),
    )


def _feed_choice(choice: Mapping[str, Any], out: OutputText) -> None:
    n = choice.get("index", 0)
    n = n if isinstance(n, int) else 0
    delta = choice.get("delta", choice.get("message"))
    if not isinstance(delta, Mapping):
        out.add(("text", n), choice.get("text"))  # legacy completions
        return
    content = delta.get("content")
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping):
                out.add(("text", n), part.get("text"))
    else:
        out.add(("text", n), content)
    calls = delta.get("tool_calls")
    for position, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, Mapping):
            continue
        index = call.get("index", position)
        function = call.get("function")
        if isinstance(function, Mapping):
            key = (f"tool{n}", index if isinstance(index, int) else position)
            out.add(key, function.get("arguments"), tool=True)


def output(payload: Mapping[str, Any], out: OutputText) -> bool:
    """A chunk's deltas or a body's messages (the same walk: `delta` or `message` per choice)."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if isinstance(choice, Mapping):
            _feed_choice(choice, out)
    return True
