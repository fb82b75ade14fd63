"""OpenAI Responses (`POST /v1/responses`): the adapter for its events, bodies and usage.

Owns what the Responses stream means: every `response.<kind>.delta` carries content, placed on a
channel by its kind (new kinds are placed by their name); `response.completed`, `.incomplete` and
`.failed` end the stream and carry the usage, the service tier that served the call, a failure's
error or an incompleteness note; `response.created` names the model (and echoes the tier asked
for). Usage is one complete object whose `input_tokens` include
`input_tokens_details.cached_tokens`. Implements `WireApi` as a module. May import only the
stdlib and the metrics modules `_usage`, `_fingerprint` and `apis._protocol`/`apis._shapes`.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from pytest_latency.metrics.apis._shapes import (
    as_dict,
    as_str,
    body_request,
    is_text,
    openai_normalised,
    provider_error,
    read_openai_usage,
    service_tier,
)

NAME = "openai.responses"

_CHANNELS = {
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
_ON = {
    channel: Classified(channels=(channel,)) for channel in (TEXT, REFUSAL, REASONING, TOOL, AUDIO)
}
_ENDS = ("response.completed", "response.incomplete", "response.failed")
_TEXT_DELTAS = ("response.output_text.delta", "response.refusal.delta")


def matches_path(path: str) -> bool:
    return path.endswith("/responses")


def matches_payload(payload: Mapping[str, Any]) -> bool:
    kind = payload.get("type")
    return (isinstance(kind, str) and kind.startswith("response.")) or (
        payload.get("object") == "response"
    )


# The model and the stream are named in the body.
request = body_request
# Any envelope, whatever the path: proxies and compatible servers mix them.
error = provider_error


# Output item types whose content streams as `.delta` events (a shell call's command as
# `shell_call_command.delta`, a patch as `apply_patch_call_operation_diff.delta`): their
# `output_item.added` and `.done` carry nothing new.
_STREAMED_ITEMS = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "custom_tool_call",
        "mcp_call",
        "code_interpreter_call",
        "shell_call",
        "apply_patch_call",
    }
)


def _whole_item(item_type: object) -> bool:
    """An item the model generated and the server delivers whole (local_shell_call,
    computer_call, mcp_approval_request, tool_search_call, web_search_call, …): its
    `output_item.added` is its first content and its `.done` its last, for some (a local shell
    call's command) the only one that carries it (issue #14). Not the items a tool or server
    produced: a tool's output (`shell_call_output`, `tool_search_output`, …: the environment's
    bytes) and `mcp_list_tools` (the MCP server's list of its tools)."""
    if not isinstance(item_type, str) or item_type in _STREAMED_ITEMS:
        return False
    return not (item_type.endswith("_output") or item_type == "mcp_list_tools")


def _channel(middle: str) -> str | None:
    if "call_output" in middle:
        # A hosted tool's own output (`shell_call_output_content`): the environment's bytes,
        # not tokens the model generated.
        return None
    channel = _CHANNELS.get(middle)
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


def _final(response_or_body: Mapping[str, Any], *, terminal: bool) -> Classified:
    status = response_or_body.get("status")
    note = None
    error = None
    message = None
    if status == "failed":
        failure = as_dict(response_or_body.get("error"))
        error = as_str(failure.get("code")) or as_str(failure.get("type")) or "response_failed"
        message = as_str(failure.get("message"))
    elif status == "incomplete":
        reason = as_str(as_dict(response_or_body.get("incomplete_details")).get("reason"))
        note = f"response incomplete: {reason or 'unknown reason'}"
    return Classified(
        usage=response_or_body.get("usage"),
        error=error,
        error_message=message,
        terminal=terminal,
        model=as_str(response_or_body.get("model")),
        service_tier=service_tier(response_or_body),
        note=note,
    )


def event(event: str, payload: Mapping[str, Any]) -> Classified:
    kind = payload.get("type", event)
    if not isinstance(kind, str):
        return NOTHING
    if kind.startswith("response.") and kind.endswith(".delta"):
        delta = payload.get("delta")
        channel = _channel(kind[9:-6])
        if channel is not None and (is_text(delta) or (isinstance(delta, (dict, list)) and delta)):
            return _ON[channel]
        return NOTHING
    if kind in ("response.output_item.added", "response.output_item.done"):
        return _ON[TOOL] if _whole_item(as_dict(payload.get("item")).get("type")) else NOTHING
    if kind in _ENDS:
        final = _final(as_dict(payload.get("response")), terminal=True)
        tier = final.service_tier
        if kind == "response.failed" and final.error is None:
            return Classified(
                usage=final.usage, error="response_failed", terminal=True, service_tier=tier
            )
        if kind == "response.incomplete" and final.note is None:
            return Classified(
                usage=final.usage, terminal=True, note="response incomplete", service_tier=tier
            )
        return final
    if kind == "response.created":
        # Its tier echoes the request ("auto"); the final event's says which one served it.
        response = as_dict(payload.get("response"))
        return Classified(model=as_str(response.get("model")), service_tier=service_tier(response))
    return NOTHING


def body(payload: Mapping[str, Any]) -> Classified:
    return _final(payload, terminal=False)


# OpenAI's usage object, read and normalised as every OpenAI API's is.
read_usage = read_openai_usage
normalise_usage = openai_normalised


def output_event(payload: Mapping[str, Any], out: OutputText) -> bool:
    kind = payload.get("type")
    if not (isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta")):
        return False
    index = payload.get("output_index", 0)
    index = index if isinstance(index, int) else 0
    if kind in _TEXT_DELTAS:
        out.add(("item", index), payload.get("delta"))
    elif kind == "response.function_call_arguments.delta":
        out.add(("item", index), payload.get("delta"), tool=True)
    return True


def output_body(payload: Mapping[str, Any], out: OutputText) -> bool:
    output = payload.get("output")
    if not isinstance(output, list):
        return False
    for index, item in enumerate(output):
        if not isinstance(item, Mapping):
            continue
        out.add(("item", index), item.get("arguments"), tool=True)
        parts = item.get("content")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, Mapping):
                out.add(("item", index), part.get("text"))
    return True
