"""Anthropic Messages wire format (``POST /v1/messages``), streamed and not.

Owns request parsing (tools → system → messages into prompt text in Anthropic's cache order,
``cache_control`` breakpoints deciding the cacheable prefix and their ``ttl`` its 1-hour part,
``thinking``, ``tool_choice``) and the event sequence: ``message_start`` (usage with input_tokens
EXCLUDING cache reads and writes, the writes split by TTL in ``cache_creation``, the tier),
``ping``, ``content_block_start``/``content_block_delta``/``content_block_stop`` for thinking
(``thinking_delta`` then ``signature_delta``), text (``text_delta``) and tool_use
(``input_json_delta``) blocks, ``message_delta`` with cumulative usage, ``message_stop``; the
non-streamed message; Anthropic's error shape. Implements `_wire.WireFormat` as a module.
Imports only the stdlib, `_wire`, `_faults` and `_schedule`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ._faults import anthropic_error
from ._schedule import Plan
from ._wire import (
    TEXT,
    Out,
    SimRequest,
    SseTemplate,
    ToolSpec,
    Usage,
    WireError,
    int_field,
    part_text,
    require_mapping,
    sse,
)

API = "anthropic.messages"
PATH = "/v1/messages"
# Anthropic bills prompt-cache writes and reports them.
REPORTS_CACHE_WRITES = True

_STOP = {"end": "end_turn", "length": "max_tokens", "tool": "tool_use"}

error_body = anthropic_error


class _Breakpoints:
    """Where the prompt's `cache_control` breakpoints end: the cacheable prefix is everything up
    to the last one, its 1-hour part everything up to the last one with `ttl: "1h"`. Anthropic
    answers 400 to a 1-hour breakpoint after a 5-minute one (longer TTLs must come first), and
    to a TTL other than "5m" and "1h"."""

    __slots__ = ("cacheable", "long", "short_seen")

    def __init__(self) -> None:
        self.cacheable = 0
        self.long = 0
        self.short_seen = False

    def see(self, block: Any, end: int) -> None:
        control = block.get("cache_control") if isinstance(block, Mapping) else None
        if not isinstance(control, Mapping):
            return
        ttl = control.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise WireError(400, f"cache_control.ttl: Input should be '5m' or '1h', got {ttl!r}")
        if ttl == "1h":
            if self.short_seen:
                raise WireError(
                    400,
                    "cache_control: a ttl='1h' breakpoint cannot come after a ttl='5m' one "
                    "(longer TTLs must come first)",
                )
            self.long = end
        else:
            self.short_seen = True
        self.cacheable = end


def parse(raw: Any, route: Mapping[str, str]) -> SimRequest:
    del route  # a fixed path
    body = require_mapping(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages: field required (a non-empty list)")
    max_tokens = int_field(body, "max_tokens")
    if max_tokens is None:
        raise WireError(400, "max_tokens: field required")
    # Anthropic's cache prefix order is tools, then system, then messages; a breakpoint makes
    # everything up to the end of its block cacheable.
    text = ""
    marks = _Breakpoints()
    tools = body.get("tools") or []
    for tool in tools if isinstance(tools, list) else []:
        text += part_text(tool)
        marks.see(tool, len(text))
    system = body.get("system")
    if isinstance(system, str):
        text += f"system: {system}\n"
    elif isinstance(system, list):
        text += "system: "
        for block in system:
            text += part_text(block)
            marks.see(block, len(text))
        text += "\n"
    for m in messages:
        if not isinstance(m, Mapping):
            raise WireError(400, "messages: each message must be an object")
        text += f"{m.get('role', '')}: "
        content = m.get("content")
        if isinstance(content, list):
            for block in content:
                text += part_text(block)
                marks.see(block, len(text))
        elif content is not None:
            text += str(content)
        text += "\n"
    marks.see(body, len(text))  # request-level automatic caching: the whole prompt
    thinking = body.get("thinking")
    reasoning, budget = "none", None
    if isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive"):
        reasoning = "stream"
        b = thinking.get("budget_tokens")
        budget = b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else None
    return SimRequest(
        api=API,
        model=str(body.get("model", "")),
        stream=bool(body.get("stream", False)),
        prompt_text=text,
        cacheable_chars=marks.cacheable,
        max_tokens=max_tokens,
        reasoning=reasoning,
        reasoning_budget=budget,
        tool=_chosen_tool(tools, body.get("tool_choice")),
        long_cacheable_chars=marks.long,
        # Without a Priority Tier commitment every request is served at the standard tier.
        service_tier="standard",
    )


def _chosen_tool(tools: Any, choice: Any) -> ToolSpec | None:
    """The tool to call: only when tool_choice is ``{"type": "any"}`` or names a tool."""
    if not isinstance(tools, list) or not isinstance(choice, Mapping):
        return None
    named = [t for t in tools if isinstance(t, Mapping) and t.get("name")]
    if not named:
        return None
    if choice.get("type") == "any":
        t = named[0]
    elif choice.get("type") == "tool":
        matches = [t for t in named if t.get("name") == choice.get("name")]
        if not matches:
            raise WireError(400, f"tool_choice names unknown tool {choice.get('name')!r}")
        t = matches[0]
    else:
        return None
    return ToolSpec(str(t["name"]), t.get("input_schema") or {})


def _usage(u: Usage, output_tokens: int, tier: str) -> dict[str, Any]:
    uncached = u.input_tokens - u.cache_read_tokens - u.cache_write_tokens
    one_hour = u.cache_write_1h_tokens or 0
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        # The writes by TTL: the total above, split.
        "cache_creation": {
            "ephemeral_5m_input_tokens": u.cache_write_tokens - one_hour,
            "ephemeral_1h_input_tokens": one_hour,
        },
        "output_tokens": output_tokens,
        "service_tier": tier,
    }


def _signature(rid: str) -> str:
    return base64.b64encode(hashlib.sha256(rid.encode()).digest()).decode()


def _block_start(channel: str, req: SimRequest, rid: str) -> dict[str, Any]:
    if channel == "reasoning":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if channel == "tool" and req.tool is not None:
        return {"type": "tool_use", "id": f"toolu_{rid}", "name": req.tool.name, "input": {}}
    return {"type": "text", "text": ""}


def _delta(channel: str, text: str) -> dict[str, Any]:
    if channel == "reasoning":
        return {"type": "thinking_delta", "thinking": text}
    if channel == "tool":
        return {"type": "input_json_delta", "partial_json": text}
    return {"type": "text_delta", "text": text}


def stream_events(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> list[Out]:
    del created
    h = plan.headers_ns
    message: dict[str, Any] = {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(usage, 1, req.service_tier),
    }
    outs = [
        Out(sse({"type": "message_start", "message": message}, "message_start"), "other", 0, h),
        Out(sse({"type": "ping"}, "ping"), "other", 0, h),
    ]
    index = -1
    channel: str | None = None

    def close_block(due: int) -> None:
        if channel == "reasoning":
            sig = {"type": "signature_delta", "signature": _signature(rid)}
            data = {"type": "content_block_delta", "index": index, "delta": sig}
            outs.append(Out(sse(data, "content_block_delta"), "other", 0, due))
        if channel is not None:
            data = {"type": "content_block_stop", "index": index}
            outs.append(Out(sse(data, "content_block_stop"), "other", 0, due))

    template: SseTemplate | None = None
    for i, p in enumerate(plan.pieces):
        if p.channel != channel:
            close_block(p.due_ns)
            index += 1
            channel = p.channel
            start = {
                "type": "content_block_start",
                "index": index,
                "content_block": _block_start(p.channel, req, rid),
            }
            outs.append(Out(sse(start, "content_block_start"), "other", 0, p.due_ns))
            data = {"type": "content_block_delta", "index": index, "delta": _delta(channel, TEXT)}
            template = SseTemplate(data, "content_block_delta")
        assert template is not None
        outs.append(Out(template.render(p.text), p.channel, p.tokens, p.due_ns, i))
    end = plan.end_ns
    close_block(end)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": _STOP[finish], "stop_sequence": None},
        "usage": _usage(usage, usage.output_tokens, req.service_tier),
    }
    outs.append(Out(sse(delta, "message_delta"), "other", 0, end))
    outs.append(Out(sse({"type": "message_stop"}, "message_stop"), "other", 0, end))
    return outs


def json_body(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> dict[str, Any]:
    del created
    content: list[dict[str, Any]] = []
    thinking = "".join(p.text for p in plan.pieces if p.channel == "reasoning")
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": _signature(rid)})
    if req.tool is not None:
        args = "".join(p.text for p in plan.pieces if p.channel == "tool")
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{rid}",
                "name": req.tool.name,
                "input": json.loads(args) if args else {},
            }
        )
    else:
        text = "".join(p.text for p in plan.pieces if p.channel == "content")
        content.append({"type": "text", "text": text})
    return {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": content,
        "stop_reason": _STOP[finish],
        "stop_sequence": None,
        "usage": _usage(usage, usage.output_tokens, req.service_tier),
    }


def stream_error(message: str, sequence: int) -> bytes:
    """A mid-stream ``event: error`` as Anthropic sends it (overloaded, the common case)."""
    del sequence
    return sse(anthropic_error(529, message), "error")
