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

from pytest_latency.metrics._usage import Usage, UsageFields
from pytest_latency.metrics.apis import _choices
from pytest_latency.metrics.apis._shapes import openai_normalised, openai_usage, provider_error

NAME = "openai.completions"


def matches_path(path: str) -> bool:
    return path.endswith("/completions") and not path.endswith("/chat/completions")


def matches_payload(payload: Mapping[str, Any]) -> bool:
    return payload.get("object") == "text_completion"


# Any envelope, whatever the path: proxies and compatible servers mix them.
error = provider_error


# Chat's `choices` shape answers for this adapter as it is.
event = _choices.event
body = _choices.body
output_event = _choices.output
output_body = _choices.output


def read_usage(usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
    del previous  # each usage object is complete
    return openai_usage(usage)


def normalise_usage(fields: UsageFields) -> Usage:
    return openai_normalised(fields)
