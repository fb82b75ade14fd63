"""Prompt and output fingerprints: hashes and sizes that let two calls be compared, never text.

Owns what diagnosis needs from a request and its response at capture time, computed once and kept
as numbers so no prompt or output text reaches a report (the one exception is the explicit
opt-in `--latency-capture-text=N`, which keeps the first N characters of `prompt_text`):

* the request's prompt, flattened into canonical text in the providers' cache order (tools, then
  system / instructions / Gemini's systemInstruction, then messages / input / Gemini's contents),
  measured in characters, and cut into blocks of `PREFIX_BLOCK_CHARS` whose *chained* hashes
  (hash i covers blocks 0..i, as a KV prefix cache matches) tell where two prompts first
  diverge, to the block;
* the end of the last `cache_control` breakpoint in that text, and its estimated token count
  (characters / 4, rounded up: the simulator's rule, close to real tokenisers for English);
* content-defined shingle hashes of the output text (and digests of whole output pieces) and of
  the request's strings, so a later call can be tested for containing an earlier call's output.

Stdlib only; imports nothing from the package (never pytest, never httpx). See docs/metrics.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# 256 characters ≈ 64 tokens: the granularity of a paged KV cache block (the simulator's default
# cache_block_tokens), fine enough to say "the prompts part in the first 64 tokens".
PREFIX_BLOCK_CHARS = 256
# Past this many blocks (256k characters) the prompt is still measured but no longer hashed:
# the report would carry kilobytes of hashes for a divergence nobody needs to the block.
PREFIX_MAX_BLOCKS = 1024
# Each chained hash is kept as its first 4 bytes (8 hex digits): a false match between two
# different prefixes at one block has a chance of 2^-32, and a 20k-character prompt's 78 hashes
# cost 624 characters on a report instead of 1,482.
PREFIX_HASH_CHARS = 8
CHARS_PER_TOKEN = 4
SHINGLE_CHARS = 32
# A 32-byte window is kept when its CRC-32 is 0 mod 16: a content-defined choice, so the same text
# keeps the same windows wherever it sits (inside a later request, after any prefix). One in 16
# leaves a 100-character answer (~70 windows) with no window 1 time in 90.
SHINGLE_KEEP_MASK = 15
# A call's output lands at the end of the requests that use it (the newest messages), so only the
# last 12k characters of a request's strings are shingled: ≤ ~750 numbers per call.
REQUEST_TAIL_CHARS = 12_288
# An output piece is shingled up to this many characters (the shingling runs ~0.6 us a byte: a
# 30 MB answer took 18 s). It changes no verdict: past 2 x REQUEST_TAIL_CHARS an output cannot
# have half its shingles in a request's shingled tail, cut or not.
OUTPUT_SHINGLE_CHARS = 262_144
# Whole-string digests of the request's last strings (an assistant message that *is* an earlier
# output, however short).
REQUEST_MAX_DIGESTS = 256


@dataclass(frozen=True, slots=True)
class PromptPrint:
    """What diagnosis keeps of a request: sizes and hashes only."""

    chars: int | None = None
    prefix_hashes: tuple[str, ...] = ()
    breakpoint_chars: int | None = None
    shingles: tuple[int, ...] = ()


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _has_breakpoint(part: object) -> bool:
    return isinstance(part, Mapping) and isinstance(part.get("cache_control"), Mapping)


def _part_text(part: object) -> str:
    """A content part as prompt text: its text, or its canonical JSON without cache_control."""
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        text = part.get("text")
        if isinstance(text, str):
            return text
        return _canonical_json({k: v for k, v in part.items() if k != "cache_control"})
    return _canonical_json(part)


class _Prompt:
    """Canonical prompt text built piece by piece, remembering the last breakpoint's end."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.length = 0
        self.breakpoint: int | None = None

    def add(self, text: str) -> None:
        self.pieces.append(text)
        self.length += len(text)

    def add_parts(self, content: object) -> None:
        if isinstance(content, list):
            for part in content:
                self.add(_part_text(part))
                if _has_breakpoint(part):
                    self.breakpoint = self.length
        elif content is not None:
            self.add(_part_text(content))

    def add_tools(self, tools: object) -> None:
        for tool in tools if isinstance(tools, list) else []:
            self.add(_part_text(tool))
            if _has_breakpoint(tool):
                self.breakpoint = self.length

    def add_messages(self, messages: object) -> None:
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, Mapping):
                continue
            self.add(f"{message.get('role', message.get('type', ''))}: ")
            content = message.get("content", message.get("parts"))  # Gemini: parts
            if content is None and message.get("type") is not None:
                # Responses input items without content (function_call, function_call_output).
                content = {k: v for k, v in message.items() if k != "cache_control"}
            self.add_parts(content)
            if _has_breakpoint(message):
                self.breakpoint = self.length
            self.add("\n")

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _prompt(payload: Mapping[str, Any]) -> _Prompt:
    prompt = _Prompt()
    prompt.add_tools(payload.get("tools"))
    system = payload.get("system", payload.get("instructions"))
    gemini_system = payload.get("systemInstruction")
    if system is None and isinstance(gemini_system, Mapping):  # a Content: {parts, role}
        system = gemini_system.get("parts")
    if system is not None:
        prompt.add("system: ")
        prompt.add_parts(system)
        prompt.add("\n")
    messages = payload.get("messages", payload.get("input", payload.get("contents")))
    if isinstance(messages, str):
        prompt.add(f"user: {messages}\n")
    else:
        prompt.add_messages(messages)
    completion_prompt = payload.get("prompt")  # legacy completions
    if isinstance(completion_prompt, str):
        prompt.add(completion_prompt)
    if _has_breakpoint(payload):  # Anthropic's top-level automatic caching: the whole prompt
        prompt.breakpoint = prompt.length
    return prompt


def prompt_text(payload: Mapping[str, Any]) -> str:
    """The request's prompt as the canonical text the fingerprints are computed over (tools,
    system, messages). For the opt-in text capture only; callers cap it."""
    return _prompt(payload).text


def prefix_hashes(text: str) -> tuple[str, ...]:
    """Chained hashes of the whole `PREFIX_BLOCK_CHARS` blocks of `text` (a partial last block is
    left out: it would change whenever the prompt grows)."""
    out: list[str] = []
    previous = b""
    blocks = min(len(text) // PREFIX_BLOCK_CHARS, PREFIX_MAX_BLOCKS)
    for i in range(blocks):
        chunk = text[i * PREFIX_BLOCK_CHARS : (i + 1) * PREFIX_BLOCK_CHARS]
        previous = hashlib.blake2b(
            previous + chunk.encode("utf-8", "surrogatepass"), digest_size=8
        ).digest()
        out.append(previous[: PREFIX_HASH_CHARS // 2].hex())
    return tuple(out)


def shingles(text: str) -> set[int]:
    """CRC-32 of the content-selected 32-byte windows of `text` (about one window in 16)."""
    data = text.encode("utf-8", "surrogatepass")
    crc = zlib.crc32
    windows = (crc(data[i : i + SHINGLE_CHARS]) for i in range(len(data) - SHINGLE_CHARS + 1))
    return {h for h in windows if h & SHINGLE_KEEP_MASK == 0}


def digest(text: str) -> int:
    """The identity of one whole string, whitespace at its ends ignored."""
    return zlib.crc32(text.strip().encode("utf-8", "surrogatepass")) | (len(text.strip()) << 32)


def _strings(value: object) -> Iterator[str]:
    """Every string leaf of a JSON value, in order; JSON-looking strings (OpenAI tool-call
    `arguments`) and objects under `input` (Anthropic tool_use) or `args` (a Gemini
    functionCall) also as canonical JSON, the form an output's tool arguments are shingled in."""
    if isinstance(value, str):
        yield value
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            with contextlib.suppress(ValueError, RecursionError):
                yield _canonical_json(json.loads(stripped))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key in ("input", "args") and isinstance(item, Mapping):
                yield _canonical_json(item)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def request_print(payload: Mapping[str, Any] | None) -> PromptPrint:
    """The fingerprint of a parsed JSON request body (None: not JSON, nothing kept)."""
    if payload is None:
        return PromptPrint()
    prompt = _prompt(payload)
    text = prompt.text
    leaves = [s for s in _strings({k: v for k, v in payload.items() if k != "sim"}) if s.strip()]
    tail: list[str] = []
    size = 0
    for leaf in reversed(leaves):
        if size >= REQUEST_TAIL_CHARS:
            break
        tail.append(leaf[-(REQUEST_TAIL_CHARS - size) :])
        size += len(tail[-1])
    found: set[int] = set()
    for leaf in tail:
        found |= shingles(leaf)
    found.update(digest(leaf) for leaf in leaves[-REQUEST_MAX_DIGESTS:])
    return PromptPrint(
        chars=len(text),
        prefix_hashes=prefix_hashes(text),
        breakpoint_chars=prompt.breakpoint,
        shingles=tuple(sorted(found)),
    )


def estimated_tokens(chars: int | None) -> int | None:
    """Characters → tokens at 4 characters a token, rounded up (the simulator's rule)."""
    return None if chars is None else -(-chars // CHARS_PER_TOKEN)


class OutputText:
    """Collects a response's output text per piece (a text block, a tool call's arguments), as
    the call's API adapter finds it (`apis/`); keys name a piece within the response."""

    def __init__(self) -> None:
        self._pieces: dict[tuple[str, int], list[str]] = {}
        self._tools: set[tuple[str, int]] = set()

    def add(self, key: tuple[str, int], text: object, *, tool: bool = False) -> None:
        if isinstance(text, str) and text:
            self._pieces.setdefault(key, []).append(text)
            if tool:
                self._tools.add(key)

    def add_object(self, key: tuple[str, int], value: object) -> None:
        """A tool call's input given as an object (Anthropic's non-streamed tool_use)."""
        if isinstance(value, Mapping) and value:
            self._pieces.setdefault(key, []).append(_canonical_json(value))

    def add_call(self, value: object) -> None:
        """A tool call's arguments delivered whole, as an object (Gemini's `functionCall.args`):
        a piece of its own, whichever chunk or part carried it."""
        self.add_object(("call", len(self._pieces)), value)

    def pieces(self) -> list[str]:
        out: list[str] = []
        for key, parts in self._pieces.items():
            text = "".join(parts)
            if key in self._tools:
                # Streamed tool arguments are raw JSON; the next request carries them re-encoded
                # (Anthropic as an `input` object, OpenAI as the same string): compare canonical.
                with contextlib.suppress(ValueError, RecursionError):
                    text = _canonical_json(json.loads(text))
            out.append(text)
        return out


def output_print(pieces: Iterable[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shingles, digests) of an output's pieces."""
    found: set[int] = set()
    digests: set[int] = set()
    for piece in pieces:
        if piece.strip():
            found |= shingles(piece[:OUTPUT_SHINGLE_CHARS])
            digests.add(digest(piece))
    return tuple(sorted(found)), tuple(sorted(digests))


def contains_output(
    request_shingles: Iterable[int],
    output_shingles: Iterable[int],
    output_digests: Iterable[int],
) -> bool | None:
    """Does a request carry an earlier call's output? None when the output left no trace to look
    for (empty, or too short to shingle and not sent back whole).

    Yes when a whole output piece is one of the request's strings, or when at least half of the
    output's shingles are in the request: quoting a sentence of it does not make a dependency,
    carrying most of it does.
    """
    request = set(request_shingles)
    if request.intersection(output_digests):
        return True
    wanted = set(output_shingles)
    if not wanted:
        return None
    return 2 * len(wanted & request) >= len(wanted)
