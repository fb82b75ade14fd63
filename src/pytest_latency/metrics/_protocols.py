"""Which LLM API a call spoke, and what each of its events means.

Owns API detection (request path first, then the shape of the payloads) and the classification
of one decoded JSON event (or a non-streaming body) into: the output channels it carries content
on, the raw usage object it reports, the provider error it signals, and whether it terminates the
stream. The rules are listed in docs/metrics.md ("What counts as a content event"). Stdlib only;
imports nothing from the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANTHROPIC_MESSAGES = "anthropic.messages"
OPENAI_CHAT = "openai.chat"
OPENAI_RESPONSES = "openai.responses"
OPENAI_COMPLETIONS = "openai.completions"
UNKNOWN = "unknown"
APIS = (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES, OPENAI_COMPLETIONS, UNKNOWN)

TEXT = "text"
REASONING = "reasoning"
TOOL = "tool"
REFUSAL = "refusal"
AUDIO = "audio"
CHANNELS = (TEXT, REASONING, TOOL, REFUSAL, AUDIO)


@dataclass(frozen=True, slots=True)
class Classified:
    channels: tuple[str, ...] = ()
    usage: object = None  # the raw usage object, for UsageTracker
    error: str | None = None  # provider error type ("overloaded_error", "server_error", …)
    error_message: str | None = None
    terminal: bool = False  # the stream's own end marker (message_stop, response.completed, …)
    model: str | None = None  # the model the server says answered
    note: str | None = None


NOTHING = Classified()


def api_from_path(path: str) -> str:
    path = path.rstrip("/")
    # /v1/messages/count_tokens and /v1/messages/batches fall through: they are not messages.
    if path.endswith("/messages"):
        return ANTHROPIC_MESSAGES
    if path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if path.endswith("/completions"):
        return OPENAI_COMPLETIONS
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    return UNKNOWN


_ANTHROPIC_TYPES = frozenset(
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


def api_from_payload(payload: dict[str, Any]) -> str:
    """Shape sniffing for paths we do not recognise (proxies, Vertex/Azure-style routes)."""
    kind = payload.get("type")
    obj = payload.get("object")
    if kind in _ANTHROPIC_TYPES:
        return ANTHROPIC_MESSAGES
    if (isinstance(kind, str) and kind.startswith("response.")) or obj == "response":
        return OPENAI_RESPONSES
    if isinstance(obj, str) and obj.startswith("chat.completion"):
        return OPENAI_CHAT
    if obj == "text_completion":
        return OPENAI_COMPLETIONS
    return UNKNOWN


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def error_of(payload: dict[str, Any]) -> tuple[str, str | None] | None:
    """The provider error a payload signals, as (type, message), or None.

    Anthropic: {"type": "error", "error": {"type", "message"}}; OpenAI: {"error": {"type",
    "code", "message"}}; Responses `error` event: {"type": "error", "code", "message"};
    vLLM-style: {"object": "error", "type", "message"}.
    """
    err = payload.get("error")
    if isinstance(err, dict):
        kind = _str(err.get("type")) or _str(err.get("code")) or "error"
        return kind, _str(err.get("message"))
    if isinstance(err, str) and err:
        return "error", err
    if payload.get("type") == "error":
        return _str(payload.get("code")) or "error", _str(payload.get("message"))
    if payload.get("object") == "error":
        kind = _str(payload.get("type")) or _str(payload.get("code")) or "error"
        return kind, _str(payload.get("message"))
    return None


def classify_event(api: str, event: str, payload: dict[str, Any]) -> Classified:
    """One SSE event's JSON payload (`event` is its `event:` name, "" when absent)."""
    failure = error_of(payload)
    if failure is not None:
        return Classified(error=failure[0], error_message=failure[1], terminal=True)
    if api == ANTHROPIC_MESSAGES:
        return _anthropic_event(event, payload)
    if api in (OPENAI_CHAT, OPENAI_COMPLETIONS):
        return _choices_event(payload)
    if api == OPENAI_RESPONSES:
        return _responses_event(event, payload)
    return NOTHING


def classify_body(api: str, payload: dict[str, Any]) -> Classified:
    """A non-streaming JSON body: usage, model and error only (it has no token timing)."""
    failure = error_of(payload)
    if failure is not None:
        return Classified(error=failure[0], error_message=failure[1])
    if api == OPENAI_RESPONSES:
        return _responses_final(payload, terminal=False)
    if api == UNKNOWN:
        return NOTHING
    return Classified(usage=payload.get("usage"), model=_str(payload.get("model")))


# --- Anthropic Messages ---------------------------------------------------------------------

_ANTHROPIC_DELTAS = {
    "text_delta": ("text", TEXT),
    "thinking_delta": ("thinking", REASONING),
    "input_json_delta": ("partial_json", TOOL),
}
# signature_delta: an integrity signature for a thinking block, never shown to anyone.
# citations_delta: a pointer into the *input* documents attached to the text being written;
# the generated words themselves arrive as text_delta. Neither is output the user waits for.
_ANTHROPIC_NON_CONTENT_DELTAS = frozenset({"signature_delta", "citations_delta"})


def _anthropic_event(event: str, payload: dict[str, Any]) -> Classified:
    kind = payload.get("type", event)
    if kind == "content_block_delta":
        delta = _dict(payload.get("delta"))
        dtype = delta.get("type")
        spec = _ANTHROPIC_DELTAS.get(dtype) if isinstance(dtype, str) else None
        if spec is not None:
            return Classified(channels=(spec[1],)) if _text(delta.get(spec[0])) else NOTHING
        if dtype in _ANTHROPIC_NON_CONTENT_DELTAS:
            return NOTHING
        return Classified(note=f"unknown delta type {str(dtype)[:40]}")
    if kind == "message_start":
        message = _dict(payload.get("message"))
        return Classified(usage=message.get("usage"), model=_str(message.get("model")))
    if kind == "message_delta":
        return Classified(usage=payload.get("usage"))
    if kind == "message_stop":
        return Classified(terminal=True)
    return NOTHING


# --- OpenAI Chat Completions and legacy Completions -----------------------------------------


def _content_text(value: object) -> bool:
    """`delta.content` is a string, or on some compatible servers a list of content parts."""
    if isinstance(value, list):
        return any(isinstance(p, dict) and _text(p.get("text")) for p in value)
    return _text(value)


def _delta_channels(delta: dict[str, Any], found: list[str]) -> None:
    def add(channel: str) -> None:
        if channel not in found:
            found.append(channel)

    # Compatible servers (vLLM, SGLang, DeepSeek, OpenRouter) stream reasoning beside content.
    if _text(delta.get("reasoning_content")) or _text(delta.get("reasoning")):
        add(REASONING)
    if _content_text(delta.get("content")):
        add(TEXT)
    if _text(delta.get("refusal")):
        add(REFUSAL)
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = _dict(call.get("function")) if isinstance(call, dict) else {}
            # A tool call's first delta often carries only its name: the name is generated
            # output, so it counts (Anthropic's arrives in content_block_start, which does not).
            if _text(function.get("arguments")) or _text(function.get("name")):
                add(TOOL)
    legacy = _dict(delta.get("function_call"))
    if _text(legacy.get("arguments")) or _text(legacy.get("name")):
        add(TOOL)
    audio = _dict(delta.get("audio"))
    if _text(audio.get("data")) or _text(audio.get("transcript")):
        add(AUDIO)


def _choices_event(payload: dict[str, Any]) -> Classified:
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
            elif _text(choice.get("text")) and TEXT not in found:  # legacy completions
                found.append(TEXT)
            finished = finished or choice.get("finish_reason") is not None
    usage = payload.get("usage")
    model = _str(payload.get("model"))
    if not found and usage is None and not finished:
        return NOTHING if model is None else Classified(model=model)
    return Classified(channels=tuple(found), usage=usage, terminal=finished, model=model)


# --- OpenAI Responses -----------------------------------------------------------------------

_RESPONSES_CHANNELS = {
    "output_text": TEXT,
    "refusal": REFUSAL,
    "reasoning": REASONING,
    "reasoning_text": REASONING,
    "reasoning_summary_text": REASONING,
    "function_call_arguments": TOOL,
    "custom_tool_call_input": TOOL,
    "mcp_call_arguments": TOOL,
    "code_interpreter_call_code": TOOL,
    "audio": AUDIO,
    "audio.transcript": AUDIO,
}


def _responses_channel(middle: str) -> str:
    channel = _RESPONSES_CHANNELS.get(middle)
    if channel is not None:
        return channel
    # New delta kinds keep appearing (shell_call_*, apply_patch_*); place them by their name.
    if "reasoning" in middle:
        return REASONING
    if "audio" in middle:
        return AUDIO
    if "call" in middle or "tool" in middle:
        return TOOL
    return TEXT


def _responses_final(response_or_body: dict[str, Any], *, terminal: bool) -> Classified:
    status = response_or_body.get("status")
    note = None
    error = None
    message = None
    if status == "failed":
        failure = _dict(response_or_body.get("error"))
        error = _str(failure.get("code")) or _str(failure.get("type")) or "response_failed"
        message = _str(failure.get("message"))
    elif status == "incomplete":
        reason = _str(_dict(response_or_body.get("incomplete_details")).get("reason"))
        note = f"response incomplete: {reason or 'unknown reason'}"
    return Classified(
        usage=response_or_body.get("usage"),
        error=error,
        error_message=message,
        terminal=terminal,
        model=_str(response_or_body.get("model")),
        note=note,
    )


def _responses_event(event: str, payload: dict[str, Any]) -> Classified:
    kind = payload.get("type", event)
    if not isinstance(kind, str):
        return NOTHING
    if kind.startswith("response.") and kind.endswith(".delta"):
        delta = payload.get("delta")
        if _text(delta) or (isinstance(delta, (dict, list)) and delta):
            return Classified(channels=(_responses_channel(kind[9:-6]),))
        return NOTHING
    if kind in ("response.completed", "response.incomplete", "response.failed"):
        final = _responses_final(_dict(payload.get("response")), terminal=True)
        if kind == "response.failed" and final.error is None:
            return Classified(usage=final.usage, error="response_failed", terminal=True)
        if kind == "response.incomplete" and final.note is None:
            return Classified(usage=final.usage, terminal=True, note="response incomplete")
        return final
    if kind == "response.created":
        return Classified(model=_str(_dict(payload.get("response")).get("model")))
    return NOTHING
