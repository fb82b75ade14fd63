"""JSON shapes more than one wire API shares: typed readers of decoded values, the request's
`model` and `stream` fields, the service tier field, the provider error envelopes and OpenAI's
usage object.

Every adapter accepts every error envelope: proxies and compatible servers put any of them
behind any path. May import only the stdlib and the metrics modules `_usage` and
`apis._protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_latency.metrics._usage import Usage, UsageFields, count
from pytest_latency.metrics.apis._protocol import ProviderError, Request


def is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_str(value: object) -> str | None:
    """A non-empty string, or an integer as one (some servers send numeric error codes)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def body_request(path: str, payload: Mapping[str, Any] | None) -> Request:
    """`WireApi.request` for the APIs that name the model and the stream in the body."""
    del path
    if payload is None:
        return Request(None, False)
    model = payload.get("model")
    return Request(model if isinstance(model, str) else None, payload.get("stream") is True)


def service_tier(payload: Mapping[str, Any]) -> str | None:
    """The service tier a payload names (`service_tier`: OpenAI's "default", "flex",
    "priority", "scale", Anthropic's "standard", "priority", "batch"), as sent; None when it
    names none. Prices differ by tier; the metrics keep the name, not its meaning."""
    tier = payload.get("service_tier")
    return tier if is_text(tier) else None


def provider_error(payload: Mapping[str, Any]) -> ProviderError | None:
    """The provider error a payload signals, or None.

    Anthropic: {"type": "error", "error": {"type", "message"}}; OpenAI: {"error": {"type",
    "code", "message"}}; Google: {"error": {"code": 429, "message", "status":
    "RESOURCE_EXHAUSTED"}} (the status names the kind, the code is the HTTP status); Responses
    `error` event: {"type": "error", "code", "message"}; vLLM-style: {"object": "error", "type",
    "message"}.
    """
    err = payload.get("error")
    if isinstance(err, dict):
        status = err.get("status")
        google = status if isinstance(status, str) and status else None
        kind = as_str(err.get("type")) or google or as_str(err.get("code")) or "error"
        return ProviderError(kind, as_str(err.get("message")))
    if isinstance(err, str) and err:
        return ProviderError("error", err)
    if payload.get("type") == "error":
        return ProviderError(as_str(payload.get("code")) or "error", as_str(payload.get("message")))
    if payload.get("object") == "error":
        kind = as_str(payload.get("type")) or as_str(payload.get("code")) or "error"
        return ProviderError(kind, as_str(payload.get("message")))
    return None


def openai_usage(usage: Mapping[str, Any]) -> UsageFields:
    """One complete OpenAI usage object. Chat/Completions say prompt/completion, Responses says
    input/output (compatible servers mix them up, so both are read); both include cached."""
    chat = "prompt_tokens" in usage or "completion_tokens" in usage
    prompt = as_dict(usage.get("prompt_tokens_details" if chat else "input_tokens_details"))
    output = as_dict(usage.get("completion_tokens_details" if chat else "output_tokens_details"))
    input_tokens = count(usage.get("prompt_tokens" if chat else "input_tokens"))
    output_tokens = count(usage.get("completion_tokens" if chat else "output_tokens"))
    reasoning = count(output.get("reasoning_tokens"))
    total = count(usage.get("total_tokens"))
    # OpenAI counts reasoning inside completion_tokens (total = prompt + completion); xAI leaves
    # it out (total = prompt + completion + reasoning: 12 + 1 + 290 = 303, grok-3-mini in
    # vercel/ai's recorded fixture), and Gemini's OpenAI-compatible endpoint leaves it out and
    # does not report it (35 + 12 against a total of 109: 62 hidden thinking tokens).
    # output_tokens means every generated token, so the total's arithmetic decides (issue #14).
    if input_tokens is not None and output_tokens is not None and total is not None:
        gap = total - input_tokens - output_tokens
        if reasoning and gap == reasoning:
            output_tokens += reasoning
        elif reasoning is None and gap > 0:
            reasoning = gap
            output_tokens += gap
    return UsageFields(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=count(prompt.get("cached_tokens")),
        cache_write_tokens=count(prompt.get("cache_write_tokens")),
        reasoning_tokens=reasoning,
    )


def read_openai_usage(usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
    """`WireApi.read_usage` for OpenAI's APIs: each usage object is complete, so the earlier
    ones do not matter."""
    del previous
    return openai_usage(usage)


def openai_normalised(fields: UsageFields) -> Usage:
    """OpenAI's counts already mean what the package means: input includes cached tokens."""
    return Usage(
        input_tokens=fields.input_tokens,
        output_tokens=fields.output_tokens,
        cache_read_tokens=fields.cache_read_tokens,
        cache_write_tokens=fields.cache_write_tokens,
        reasoning_tokens=fields.reasoning_tokens,
    )
