"""The fallback adapter for a call no registered API recognised (embeddings, odd proxies).

Owns what such a call still yields: the model and stream its body asked for, the provider error
its payloads signal (any envelope), and its output text, read by the first registered adapter
whose shape a payload has, so diagnosis can still tell when a later request carries this call's
output. It classifies no content and reads no usage: without knowing the API, no token timing is
claimed. An object, not a module, because it is built from the registry (`apis/__init__.py`).
May import only the stdlib and the metrics modules `_usage`, `_fingerprint` and
`apis._protocol`/`apis._shapes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_latency.metrics._fingerprint import OutputText
from pytest_latency.metrics._usage import Usage, UsageFields
from pytest_latency.metrics.apis._protocol import (
    NOTHING,
    Classified,
    ProviderError,
    Request,
    WireApi,
)
from pytest_latency.metrics.apis._shapes import body_request, openai_normalised, provider_error

NAME = "unknown"


class Unknown:
    __slots__ = ("_known",)

    NAME = NAME

    def __init__(self, known: tuple[WireApi, ...]) -> None:
        self._known = known

    def matches_path(self, path: str) -> bool:
        return False

    def matches_payload(self, payload: Mapping[str, Any]) -> bool:
        return False

    def request(self, path: str, payload: Mapping[str, Any] | None) -> Request:
        return body_request(path, payload)

    def error(self, payload: Mapping[str, Any]) -> ProviderError | None:
        return provider_error(payload)

    def event(self, event: str, payload: Mapping[str, Any]) -> Classified:
        return NOTHING

    def body(self, payload: Mapping[str, Any]) -> Classified:
        return NOTHING

    def read_usage(self, usage: Mapping[str, Any], previous: UsageFields) -> UsageFields:
        return previous

    def normalise_usage(self, fields: UsageFields) -> Usage:
        return openai_normalised(fields)

    def output_event(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        return any(api.output_event(payload, out) for api in self._known)

    def output_body(self, payload: Mapping[str, Any], out: OutputText) -> bool:
        return any(api.output_body(payload, out) for api in self._known)
