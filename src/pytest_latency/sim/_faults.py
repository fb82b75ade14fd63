"""Faults: which one a request gets, and the error bodies the providers send for them.

Owns the fault decision (forced by the model's ``fault`` field, optionally only for the first N SDK
attempts, or drawn from the ``fault_*_prob`` fields), where in a stream a mid-stream fault lands,
the retry headers, and the providers' error envelopes (OpenAI ``{"error": {...}}``, Anthropic
``{"type": "error", "error": {...}}``, Google ``{"error": {code, message, status}}``). Imports only
the stdlib and `_model`.
"""

from __future__ import annotations

import math
import random
from typing import Any

from ._model import LatencyModel

__all__ = [
    "HTTP_FAULTS",
    "MID_STREAM_FAULTS",
    "anthropic_error",
    "choose_fault",
    "fault_piece",
    "google_error",
    "openai_error",
    "retry_headers",
]

# Faults answered with an HTTP error status instead of a response.
HTTP_FAULTS = {"429": 429, "500": 500, "529": 529}
# Faults that happen after some deltas have been streamed (non-streamed requests: see server).
MID_STREAM_FAULTS = ("sse_error", "drop", "stall")

_MESSAGES = {
    429: "Rate limit exceeded (simulated).",
    500: "Internal server error (simulated).",
    529: "Overloaded (simulated).",
}


def choose_fault(model: LatencyModel, rng: random.Random, attempt: int) -> str | None:
    """The fault for this attempt, or None. A forced fault wins over the random ones.

    `attempt` is the SDK's ``x-stainless-retry-count`` (0 for the first try), so
    ``fault_attempts=1`` fails the first try and lets the SDK's retry succeed.
    """
    if model.fault and (model.fault_attempts == 0 or attempt < model.fault_attempts):
        return model.fault
    # One draw against the cumulative probabilities, so the faults are mutually exclusive and the
    # jitter stream (a different rng) is unaffected by them.
    r = rng.random()
    for name, p in (
        ("429", model.fault_429_prob),
        ("500", model.fault_500_prob),
        ("529", model.fault_529_prob),
        ("sse_error", model.fault_sse_error_prob),
        ("drop", model.fault_drop_prob),
        ("stall", model.fault_stall_prob),
    ):
        if r < p:
            return name
        r -= p
    return None


def fault_piece(model: LatencyModel, n_pieces: int) -> int:
    """Index of the delta a mid-stream fault replaces (or, for a stall, precedes).

    At least one delta is sent first whenever there are two or more, so the client has begun
    reading a successful stream when the fault hits.
    """
    if n_pieces <= 1:
        return 0
    return min(n_pieces - 1, max(1, int(n_pieces * model.fault_at)))


def retry_headers(model: LatencyModel) -> dict[str, str]:
    """retry-after (whole seconds, per RFC 9110) plus retry-after-ms, which both SDKs prefer."""
    return {
        "retry-after": str(max(1, math.ceil(model.retry_after_ms / 1000.0))),
        "retry-after-ms": f"{model.retry_after_ms:g}",
    }


def message_for(status: int) -> str:
    return _MESSAGES.get(status, "Error (simulated).")


_OPENAI_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    529: ("server_error", "overloaded"),
}

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def openai_error(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error envelope: ``{"error": {message, type, param, code}}``."""
    kind, code = _OPENAI_TYPES.get(status, ("server_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error envelope: ``{"type": "error", "error": {type, message}}``."""
    return {
        "type": "error",
        "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
    }


# Google's canonical status names (google.rpc.Code) for the statuses the simulator answers with;
# an overloaded Gemini model answers 503 UNAVAILABLE ("The model is overloaded").
_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    529: "UNAVAILABLE",
}


def google_error(status: int, message: str) -> dict[str, Any]:
    """Google's error envelope: ``{"error": {code, message, status}}`` (pydantic-ai's Vertex
    cassette: ``{"code": 400, "message": …, "status": "INVALID_ARGUMENT"}``)."""
    return {
        "error": {
            "code": status,
            "message": message,
            "status": _GOOGLE_STATUSES.get(status, "UNKNOWN"),
        }
    }
