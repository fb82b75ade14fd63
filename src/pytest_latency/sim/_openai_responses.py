"""OpenAI Responses wire format (``POST /v1/responses``), streamed and not.

Owns request parsing (``instructions`` + ``input`` into prompt text, ``max_output_tokens``,
``reasoning``, function tools, ``tool_choice`` and ``service_tier``) and the event sequence:
``response.created`` (echoing the tier asked for), ``response.in_progress``, ``output_item.added``,
``content_part.added``, ``output_text.delta`` × N (or ``function_call_arguments.delta`` × N), the
matching ``.done`` events and ``response.completed`` with usage and the tier that served it, each
with a ``sequence_number``. Reasoning is hidden, as OpenAI reasoning models do: it costs decode
time and shows up in ``output_tokens_details`` only. Implements `_wire.WireFormat` as a module.
Imports only the stdlib, `_wire`, `_faults` and `_schedule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._faults import openai_error
from ._schedule import Plan
from ._wire import (
    Out,
    SimRequest,
    ToolSpec,
    Usage,
    WireError,
    int_field,
    openai_tier,
    require_mapping,
    sse,
    text_of,
)

API = "openai.responses"
PATH = "/v1/responses"
# OpenAI caches automatically and bills no writes: it reports cached (read) tokens only.
REPORTS_CACHE_WRITES = False


def parse(raw: Any, route: Mapping[str, str]) -> SimRequest:
    del route  # a fixed path
    body = require_mapping(raw)
    inp = body.get("input")
    if inp is None or inp == "" or inp == []:
        raise WireError(400, "input must be a non-empty string or list")
    parts: list[str] = []
    tools = body.get("tools") or []
    if isinstance(tools, list):
        parts.extend(text_of([t]) for t in tools)
    if isinstance(body.get("instructions"), str):
        parts.append(f"system: {body['instructions']}\n")
    if isinstance(inp, str):
        parts.append(f"user: {inp}\n")
    elif isinstance(inp, list):
        for item in inp:
            if isinstance(item, Mapping) and "content" in item:
                parts.append(f"{item.get('role', '')}: {text_of(item['content'])}\n")
            else:
                parts.append(text_of([item]))
    else:
        raise WireError(400, "input must be a string or a list of items")
    text = "".join(parts)
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    return SimRequest(
        api=API,
        model=str(body.get("model", "")),
        stream=bool(body.get("stream", False)),
        prompt_text=text,
        cacheable_chars=len(text),
        max_tokens=int_field(body, "max_output_tokens"),
        reasoning="hidden" if isinstance(reasoning, Mapping) and effort != "none" else "none",
        tool=_chosen_tool(tools, body.get("tool_choice")),
        service_tier=openai_tier(body),
    )


def _chosen_tool(tools: Any, choice: Any) -> ToolSpec | None:
    if not isinstance(tools, list):
        return None
    funcs = [t for t in tools if isinstance(t, Mapping) and t.get("type") == "function"]
    if not funcs:
        return None
    if choice == "required":
        f = funcs[0]
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        matches = [t for t in funcs if t.get("name") == choice.get("name")]
        if not matches:
            raise WireError(400, f"tool_choice names unknown function {choice.get('name')!r}")
        f = matches[0]
    else:
        return None
    return ToolSpec(str(f.get("name")), f.get("parameters") or {})


def _usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def _items(req: SimRequest, plan: Plan, rid: str, done: bool) -> list[dict[str, Any]]:
    status = "completed" if done else "in_progress"
    items: list[dict[str, Any]] = []
    if plan.hidden_tokens:
        items.append({"id": f"rs_{rid}", "type": "reasoning", "summary": []})
    if req.tool is not None:
        args = "".join(p.text for p in plan.pieces if p.channel == "tool") if done else ""
        items.append(
            {
                "id": f"fc_{rid}",
                "type": "function_call",
                "call_id": f"call_{rid}",
                "name": req.tool.name,
                "arguments": args,
                "status": status,
            }
        )
    else:
        text = "".join(p.text for p in plan.pieces if p.channel == "content")
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        items.append(
            {
                "id": f"msg_{rid}",
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": content if done else [],
            }
        )
    return items


def _response(
    req: SimRequest, plan: Plan, usage: Usage | None, rid: str, created: int, done: bool
) -> dict[str, Any]:
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": created,
        "status": "completed" if done else "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": req.max_tokens,
        "model": req.model,
        "output": _items(req, plan, rid, True) if done else [],
        # Until the response is done it echoes the tier asked for ("auto" when it names the
        # default); the finished one says which tier served it, as OpenAI's do.
        "service_tier": req.service_tier if done or req.service_tier != "default" else "auto",
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage(usage) if usage is not None and done else None,
        "metadata": {},
    }


def stream_events(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> list[Out]:
    del finish
    seq = 0
    outs: list[Out] = []

    def emit(
        kind_name: str,
        data: dict[str, Any],
        due: int,
        kind: str = "other",
        tokens: int = 0,
        piece: int | None = None,
    ) -> None:
        nonlocal seq
        outs.append(
            Out(
                sse({"type": kind_name, "sequence_number": seq, **data}, kind_name),
                kind,
                tokens,
                due,
                piece,
            )
        )
        seq += 1

    h = plan.headers_ns
    emit("response.created", {"response": _response(req, plan, None, rid, created, False)}, h)
    emit("response.in_progress", {"response": _response(req, plan, None, rid, created, False)}, h)
    first = plan.pieces[0].due_ns if plan.pieces else plan.end_ns
    done_items = _items(req, plan, rid, True)
    open_items = _items(req, plan, rid, False)
    index = 0
    if plan.hidden_tokens:
        # Reasoning is over by the time the first visible delta is due.
        emit("response.output_item.added", {"output_index": 0, "item": open_items[0]}, first)
        emit("response.output_item.done", {"output_index": 0, "item": done_items[0]}, first)
        index = 1
    item = open_items[index]
    emit("response.output_item.added", {"output_index": index, "item": item}, first)
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    if req.tool is None:
        emit(
            "response.content_part.added",
            {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
            first,
        )
    for i, p in enumerate(plan.pieces):
        if p.channel == "tool":
            emit(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": index, "delta": p.text},
                p.due_ns,
                "tool",
                p.tokens,
                i,
            )
        else:
            emit(
                "response.output_text.delta",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": p.text,
                    "logprobs": [],
                },
                p.due_ns,
                p.channel,
                p.tokens,
                i,
            )
    end = plan.end_ns
    final = done_items[index]
    if req.tool is None:
        text = final["content"][0]["text"]
        emit(
            "response.output_text.done",
            {
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
            end,
        )
        emit(
            "response.content_part.done",
            {
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "part": final["content"][0],
            },
            end,
        )
    else:
        emit(
            "response.function_call_arguments.done",
            {"item_id": item["id"], "output_index": index, "arguments": final["arguments"]},
            end,
        )
    emit("response.output_item.done", {"output_index": index, "item": final}, end)
    emit("response.completed", {"response": _response(req, plan, usage, rid, created, True)}, end)
    return outs


def json_body(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> dict[str, Any]:
    del finish
    return _response(req, plan, usage, rid, created, True)


error_body = openai_error


def stream_error(message: str, sequence: int) -> bytes:
    """The Responses API's mid-stream ``error`` event (the SDK yields it as ResponseErrorEvent)."""
    data = {
        "type": "error",
        "code": "server_error",
        "message": message,
        "param": None,
        "sequence_number": sequence,
    }
    return sse(data, "error")
