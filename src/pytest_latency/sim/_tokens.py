"""Tokenisation and deterministic text: how the simulator counts prompt tokens and writes answers.

Owns the token approximation (4 characters of prompt text per token, rounded up), the chained
block hashes the prefix cache matches on, request fingerprints, and the seeded generators for
answer text, reasoning text and tool-call arguments. Stdlib only; imports nothing from the package.

Prompt tokens are *counted* from characters, while output tokens are *generated* one by one (each
generated token is one short word or one 4-character slice of JSON), so usage numbers are exact for
what was streamed and cheap to compute for what was sent.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "block_hashes",
    "count_tokens",
    "fingerprint",
    "text_tokens",
    "tool_argument_tokens",
]

CHARS_PER_TOKEN = 4

# A small vocabulary keeps generated text readable and the token/char ratio close to real English.
_VOCABULARY = (
    "the model reads the prompt and writes a short answer about latency cache tokens time "
    "first stream chunk prefill decode server client request response budget test plugin "
    "measure wire event usage output input block prefix window batch queue tail jitter seed "
    "simple fast slow steady quiet clear exact small large warm cold hot early late ready"
)
_WORDS = tuple(_VOCABULARY.split(" "))


def count_tokens(text: str) -> int:
    """Prompt tokens in `text`: one per 4 characters, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def block_hashes(text: str, block_tokens: int, limit_tokens: int) -> list[bytes]:
    """Chained hashes of the whole blocks in the first `limit_tokens` tokens of `text`.

    Hash i covers blocks 0..i, so equal hashes mean equal prefixes and one changed byte changes
    every hash from its block on, exactly as a block-based KV prefix cache behaves.
    """
    block_chars = block_tokens * CHARS_PER_TOKEN
    n_blocks = min(limit_tokens, count_tokens(text)) // block_tokens
    out: list[bytes] = []
    prev = b""
    for i in range(n_blocks):
        # Slice characters, not bytes, so the block boundaries agree with count_tokens.
        chunk = text[i * block_chars : (i + 1) * block_chars].encode("utf-8", "surrogatepass")
        prev = hashlib.blake2b(prev + chunk, digest_size=16).digest()
        out.append(prev)
    return out


def fingerprint(api: str, body: Mapping[str, Any]) -> int:
    """A stable 64-bit identity of a request's content, for seeding its text and schedule.

    Transport-level fields (stream flags, our own ``sim`` overrides) are left out, so a streamed
    and a non-streamed call of the same prompt write the same answer.
    """
    content = {
        k: v for k, v in body.items() if k not in {"stream", "stream_options", "sim", "metadata"}
    }
    blob = json.dumps([api, content], sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.blake2b(blob.encode(), digest_size=8).digest(), "big")


def text_tokens(rng: random.Random, n: int, first: bool = True) -> list[str]:
    """`n` generated tokens of prose: words, each but the very first with a leading space."""
    out = [" " + rng.choice(_WORDS) for _ in range(n)]
    if first and out:
        out[0] = out[0][1:].capitalize()
    return out


def tool_argument_tokens(rng: random.Random, schema: Mapping[str, Any], n: int) -> list[str]:
    """About `n` tokens of a JSON object that fits `schema`'s properties, split into 4-char tokens.

    String properties share the word budget; numbers get a seeded integer and booleans ``true``,
    so the concatenation always parses as JSON with the schema's keys.
    """
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping) or not props:
        props = {"input": {"type": "string"}}
    strings = [k for k, v in props.items() if not isinstance(v, Mapping) or _is_string(v)]
    args: dict[str, Any] = {}
    # Leave room for the JSON punctuation and the non-string values.
    words_left = max(1, n - 2 * len(props))
    per_string = max(1, words_left // max(1, len(strings)))
    for key, spec in props.items():
        kind = spec.get("type") if isinstance(spec, Mapping) else "string"
        if kind in ("integer", "number"):
            args[key] = rng.randrange(1, 1000)
        elif kind == "boolean":
            args[key] = True
        elif kind == "array":
            args[key] = [rng.choice(_WORDS)]
        elif kind == "object":
            args[key] = {}
        else:
            args[key] = "".join(text_tokens(rng, per_string // 2 or 1))
    blob = json.dumps(args)
    return [blob[i : i + CHARS_PER_TOKEN] for i in range(0, len(blob), CHARS_PER_TOKEN)]


def _is_string(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("type", "string") == "string")
