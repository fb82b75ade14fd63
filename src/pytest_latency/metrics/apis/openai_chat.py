"""OpenAI Chat Completions (`POST /v1/chat/completions`): the adapter.

Owns how the API is recognised (its path; `object: "chat.completion[.chunk]"`) and that its usage
is one complete object (the `include_usage` chunk, or on some compatible servers a cumulative one
per chunk: the latest replaces the earlier) whose `prompt_tokens` include
`prompt_tokens_details.cached_tokens`. The `choices` shape itself is `_choices`'. Implements
`WireApi` as a module. May import only the stdlib and the metrics modules `_usage`,
`_fingerprint` and `apis._protocol`/`apis._shapes`/`apis._choices`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_latency.metrics.apis import _choices
from pytest_latency.metrics.apis._shapes import (
    body_request,
    openai_normalised,
    provider_error,
    read_openai_usage,
)

NAME = "openai.chat"


def matches_path(path: str) -> bool:
    return path.endswith("/chat/completions")


def matches_payload(payload: Mapping[str, Any]) -> bool:
    obj = payload.get("object")
    return isinstance(obj, str) and obj.startswith("chat.completion")


# The model and the stream are named in the body.
request = body_request
# Any envelope, whatever the path: proxies and compatible servers mix them.
error = provider_error


# The `choices` shape (shared with legacy Completions) answers for this adapter as it is.
event = _choices.event
body = _choices.body
output_event = _choices.output
output_body = _choices.output


# OpenAI's usage object, read and normalised as every OpenAI API's is.
read_usage = read_openai_usage
normalise_usage = openai_normalised
