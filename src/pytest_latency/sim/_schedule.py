"""The timing plan of one response: when its headers go out and when each streamed delta is due.

Owns `Plan`/`Piece` and `build_plan`, which turns a `LatencyModel`, the request's uncached prompt
tokens, the generated output tokens per channel and the server's current load into absolute
offsets from the moment the request was received. The server sleeps until each offset; it never
adds up sleeps, so lateness never accumulates. Imports only the stdlib and `_model`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ._model import LatencyModel

__all__ = ["CHANNELS", "Piece", "Plan", "build_plan", "decode_ns_per_token", "prefill_ns"]

# Output channels, in the vocabulary of the ground-truth log. "hidden" tokens (OpenAI Responses
# reasoning) cost decode time but are never streamed.
CHANNELS = ("reasoning", "content", "tool", "hidden")


@dataclass(frozen=True, slots=True)
class Piece:
    """One streamed delta: its channel, text, output-token count and due offset (ns)."""

    channel: str
    text: str
    tokens: int
    due_ns: int


@dataclass(frozen=True, slots=True)
class Plan:
    """The schedule of one response, offsets in ns from when the request was received."""

    headers_ns: int
    pieces: tuple[Piece, ...]
    tail: bool
    prefill_ns: int
    hidden_tokens: int

    @property
    def end_ns(self) -> int:
        return self.pieces[-1].due_ns if self.pieces else self.headers_ns

    def tokens(self, channel: str) -> int:
        if channel == "hidden":
            return self.hidden_tokens
        return sum(p.tokens for p in self.pieces if p.channel == channel)


def prefill_ns(model: LatencyModel, uncached_tokens: int) -> float:
    """The modelled prefill of `uncached_tokens` (before jitter), in ns."""
    n = uncached_tokens
    return (model.prefill_us_per_token * n + model.prefill_us_per_token_sq * n * n) * 1e3


def decode_ns_per_token(model: LatencyModel, streams: int) -> float:
    """The modelled decode time of one output token (before jitter) while `streams` requests,
    this one included, are being served, in ns."""
    return (
        model.decode_ms_per_token * 1e6 * (1.0 + model.concurrency_slowdown * max(0, streams - 1))
    )


def build_plan(
    model: LatencyModel,
    rng: random.Random,
    *,
    uncached_tokens: int,
    channels: Sequence[tuple[str, Sequence[str]]],
    active_streams: int = 1,
    stall_before: int | None = None,
) -> Plan:
    """Plan the response. `channels` is the generated output as (channel, tokens) in send order.

    First token = headers + tail + prefill + decode of the first chunk's tokens; every later chunk
    follows its predecessor by the decode time of its own tokens. Each step is scaled by its own
    mean-one lognormal jitter factor, drawn from `rng` in a fixed order (deterministic per seed).
    `stall_before` inserts ``model.stall_ms`` before that piece (a mid-stream stall fault).
    """
    sigma = model.jitter

    def j() -> float:
        if sigma <= 0.0:
            return 1.0
        return math.exp(rng.gauss(0.0, sigma) - sigma * sigma / 2.0)

    headers = model.ttfb_ms * 1e6 * j()
    # Draw unconditionally so the jitter sequence does not depend on tail_prob.
    tail = rng.random() < model.tail_prob
    prefill = prefill_ns(model, uncached_tokens) * j()
    per_token = decode_ns_per_token(model, active_streams)
    t = headers + (model.tail_ms * 1e6 if tail else 0.0) + prefill
    pieces: list[Piece] = []
    hidden = 0
    size = model.tokens_per_chunk
    for channel, toks in channels:
        if channel == "hidden":
            hidden += len(toks)
            t += per_token * len(toks) * j()
            continue
        for start in range(0, len(toks), size):
            group = toks[start : start + size]
            t += per_token * len(group) * j()
            if stall_before is not None and len(pieces) == stall_before:
                t += model.stall_ms * 1e6
            pieces.append(Piece(channel, "".join(group), len(group), round(t)))
    return Plan(
        headers_ns=round(headers),
        pieces=tuple(pieces),
        tail=tail,
        prefill_ns=round(prefill),
        hidden_tokens=hidden,
    )
