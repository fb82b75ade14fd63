"""`BudgetError`, the one exception every budget mistake becomes, and how it renders.

Owns the message layout: one line naming the source (`budgets.toml:12`, `test_x.py::test_a
marker`), quoting the expression and saying what is wrong, then, when the column is known, the
expression again with a caret under the bad part; `BudgetErrors`, several of them from one file,
one after another; and pickling (xdist sends it between processes). Imports only the stdlib;
never pytest (the plugin turns a `BudgetError` into a usage or collection error).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["BudgetError", "BudgetErrors", "quote"]


class BudgetError(ValueError):
    """A budget expression or budget file that cannot be used.

    `str(error)` starts with one line naming the source, quoting the expression and saying what is
    wrong and what would be valid; when the column is known, it is followed by the expression with
    a caret under the bad part. `reason`, `source`, `text` and `column` (1-based) are attributes
    so callers can re-render it.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        text: str | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.text = text
        self.start = start
        self.end = end
        super().__init__(self._render())

    @property
    def column(self) -> int | None:
        return None if self.start is None else self.start + 1

    def _render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if self.text is None:
            return f"{head}{self.reason}"
        where = f" (column {self.column})" if self.column is not None else ""
        line = f"{head}bad latency budget {quote(self.text)}{where}: {self.reason}"
        if self.start is None:
            return line
        shown, offset = _window(self.text, self.start)
        width = max(1, min((self.end or self.start + 1) - self.start, len(shown) - offset))
        return f"{line}\n    {shown}\n    {' ' * offset}{'^' * width}"

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor would not survive pickling (xdist, multiprocessing).
        return (_rebuild_error, (self.reason, self.source, self.text, self.start, self.end))


class BudgetErrors(BudgetError):
    """Several mistakes in one budgets file, in file order: `str()` is each one's message, one
    after another (each starts with its own `file:line`), and `errors` holds them."""

    def __init__(self, errors: Sequence[BudgetError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors))

    def __reduce__(self) -> tuple[Any, ...]:
        return (BudgetErrors, (self.errors,))


def _rebuild_error(
    reason: str, source: str, text: str | None, start: int | None, end: int | None
) -> BudgetError:
    return BudgetError(reason, source=source, text=text, start=start, end=end)


def quote(text: str) -> str:
    shown = text if len(text) <= 120 else text[:117] + "..."
    return "'" + "".join(c if c.isprintable() else _escape(c) for c in shown) + "'"


def _escape(ch: str) -> str:
    return repr(ch)[1:-1]


def _window(text: str, start: int) -> tuple[str, int]:
    """The text one-to-one per character (so the caret lines up), cut to ~100 columns."""
    shown = "".join(c if c.isprintable() and not c.isspace() else " " for c in text)
    lo = max(0, start - 60)
    hi = min(len(shown), lo + 100)
    prefix = "..." if lo else ""
    suffix = "..." if hi < len(shown) else ""
    return prefix + shown[lo:hi] + suffix, start - lo + len(prefix)
