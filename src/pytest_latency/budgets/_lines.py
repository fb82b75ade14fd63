"""Where each key, table and array item of a budgets.toml starts: `Lines(text).line_of(path)`.

tomllib keeps no positions, so a validation error on the decoded data (`samples = 0`, the third
expression of the second `[[budget]]`) could not otherwise say `budgets.toml:12`. Owns that
mapping, and, for a document tomllib rejected at its end, the line where the string, array or
inline table that is never closed was opened.

Why a scanner of our own: no well-kept TOML library reports positions. tomlkit (the
style-preserving one) keeps whitespace and comments but no line numbers, so it would need a walk
over its private containers, 15 ms more import time and a second parser that may disagree with
tomllib; tomlkit-extras reports lines, but as a young layer over those same internals. tomllib
stays the parser of record and this module only locates, as small as correctness allows: one
regular expression tokenises (every string form, comments, punctuation, bare words), and a walk
over the tokens follows `[headers]`, `[[arrays of tables]]`, dotted and quoted keys, nested
arrays and inline tables. Run on text tomllib accepted (or rejected at its very end), it never
raises.
Imports only the stdlib; never pytest.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
from typing import NamedTuple, TypeAlias

__all__ = ["Lines", "Path"]

# A path into the TOML document: table and key names, and the index of a [[table]] or of an array
# item, e.g. ("budget", 1, "expect", 0) for the first expression of the second [[budget]].
Path: TypeAlias = tuple[str | int, ...]

# Spaces and a comment, then one token. A string that is never closed runs to the end of its
# line (tomllib names that line itself) or, multi-line, to the end of the text; its closing
# group is then empty. "\" escapes in basic strings only, as in TOML.
_TOKEN = re.compile(
    r"""[ \t\r]*(?:\#[^\n]*)?(?:
      (?P<string> \"\"\"(?:\\[\s\S]|[^\\])*?(?:(?P<ml_basic>\"{3,5})|\Z)
                | '''[\s\S]*?(?:(?P<ml_literal>'{3,5})|\Z)
                | "(?:\\.?|[^"\\\n])*(?P<basic>")?
                | '[^'\n]*(?P<literal>')? )
    | (?P<punct>[\[\]{}=,.\n])
    | (?P<bare>[^ \t\r\n\[\]{}=,.\#"']+)
    )""",
    re.VERBOSE,
)


class _Token(NamedTuple):
    kind: str  # "string", "punct", "bare"; "open" for a string never closed; "" at the end
    text: str
    start: int


def _tokens(text: str) -> list[_Token]:
    """Every token, up to the end of the text or to the first string that is never closed."""
    tokens: list[_Token] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or ""  # the outer group: "string", "punct" or "bare"
        token = _Token(kind, match[kind], match.start(kind))
        if kind == "string" and not any(match.group(*_CLOSERS)):
            # The text ends inside it if nothing follows (a multi-line one always runs to the
            # end), or, for a one-line literal string, if no ' follows anywhere: tomllib reads
            # those up to the next ', across lines. Otherwise tomllib names its line itself.
            rest = text[match.end() :]
            if not rest or (token.text[0] == "'" and "'" not in rest):
                return [*tokens, token._replace(kind="open")]
        tokens.append(token)
    # finditer only skips what no token starts: the spaces and comment at the end of the text.
    return [*tokens, _Token("", "", len(text))]


_CLOSERS = ("ml_basic", "ml_literal", "basic", "literal")


class _EndOfText(Exception):
    """The text ended inside a string, array or inline table."""


class Lines:
    """The 1-based line of every path in a TOML text, and of a construct it never closes."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self.lines: dict[Path, int] = {}
        self.arrays_of_tables: dict[Path, int] = {}  # path -> count of [[path]] so far
        self.unclosed: int | None = None
        self.unclosed_kind = ""
        with contextlib.suppress(_EndOfText):
            self.document()

    def line_at(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its closest recorded ancestor, or 1."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def record(self, path: Path, offset: int) -> None:
        self.lines.setdefault(path, self.line_at(offset))

    def end_of_text(self, start: int, kind: str) -> _EndOfText:
        self.unclosed, self.unclosed_kind = self.line_at(start), kind
        return _EndOfText()

    def peek(self) -> _Token:
        token = self.tokens[self.i]
        if token.kind == "open":
            raise self.end_of_text(token.start, "string")
        return token

    def take(self) -> _Token:
        token = self.peek()
        self.i += 1 if token.kind else 0
        return token

    def at(self, *texts: str) -> bool:
        token = self.peek()
        return token.kind == "punct" and token.text in texts

    def rest_of_line(self) -> None:
        while (token := self.take()).kind and token.text != "\n":
            pass

    # -- structure ----------------------------------------------------------------------------

    def document(self) -> None:
        table: Path = ()
        while self.peek().kind:
            if self.at("["):
                table = self.header()
            elif not self.at("\n"):
                self.key_value(table)
            self.rest_of_line()  # a statement is alone on its line (but for a comment)

    def header(self) -> Path:
        start = self.take().start
        array = self.at("[") and self.peek().start == start + 1
        if array:
            self.take()
        names = self.key()
        path: Path = ()
        for name in names[:-1] if array else names:
            path = self.resolve((*path, name))
            self.record(path, start)
        if not array:
            self.lines[path] = self.line_at(start)  # the header itself, not a dotted key above
            return path
        path = (*path, names[-1]) if names else path
        count = self.arrays_of_tables.get(path, 0)
        self.arrays_of_tables[path] = count + 1
        self.record(path, start)
        self.record((*path, count), start)
        return (*path, count)

    def resolve(self, path: Path) -> Path:
        """A table name that is an array of tables means its latest element."""
        count = self.arrays_of_tables.get(path)
        return path if count is None else (*path, count - 1)

    def key(self) -> list[str]:
        parts: list[str] = []
        while self.peek().kind in ("bare", "string"):
            parts.append(_unquote(self.take()))
            if not self.at("."):
                break
            self.take()
        return parts

    def key_value(self, table: Path) -> None:
        start = self.peek().start
        names = self.key()
        if not names or not self.at("="):
            return
        self.take()
        path = table
        for name in names:
            path = (*path, name)
            self.record(path, start)
        self.value(path)

    def value(self, path: Path) -> None:
        if self.at("["):
            self.items(path, "]", "array")
        elif self.at("{"):
            self.items(path, "}", "inline table")
        elif self.peek().kind == "string":
            self.take()
        else:  # number, boolean, date: bare words and dots (1.5, 1979-05-27 07:32:00)
            while self.peek().kind == "bare" or self.at("."):
                self.take()

    def items(self, path: Path, close: str, kind: str) -> None:
        """An array's values (recorded by index) or an inline table's `key = value`s."""
        start = self.take().start
        index = 0
        while True:
            token, before = self.peek(), self.i
            if not token.kind:
                raise self.end_of_text(start, kind)
            if self.at(close):
                self.take()
                return
            if not self.at(",", "\n"):
                if kind == "array":
                    self.record((*path, index), token.start)
                    self.value((*path, index))
                    index += 1
                else:
                    self.key_value(path)
            if self.i == before:
                self.take()  # a separator, or not a value: move on rather than loop


def _unquote(token: _Token) -> str:
    """A key's name: bare as written, or a quoted key's content (escapes decoded as JSON's)."""
    if token.kind == "bare":
        return token.text
    if token.text.startswith("'"):
        return token.text.strip("'")
    try:
        value = json.loads(token.text)
    except ValueError:
        return token.text.strip('"')
    return value if isinstance(value, str) else token.text.strip('"')
