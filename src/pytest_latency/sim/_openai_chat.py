"""OpenAI Chat Completions wire format (``POST /v1/chat/completions``), streamed and not.

Owns request parsing (messages and tools into prompt text, ``max_completion_tokens``, tool choice,
``reasoning_effort``, ``service_tier``) and the response shapes, each naming its service tier:
the role-only first chunk, content / ``reasoning_content`` / ``tool_calls`` deltas, the finish
chunk, the ``include_usage`` chunk with ``choices: []``, ``[DONE]``, the non-streamed
``chat.completion``, and OpenAI's error shape.
Implements `_wire.WireFormat` as a module. Imports only the stdlib, `_wire`, `_faults` and
`_schedule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._faults import openai_error
from ._schedule import Plan
from ._wire import (
    TEXT,
    Out,
    SimRequest,
    SseTemplate,
    ToolSpec,
    Usage,
    WireError,
    dumps,
    int_field,
    openai_tier,
    require_mapping,
    sse,
    text_of,
)

API = "openai.chat"
PATH = "/v1/chat/completions"
# OpenAI caches automatically and bills no writes: it reports cached (read) tokens only.
REPORTS_CACHE_WRITES = False

_FINISH = {"end": "stop", "length": "length", "tool": "tool_calls"}


def parse(raw: Any, route: Mapping[str, str]) -> SimRequest:
    del route  # a fixed path
    body = require_mapping(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list")
    tools = body.get("tools") or []
    parts = [dumps(t) for t in tools] if isinstance(tools, list) else []
    for m in messages:
        if not isinstance(m, Mapping):
            raise WireError(400, "each message must be an object")
        parts.append(f"{m.get('role', '')}: {text_of(m.get('content'))}\n")
        if m.get("tool_calls"):
            parts.append(dumps(m["tool_calls"]))
    text = "".join(parts)
    effort = body.get("reasoning_effort")
    stream_options = body.get("stream_options") or {}
    return SimRequest(
        api=API,
        model=str(body.get("model", "")),
        stream=bool(body.get("stream", False)),
        prompt_text=text,
        cacheable_chars=len(text),  # OpenAI caches every prompt automatically
        max_tokens=int_field(body, "max_completion_tokens", "max_tokens"),
        reasoning="stream" if effort not in (None, "none") else "none",
        tool=_chosen_tool(tools, body.get("tool_choice")),
        include_usage=bool(
            isinstance(stream_options, Mapping) and stream_options.get("include_usage")
        ),
        service_tier=openai_tier(body),
    )


def _chosen_tool(tools: Any, choice: Any) -> ToolSpec | None:
    """The tool to call: only when tool_choice is "required" or names a function."""
    if not isinstance(tools, list) or not tools:
        return None
    funcs = [t.get("function", {}) for t in tools if isinstance(t, Mapping)]
    funcs = [f for f in funcs if isinstance(f, Mapping) and f.get("name")]
    if not funcs:
        return None
    if choice == "required":
        f = funcs[0]
    elif isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        matches = [f for f in funcs if f.get("name") == name]
        if not matches:
            raise WireError(400, f"tool_choice names unknown function {name!r}")
        f = matches[0]
    else:
        return None
    return ToolSpec(str(f["name"]), f.get("parameters") or {})


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": u.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chunk_dict(
    base: dict[str, Any],
    delta: dict[str, Any],
    include_usage: bool,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    c = {
        **base,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if include_usage:
        c["usage"] = None
    return c


def stream_events(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> list[Out]:
    base: dict[str, Any] = {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": req.model,
        # Every chunk names the tier that serves the call, as OpenAI's do.
        "service_tier": req.service_tier,
        "system_fingerprint": "fp_sim",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return sse(_chunk_dict(base, delta, req.include_usage, finish_reason))

    outs = [Out(chunk({"role": "assistant", "content": ""}), "other", 0, plan.headers_ns)]
    templates = {
        "content": SseTemplate(_chunk_dict(base, {"content": TEXT}, req.include_usage)),
        "reasoning": SseTemplate(_chunk_dict(base, {"reasoning_content": TEXT}, req.include_usage)),
        "tool": SseTemplate(
            _chunk_dict(
                base,
                {"tool_calls": [{"index": 0, "function": {"arguments": TEXT}}]},
                req.include_usage,
            )
        ),
    }
    tool_started = False
    for i, p in enumerate(plan.pieces):
        if p.channel == "tool" and not tool_started and req.tool is not None:
            tool_started = True
            head = {
                "index": 0,
                "id": f"call_{rid}",
                "type": "function",
                "function": {"name": req.tool.name, "arguments": ""},
            }
            outs.append(Out(chunk({"tool_calls": [head]}), "other", 0, p.due_ns))
        outs.append(Out(templates[p.channel].render(p.text), p.channel, p.tokens, p.due_ns, i))
    end = plan.end_ns
    outs.append(Out(chunk({}, _FINISH[finish]), "other", 0, end))
    if req.include_usage:
        outs.append(Out(sse({**base, "choices": [], "usage": _usage(usage)}), "other", 0, end))
    outs.append(Out(sse("[DONE]"), "other", 0, end))
    return outs


def json_body(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> dict[str, Any]:
    text = "".join(p.text for p in plan.pieces if p.channel == "content")
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or req.tool is None else None,
        "refusal": None,
    }
    reasoning = "".join(p.text for p in plan.pieces if p.channel == "reasoning")
    if reasoning:
        message["reasoning_content"] = reasoning
    if req.tool is not None:
        args = "".join(p.text for p in plan.pieces if p.channel == "tool")
        message["tool_calls"] = [
            {
                "id": f"call_{rid}",
                "type": "function",
                "function": {"name": req.tool.name, "arguments": args},
            }
        ]
    return {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "service_tier": req.service_tier,
        "system_fingerprint": "fp_sim",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _FINISH[finish]}
        ],
        "usage": _usage(usage),
    }


error_body = openai_error


def stream_error(message: str, sequence: int) -> bytes:
    """A mid-stream error as OpenAI sends it: a data line holding an ``error`` object."""
    del sequence
    return sse(openai_error(500, message))
