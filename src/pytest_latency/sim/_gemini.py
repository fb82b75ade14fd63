"""Gemini's native wire format (``POST /v1/models/{model}:generateContent``, or ``/v1beta/…``, and
``:streamGenerateContent?alt=sse``), streamed and not.

Owns request parsing (the model and the method from the path; ``tools`` → ``systemInstruction``
→ ``contents`` into prompt text, the whole of it cacheable, as Gemini's implicit caching is;
``generationConfig.maxOutputTokens``; ``thinkingConfig``: ``includeThoughts`` streams thought
parts, a thinking budget or level without it thinks hidden, ``thinkingBudget: 0`` not at all;
``toolConfig.functionCallingConfig.mode: "ANY"`` calls a declared function) and the answer: each
streamed chunk a whole ``GenerateContentResponse`` (one part: a thought or text delta, or the
function call delivered whole with its arguments; cumulative ``usageMetadata`` on every chunk;
``finishReason`` on the last), ended ``\\r\\n\\r\\n`` as Google's are; the non-streamed response;
Google's error envelope, in a chunk mid-stream too. Usage as Gemini reports it:
``promptTokenCount`` includes ``cachedContentTokenCount``, the thinking is
``thoughtsTokenCount`` beside ``candidatesTokenCount``, zero counts are left out and the tier is
``usageMetadata.serviceTier``. Shapes from pydantic/pydantic-ai @ 4fda389's recorded
tests/models/cassettes/test_google/ streams (docs/metrics.md names them). Implements
`_wire.WireFormat` as a module. Imports only the stdlib, `_wire`, `_faults` and `_schedule`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._faults import google_error
from ._schedule import Plan
from ._wire import (
    TEXT,
    Out,
    SimRequest,
    ToolSpec,
    Usage,
    WireError,
    dumps,
    int_field,
    part_text,
    require_mapping,
)

API = "gemini.generate_content"
# The API version is the client's choice: google-genai 3 defaults to v1, the docs and 2.x to v1beta.
PATH = "/{version:v1[a-z0-9]*}/models/{model:[^/:]+}:{method}"
# Gemini's implicit cache bills no writes: usage names the cached tokens read only.
REPORTS_CACHE_WRITES = False

_STREAM = "streamGenerateContent"
_METHODS = frozenset({"generateContent", _STREAM})
_FINISH = {"end": "STOP", "length": "MAX_TOKENS", "tool": "STOP"}
# Stand-ins for the two counts a chunk's cumulative usage changes (rendered once per stream).
_FIRST = "\u2460"
_SECOND = "\u2461"
_END = b"\r\n\r\n"

error_body = google_error


def parse(raw: Any, route: Mapping[str, str]) -> SimRequest:
    method = route.get("method", "")
    if method not in _METHODS:
        raise WireError(404, f"method {method!r} is not supported: use generateContent")
    body = require_mapping(raw)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise WireError(400, "* GenerateContentRequest.contents: contents is not specified")
    # Gemini caches a prompt's prefix by itself: tools, the system instruction, then contents.
    text = ""
    tools = body.get("tools") or []
    for tool in tools if isinstance(tools, list) else []:
        text += part_text(tool)
    system = body.get("systemInstruction")
    if isinstance(system, Mapping):
        text += "system: " + _parts_text(system.get("parts")) + "\n"
    for content in contents:
        if not isinstance(content, Mapping):
            raise WireError(400, "* GenerateContentRequest.contents: each must be an object")
        text += f"{content.get('role', '')}: {_parts_text(content.get('parts'))}\n"
    config = body.get("generationConfig") or {}
    if not isinstance(config, Mapping):
        raise WireError(400, "generationConfig must be an object")
    reasoning, budget = _thinking(config.get("thinkingConfig"))
    return SimRequest(
        api=API,
        model=route.get("model", ""),
        stream=method == _STREAM,
        prompt_text=text,
        cacheable_chars=len(text),
        max_tokens=int_field(config, "maxOutputTokens"),
        reasoning=reasoning,
        reasoning_budget=budget,
        tool=_chosen_tool(tools, body.get("toolConfig")),
        # The Gemini API names the tier that served a call (its 2026 recordings: "standard").
        service_tier="standard",
    )


def _parts_text(parts: Any) -> str:
    return "".join(part_text(p) for p in parts) if isinstance(parts, list) else ""


def _field(config: Mapping[str, Any], camel: str) -> Any:
    """A field by its JSON name or its proto name: Google's JSON parser takes both, and
    google-genai sends `thinkingConfig`'s fields as `include_thoughts`, `thinking_budget`."""
    if camel in config:
        return config[camel]
    return config.get("".join(f"_{c.lower()}" if c.isupper() else c for c in camel))


def _thinking(config: Any) -> tuple[str, int | None]:
    """("none" | "stream" | "hidden", the thinking budget): thoughts are streamed only with
    `includeThoughts`; a budget or level without it thinks unseen, a budget of 0 not at all."""
    if not isinstance(config, Mapping):
        return "none", None
    budget = _field(config, "thinkingBudget")
    if isinstance(budget, bool) or not isinstance(budget, (int, type(None))):
        raise WireError(400, f"thinkingBudget must be an integer, got {budget!r}")
    if budget == 0:
        return "none", None
    limit = budget if budget is not None and budget > 0 else None  # -1: dynamic
    if _field(config, "includeThoughts") is True:
        return "stream", limit
    if budget is not None or _field(config, "thinkingLevel") is not None:
        return "hidden", limit
    return "none", None


def _chosen_tool(tools: Any, config: Any) -> ToolSpec | None:
    """The function to call: only in mode "ANY" (the first declared, or the first of
    `allowedFunctionNames`); "AUTO" lets the model answer in text."""
    calling = config.get("functionCallingConfig") if isinstance(config, Mapping) else None
    if not isinstance(calling, Mapping) or calling.get("mode") != "ANY":
        return None
    declared = [
        d
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, Mapping)
        for d in tool.get("functionDeclarations") or []
        if isinstance(d, Mapping) and d.get("name")
    ]
    allowed = calling.get("allowedFunctionNames")
    if isinstance(allowed, list) and allowed:
        declared = [d for d in declared if d.get("name") in allowed]
        if not declared:
            raise WireError(400, f"allowedFunctionNames names no declared function: {allowed}")
    if not declared:
        return None
    chosen = declared[0]
    schema = chosen.get("parametersJsonSchema", chosen.get("parameters")) or {}
    return ToolSpec(str(chosen["name"]), _lower_types(schema))


def _lower_types(schema: Any) -> Any:
    """Gemini's OpenAPI-style schemas name types in capitals ("OBJECT", "STRING")."""
    if isinstance(schema, Mapping):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _usage(u: Usage, candidates: Any, thoughts: Any, tier: str) -> dict[str, Any]:
    """`usageMetadata` with the candidates' and thoughts' counts so far (ints, or the stand-ins
    of a template); zero counts are left out, as Gemini's proto3 JSON does."""
    out: dict[str, Any] = {"promptTokenCount": u.input_tokens}
    if candidates != 0:
        out["candidatesTokenCount"] = candidates
    out["totalTokenCount"] = (
        u.input_tokens + candidates + thoughts
        if isinstance(candidates, int) and isinstance(thoughts, int)
        else _SECOND
    )
    if u.cache_read_tokens:
        out["cachedContentTokenCount"] = u.cache_read_tokens
    out["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.input_tokens}]
    if u.cache_read_tokens:
        out["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.cache_read_tokens}]
    if thoughts != 0:
        out["thoughtsTokenCount"] = thoughts
    out["serviceTier"] = tier
    return out


def _response(
    req: SimRequest,
    rid: str,
    parts: list[dict[str, Any]],
    usage: dict[str, Any],
    finish: str | None = None,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": req.model,
        "responseId": rid,
    }


def _chunk(data: Mapping[str, Any]) -> bytes:
    return b"data: " + dumps(data).encode() + _END


class _Chunks:
    """One chunk shape rendered once, with the delta's text and two counts swapped per chunk
    (the thoughts or candidates so far, and the total; in whatever order the JSON holds them):
    dumping a whole chunk costs ~10 µs, a long stream has hundreds."""

    __slots__ = ("_pieces", "_slots")

    def __init__(self, data: Mapping[str, Any]) -> None:
        rendered = _chunk(data)
        marks = {dumps(m).encode(): m for m in (TEXT, _FIRST, _SECOND)}
        found = sorted((rendered.index(mark), mark) for mark in marks)
        pieces, slots, at = [], [], 0
        for index, mark in found:
            pieces.append(rendered[at:index])
            slots.append(marks[mark])
            at = index + len(mark)
        pieces.append(rendered[at:])
        self._pieces = tuple(pieces)
        self._slots = tuple(slots)

    def render(self, text: str, first: int, second: int) -> bytes:
        values = {
            TEXT: json.dumps(text, ensure_ascii=False).encode(),
            _FIRST: str(first).encode(),
            _SECOND: str(second).encode(),
        }
        out = [self._pieces[0]]
        for slot, piece in zip(self._slots, self._pieces[1:], strict=True):
            out.append(values[slot])
            out.append(piece)
        return b"".join(out)


def _call_args(plan: Plan, first: int, last: int) -> Any:
    args = "".join(p.text for p in plan.pieces[first : last + 1])
    return json.loads(args) if args else {}


def stream_events(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> list[Out]:
    del created
    tier = req.service_tier
    # Thoughts are counted as they stream; hidden thinking is all counted from the first chunk.
    thoughts = plan.hidden_tokens
    all_thoughts = usage.reasoning_tokens
    thinking = _Chunks(
        _response(req, rid, [{"text": TEXT, "thought": True}], _usage(usage, 0, _FIRST, tier))
    )
    answering = _Chunks(
        _response(req, rid, [{"text": TEXT}], _usage(usage, _FIRST, all_thoughts, tier))
    )
    outs: list[Out] = []
    candidates = 0
    pieces = plan.pieces
    tools = [i for i, p in enumerate(pieces) if p.channel == "tool"]
    last = len(pieces) - 1
    for i, p in enumerate(pieces):
        if p.channel == "tool":
            continue
        final = _FINISH[finish] if i == last else None
        if p.channel == "reasoning":
            thoughts += p.tokens
            payload = thinking.render(p.text, thoughts, usage.input_tokens + thoughts)
        else:
            candidates += p.tokens
            if final is None:
                total = usage.input_tokens + candidates + all_thoughts
                payload = answering.render(p.text, candidates, total)
            else:
                parts = [{"text": p.text}]
                final_usage = _usage(usage, candidates, all_thoughts, tier)
                payload = _chunk(_response(req, rid, parts, final_usage, final))
        outs.append(Out(payload, p.channel, p.tokens, p.due_ns, i))
    if tools and req.tool is not None:
        # Gemini streams a function call whole, once its arguments are complete.
        first, end = tools[0], tools[-1]
        call = {"name": req.tool.name, "args": _call_args(plan, first, end)}
        tokens = sum(pieces[i].tokens for i in tools)
        candidates += tokens
        final_usage = _usage(usage, candidates, all_thoughts, tier)
        data = _response(req, rid, [{"functionCall": call}], final_usage, _FINISH[finish])
        outs.append(Out(_chunk(data), "tool", tokens, pieces[end].due_ns, first, len(tools)))
    elif not pieces or pieces[-1].channel != "content":
        # Nothing answered the last delta (no output, or thoughts only): a finish chunk.
        final_usage = _usage(usage, candidates, all_thoughts, tier)
        data = _response(req, rid, [{"text": ""}], final_usage, _FINISH[finish])
        outs.append(Out(_chunk(data), "other", 0, plan.end_ns))
    return outs


def json_body(
    req: SimRequest, plan: Plan, usage: Usage, rid: str, created: int, finish: str
) -> dict[str, Any]:
    del created
    parts: list[dict[str, Any]] = []
    thinking = "".join(p.text for p in plan.pieces if p.channel == "reasoning")
    if thinking:
        parts.append({"text": thinking, "thought": True})
    if req.tool is not None:
        tools = [i for i, p in enumerate(plan.pieces) if p.channel == "tool"]
        args = _call_args(plan, tools[0], tools[-1]) if tools else {}
        parts.append({"functionCall": {"name": req.tool.name, "args": args}})
    else:
        parts.append({"text": "".join(p.text for p in plan.pieces if p.channel == "content")})
    thoughts = usage.reasoning_tokens
    final_usage = _usage(usage, usage.output_tokens - thoughts, thoughts, req.service_tier)
    return _response(req, rid, parts, final_usage, _FINISH[finish])


def stream_error(message: str, sequence: int) -> bytes:
    """A chunk holding Google's error envelope (503: the model is overloaded), which google-genai
    raises as an `APIError` when it reads it."""
    del sequence
    return _chunk(google_error(503, message))
