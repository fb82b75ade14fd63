"""Text from outside (servers, exceptions, proxies) made safe to keep and to show.

Owns the two rules every server- or exception-supplied string passes before the package keeps it
(in a call's error, error detail, model or notes, hence in the result file, the HTML, the
Markdown, the terminal and GitHub annotations):

- **no secrets**: the values of the request's headers (an `Authorization: Bearer <key>` with a
  stray newline makes h11 raise `LocalProtocolError("Illegal header value b'Bearer <key>\\n'")`)
  and anything shaped like a provider's API key are replaced by `[redacted]`;
- **one line of printable text**: control characters (newlines, ANSI escapes, NUL) become spaces,
  so a hostile `error.type` of `overloaded\\n::error file=x::forged\\x1b[2J` cannot start a GitHub
  workflow command or repaint a terminal, and the text is cut to a bound.

Stdlib only; imports nothing from the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

REDACTED: Final = "[redacted]"

# Key shapes of the providers this package talks to, and the generic carriers of one. Broad on
# purpose: a false positive costs a word of an error message, a miss leaks a key into a PR.
_SECRET_SHAPES: Final = re.compile(
    r"""
    \b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}          # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    | \bAIza[0-9A-Za-z_\-]{30,}                   # Google API keys
    | \b(?:xai|gsk|hf|ghp|gho|ghs|github_pat)_?[-_][A-Za-z0-9_\-]{16,}  # xAI, Groq, HF, GitHub
    | \b(?:Bearer|Basic|Token)\s+[^\s'",;]{8,}    # any credential in an Authorization value
    | \b(?:api[_-]?key|x-api-key|access[_-]?token|secret)["']?\s*[:=]\s*["']?[^\s'",;&]{8,}
    """,
    re.IGNORECASE | re.VERBOSE,
)

# Shorter header values are not worth hiding and would garble a message ("0", "gzip", "POST").
_MIN_SECRET_CHARS: Final = 8

# Anything that is not printable on one line: C0 and C1 controls, DEL, the line and paragraph
# separators, and the bidirectional overrides that reorder what a reviewer reads.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")


def header_secrets(values: Iterable[str]) -> tuple[str, ...]:
    """What to hide of a request's header values: each value, its stripped form, and each of
    its words long enough to be a credential, as text and as Python's repr shows bytes (the
    form exception messages quote)."""
    found: set[str] = set()
    for value in values:
        for piece in (value, value.strip(), *value.split()):
            if len(piece) >= _MIN_SECRET_CHARS:
                found.add(piece)
                found.add(repr(piece.encode("utf-8", "surrogateescape"))[2:-1])
    # Longest first, so a whole value goes before the key inside it.
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each of `secrets` and every API-key-shaped string replaced by [redacted]."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _SECRET_SHAPES.sub(REDACTED, text)


def one_line(text: str, limit: int) -> str:
    """`text` as one line of printable text of at most `limit` characters (controls become a
    space, runs of space one, the cut marked with …)."""
    flat = " ".join(_CONTROL.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def safe_text(text: str, limit: int, secrets: Iterable[str] = ()) -> str:
    """`redact`, then `one_line`: how a message from outside is kept."""
    return one_line(redact(text, secrets), limit)


def safe_token(text: str, limit: int = 80) -> str:
    """A server-supplied identifier (an error type or code, a model name) as one word: printable,
    no whitespace, no secrets, at most `limit` characters."""
    return one_line(redact(text), limit).replace(" ", "_")


__all__ = ["REDACTED", "header_secrets", "one_line", "redact", "safe_text", "safe_token"]
