"""OpenAI legacy Completions (`POST /v1/completions`, still served by vLLM, SGLang, llama.cpp):
the adapter.

Owns how the API is recognised (its path, which `/chat/completions` is not; `object:
"text_completion"`); its chunks, bodies and usage are Chat's `choices` shape and OpenAI usage
object. Implements `WireApi` as a module. May import only the stdlib and the metrics modules
`_usage`, `_fingerprint` and `apis._protocol`/`apis._shapes`/`apis._choices`.
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

NAME = "openai.completions"


def matches_path(path: str) -> bool:
    return path.endswith("/completions") and not path.endswith("/chat/completions")


def matches_payload(payload: Mapping[str, Any]) -> bool:
    return payload.get("object") == "text_completion"


# The model and the stream are named in the body.
request = body_request
# Any envelope, whatever the path: proxies and compatible servers mix them.
error = provider_error


# Chat's `choices` shape answers for this adapter as it is.
event = _choices.event
body = _choices.body
output_event = _choices.output
output_body = _choices.output


# OpenAI's usage object, read and normalised as every OpenAI API's is.
read_usage = read_openai_usage
normalise_usage = openai_normalised
