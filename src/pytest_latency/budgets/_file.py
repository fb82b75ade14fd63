"""budgets.toml: loading and validating it into a `BudgetFile`, and choosing a test's rules.

Owns `Defaults` (`[defaults]` sampling, load shape and `split`), `BudgetRule` (one `[[budget]]`: a
node-id glob and/or a marker, its expectations, its load shape and `split`), `PriceOverride` (one
`[prices."<model>"]`: a model's price per million tokens, for self-hosted models and negotiated
rates; `pricing` applies it), `BudgetFile` (the whole file, with the `[session]` budgets), the
file's schema and its limits, and turning every mistake (unreadable, not UTF-8, invalid TOML, a
wrong key or value, a bad expression) into a `BudgetError` that names `file:line`: every mistake of
the file, in file order (`BudgetErrors` when there are several), except in text that is not TOML at
all, where tomllib stops at the first.
tomllib is the parser of record; `_lines` only finds where a path is.
Imports only the stdlib, `pytest_latency.catalogue` (through its siblings), `pytest_latency.load`
(which checks the load keys' values) and its siblings; never pytest.
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import fnmatch
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from pytest_latency.budgets._errors import BudgetError, BudgetErrors, quote
from pytest_latency.budgets._expression import LEVEL_FILTER_KEYS, Expectation
from pytest_latency.budgets._lines import Lines
from pytest_latency.budgets._lines import Path as _Path
from pytest_latency.budgets._parser import parse_expectation
from pytest_latency.load import LOAD_KEYS, LoadError, read_value

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the 3.10 CI job only
    # mypy checks as 3.10 while the dev venv (3.11+) has no tomli installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "MAX_SAMPLES",
    "PRICE_KEYS",
    "BudgetFile",
    "BudgetRule",
    "Defaults",
    "LoadValues",
    "PriceOverride",
    "load_budget_file",
    "parse_budget_file",
]


# The load keys a table gives (`load.LOAD_KEYS`), each value checked by `load.read_value`, in
# the order written; the plan overlays them on the marker's (`plugin._sampling.plan_for`).
LoadValues = tuple[tuple[str, int | float | str], ...]


@dataclass(frozen=True, slots=True)
class Defaults:
    """`[defaults]`: sampling and load for every budgeted test whose marker does not say
    otherwise."""

    samples: int | None = None
    warmup: int | None = None
    max_samples: int | None = None
    load: LoadValues = ()
    # Split each test that has a load shape across pytest-xdist workers (`plugin._split`).
    split: bool | None = None


@dataclass(frozen=True, slots=True)
class BudgetRule:
    """One `[[budget]]` table: which tests it selects and what it expects of them.

    A test is selected when its node id matches `select` (an fnmatch glob) and it carries the
    `marker`; a rule with only one of the two uses only that one.
    """

    expectations: tuple[Expectation, ...]
    select: str | None = None
    marker: str | None = None
    source: str = ""
    load: LoadValues = ()
    split: bool | None = None

    def selects(self, nodeid: str, markers: Sequence[str] = ()) -> bool:
        if self.select is not None and not _glob(nodeid, self.select):
            return False
        return self.marker is None or self.marker in markers


def _glob(nodeid: str, pattern: str) -> bool:
    # fnmatchcase: node ids are case-sensitive on every platform, unlike fnmatch on Windows.
    # A pattern that names a file or directory also selects every test in it.
    if fnmatch.fnmatchcase(nodeid, pattern):
        return True
    path = nodeid.split("::", 1)[0]
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(nodeid, pattern + "::*")


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """`[prices."<model>"]`: US dollars per million tokens for calls whose response names
    `model`. `input` and `output` are required; a cache price left out is the input price (no
    discount, no premium), the 1-hour write price left out is the 5-minute one."""

    model: str
    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None
    source: str = ""  # `budgets.toml:LINE`, stamped in the result file


@dataclass(frozen=True, slots=True)
class BudgetFile:
    """A loaded `budgets.toml`."""

    path: str
    defaults: Defaults = Defaults()
    rules: tuple[BudgetRule, ...] = ()
    session: tuple[Expectation, ...] = ()
    prices: tuple[PriceOverride, ...] = ()

    def rules_for(self, nodeid: str, markers: Sequence[str] = ()) -> tuple[BudgetRule, ...]:
        return tuple(r for r in self.rules if r.selects(nodeid, markers))

    @property
    def splits(self) -> bool:
        """Whether `split = true` is written anywhere: else no test needs the file asked whether
        it is split (the plugin asks for every test function it collects on a worker)."""
        return bool(self.defaults.split) or any(r.split for r in self.rules)


_TOP_KEYS: Final = ("defaults", "budget", "session", "prices")
PRICE_KEYS: Final = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
# No model costs a million dollars per million tokens: a larger number is a unit mistake.
_MAX_PRICE: Final = 1e6
# A run-away sample count would turn one test into hours of API spend; cap it visibly.
MAX_SAMPLES: Final = 100_000
_SAMPLING_KEYS: Final = ("samples", "warmup", "max_samples")
# The keys that shape how a test's samples run: its load, and whether it is split across
# pytest-xdist workers (a bool, checked here: the load module has no notion of workers).
_SPLIT: Final = "split"
_RUN_KEYS: Final = (*LOAD_KEYS, _SPLIT)
_DEFAULT_KEYS: Final = _SAMPLING_KEYS + _RUN_KEYS
_RULE_KEYS: Final = ("select", "marker", "expect", *_RUN_KEYS)
_SESSION_KEYS: Final = ("expect",)


def load_budget_file(path: str | Path) -> BudgetFile:
    """Read and validate a budgets.toml; every `BudgetError` names `file:line`."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise BudgetError(f"cannot read budget file: {exc.strerror or exc}", source=str(p)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The line of the first byte that is not UTF-8 (a UTF-16 file fails at its BOM: line 1).
        line = raw.count(b"\n", 0, exc.start) + 1
        if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            why = "it starts with a UTF-16 byte-order mark; save it as UTF-8"
        else:
            why = f"{exc.reason} at byte {exc.start}; save it as UTF-8"
        raise BudgetError(f"budget file is not UTF-8 ({why})", source=f"{p}:{line}") from exc
    return parse_budget_file(text, path=str(p))


def parse_budget_file(text: str, *, path: str) -> BudgetFile:
    """Validate the text of a budgets.toml (`path` is only used in messages).

    A leading UTF-8 byte-order mark (Windows editors write one) is ignored: tomllib rejects it,
    and it is invisible in every editor, so an error about it would help no one.
    """
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(exc, text, path) from exc
    except RecursionError:
        # tomllib recurses once per nesting level of arrays and inline tables.
        raise BudgetError(
            "invalid TOML: arrays or inline tables nested too deeply to read", source=path
        ) from None
    return _FileReader(text, path).read(data)


def _toml_error(exc: tomllib.TOMLDecodeError, text: str, path: str) -> BudgetError:
    # tomllib puts "(at line L, column C)" in its message; lift the line into file:line. At the
    # end of the document it gives no line: name the line where the value left open started
    # (or the last line).
    message = str(exc)
    _, found, rest = message.partition("(at line ")
    line = rest.split(",", 1)[0].split(")", 1)[0]
    if found and line.isdigit():
        return BudgetError(f"invalid TOML: {message}", source=f"{path}:{line}")
    located = Lines(text) if "end of document" in message else None
    if located is not None and located.unclosed is not None:
        line, kind = str(located.unclosed), located.unclosed_kind
        hint = f"; the {kind} opened on line {line} is never closed"
        return BudgetError(f"invalid TOML: {message}{hint}", source=f"{path}:{line}")
    last = len(text.rstrip().splitlines())
    return BudgetError(f"invalid TOML: {message}", source=f"{path}:{max(1, last)}")


class _Skip(Exception):
    """The key, rule or expression being read is wrong; its error is recorded and reading goes
    on with the next one, so one run reports every mistake in the file."""


class _FileReader:
    """Validates the decoded TOML; every error names the line `Lines` found for its path. Each
    key, rule and expression is checked on its own (`check`), so the file's errors are all
    reported at once, in file order, rather than the first one the checks happen to reach."""

    def __init__(self, text: str, path: str) -> None:
        self.lines = Lines(text)
        self.path = path
        self.errors: list[tuple[int, BudgetError]] = []

    def where(self, path: _Path) -> str:
        return f"{self.path}:{self.lines.line_of(path)}"

    def fail(self, reason: str, path: _Path) -> NoReturn:
        self.errors.append((self.lines.line_of(path), BudgetError(reason, source=self.where(path))))
        raise _Skip

    @contextlib.contextmanager
    def check(self) -> Iterator[None]:
        """One unit of the file: a failure inside it is recorded and the reading goes on."""
        with contextlib.suppress(_Skip):
            yield

    def read(self, data: dict[str, Any]) -> BudgetFile:
        for key in data:
            with self.check():
                self.top_level(key)
        defaults = self.defaults(data.get("defaults", {}))
        rules: list[BudgetRule] = []
        with self.check():
            budgets = data.get("budget", [])
            if not isinstance(budgets, list) or not all(isinstance(b, dict) for b in budgets):
                self.fail("'budget' must be an array of tables: [[budget]]", ("budget",))
            for i, table in enumerate(budgets):
                with self.check():
                    rules.append(self.rule(table, i))
        session: tuple[Expectation, ...] = ()
        if "session" in data:
            with self.check():
                session = self.session(data["session"])
        prices: list[PriceOverride] = []
        if "prices" in data:
            with self.check():
                prices = self.prices(data["prices"])
        if self.errors:
            # sorted() is stable: errors on one line stay in the order they were found.
            found = [error for _, error in sorted(self.errors, key=lambda e: e[0])]
            raise found[0] if len(found) == 1 else BudgetErrors(found)
        return BudgetFile(self.path, defaults, tuple(rules), session, tuple(prices))

    def top_level(self, key: str) -> None:
        if key in _RUN_KEYS:
            self.fail(
                f"{key!r} is a key of [defaults] or of a [[budget]] rule, not a table: put it "
                f"under one of those headers (keys above the first [header] are top-level)",
                (key,),
            )
        if key in _DEFAULT_KEYS:
            self.fail(
                f"{key!r} is a key of [defaults], not a table: put it under a [defaults] "
                f"header (keys above the first [header] are top-level)",
                (key,),
            )
        if key in _RULE_KEYS:
            self.fail(
                f"{key!r} is a key of a [[budget]] rule (or, for 'expect', of [session]), "
                f"not a table: put it under a [[budget]] or [session] header",
                (key,),
            )
        if key not in _TOP_KEYS:
            self.unknown(key, _TOP_KEYS, "top-level table", (key,))

    def session(self, table: Any) -> tuple[Expectation, ...]:
        if not isinstance(table, dict):
            self.fail("'session' must be a table: [session]", ("session",))
        failed = len(self.errors)
        for key in table:
            if key in _RUN_KEYS:
                with self.check():
                    # A load key shapes how a test's samples run; [session] runs nothing of its
                    # own, so a value there would judge nothing while looking like it did.
                    self.fail(
                        f"{key!r} shapes how a test's samples run, and [session] runs nothing: "
                        "it pools every call of the run; put it in [defaults] or a [[budget]]",
                        ("session", key),
                    )
            elif key not in _SESSION_KEYS:
                with self.check():
                    self.unknown(key, _SESSION_KEYS, "key in [session]", ("session", key))
        misspelled = len(self.errors) > failed
        return self.expectations(table, ("session",), "[session]", misspelled=misspelled)

    def prices(self, table: Any) -> list[PriceOverride]:
        if not isinstance(table, dict):
            self.fail("'prices' must hold one table per model: [prices.\"<model>\"]", ("prices",))
        found = []
        for model, entry in table.items():
            with self.check():
                found.append(self.price(model, entry))
        return found

    def price(self, model: str, entry: Any) -> PriceOverride:
        here: _Path = ("prices", model)
        if not isinstance(entry, dict):
            self.fail(
                f"[prices.{quote(model)}] must be a table of prices per million tokens "
                f"({', '.join(PRICE_KEYS)})",
                here,
            )
        values: dict[str, float] = {}
        for key, value in entry.items():
            with self.check():
                if key not in PRICE_KEYS:
                    self.unknown(key, PRICE_KEYS, f"key in [prices.{quote(model)}]", (*here, key))
                number = value if isinstance(value, (int, float)) else None
                if isinstance(value, bool) or number is None or not 0 <= number <= _MAX_PRICE:
                    self.fail(
                        f"{key} must be US dollars per million tokens, a number 0..{_MAX_PRICE:g}, "
                        f"got {value!r}",
                        (*here, key),
                    )
                values[key] = float(number)
        for key in ("input", "output"):
            with self.check():
                if key not in entry:
                    self.fail(
                        f"[prices.{quote(model)}] needs {key!r} (USD per million tokens)", here
                    )
        return PriceOverride(
            model,
            values.get("input", 0.0),
            values.get("output", 0.0),
            values.get("cache_read"),
            values.get("cache_write"),
            values.get("cache_write_1h"),
            source=self.where(here),
        )

    def unknown(self, key: str, valid: Sequence[str], what: str, path: _Path) -> NoReturn:
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self.fail(f"unknown {what} {key!r}; {hint}valid: {', '.join(valid)}", path)

    def defaults(self, table: Any) -> Defaults:
        values: dict[str, int | None] = {}
        load: list[tuple[str, int | float | str]] = []
        split: bool | None = None
        with self.check():
            if not isinstance(table, dict):
                self.fail("'defaults' must be a table: [defaults]", ("defaults",))
            for key, value in table.items():
                with self.check():
                    if key in LOAD_KEYS:
                        load.append((key, self.load_value(key, value, ("defaults", key))))
                    elif key == _SPLIT:
                        split = self.split(value, ("defaults", key))
                    else:
                        values[key] = self.default(key, value)
        defaults = Defaults(**values, load=tuple(load), split=split)
        with self.check():
            if (
                defaults.samples is not None
                and defaults.max_samples is not None
                and defaults.max_samples < defaults.samples
            ):
                self.fail(
                    f"max_samples ({defaults.max_samples}) is below samples ({defaults.samples})",
                    ("defaults", "max_samples"),
                )
        return defaults

    def default(self, key: str, value: Any) -> int:
        at = ("defaults", key)
        if key not in _DEFAULT_KEYS:
            self.unknown(key, _DEFAULT_KEYS, "key in [defaults]", at)
        lowest = 0 if key == "warmup" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            self.fail(f"{key} must be an integer >= {lowest}, got {value!r}", at)
        if value > MAX_SAMPLES:
            self.fail(f"{key} = {value} is over the limit of {MAX_SAMPLES}", at)
        return value

    def load_value(self, key: str, value: Any, at: _Path) -> int | float | str:
        """One load key's value, checked as the marker's are (`load.read_value`)."""
        try:
            checked = read_value(key, value)
        except LoadError as exc:
            self.fail(str(exc), at)
        assert isinstance(checked, int | float | str)
        # The file keeps what was written (a rate stays "20/s"): the plan reads it again, with
        # the marker's values, and every output names the rate as the user wrote it.
        return value if key == "rate" else checked

    def split(self, value: Any, at: _Path) -> bool:
        if not isinstance(value, bool):
            self.fail(f"split must be true or false, got {value!r}", at)
        return value

    def rule(self, table: dict[str, Any], index: int) -> BudgetRule:
        here: _Path = ("budget", index)
        failed = len(self.errors)
        for key in table:
            if key not in _RULE_KEYS:
                with self.check():
                    self.unknown(key, _RULE_KEYS, "key in [[budget]]", (*here, key))
        select, marker = table.get("select"), table.get("marker")
        for key, value in (("select", select), ("marker", marker)):
            with self.check():
                if value is not None and (not isinstance(value, str) or not value.strip()):
                    self.fail(f"{key} must be a non-empty string, got {value!r}", (*here, key))
                if key == "marker" and value is not None and not value.isidentifier():
                    self.fail(f"marker must be a pytest marker name, got {value!r}", (*here, key))
        # A key missing next to an unknown one is most likely that key misspelled: one error.
        misspelled = len(self.errors) > failed
        with self.check():
            if select is None and marker is None and not misspelled:
                self.fail(
                    "a [[budget]] needs 'select' (a node-id glob) and/or 'marker' to choose tests",
                    here,
                )
        load: list[tuple[str, int | float | str]] = []
        for key in LOAD_KEYS:
            if key in table:
                with self.check():
                    load.append((key, self.load_value(key, table[key], (*here, key))))
        split: bool | None = None
        if _SPLIT in table:
            with self.check():
                split = self.split(table[_SPLIT], (*here, _SPLIT))
        expectations = self.expectations(table, here, "[[budget]]", misspelled=misspelled)
        if len(self.errors) > failed:
            raise _Skip  # recorded already; a rule with a wrong key is no rule
        return BudgetRule(expectations, select, marker, self.where(here), tuple(load), split)

    def expectations(
        self, table: dict[str, Any], here: _Path, what: str, *, misspelled: bool = False
    ) -> tuple[Expectation, ...]:
        """`expect` of a [[budget]] or of [session]: the same rules for both (a non-empty list
        of expressions, or one string; no budget twice). A table with an unknown key
        (`misspelled`) that lacks `expect` has had its error already."""
        if "expect" not in table:
            if misspelled:
                raise _Skip
            self.fail(f"a {what} needs 'expect = [...]'", here)
        value = table["expect"]
        at: _Path = (*here, "expect")
        items: list[tuple[Any, _Path]]
        if isinstance(value, str):
            items = [(value, at)]
        elif isinstance(value, list):
            items = [(item, (*at, j)) for j, item in enumerate(value)]
        else:
            self.fail(f"'expect' must be a list of strings, got {type(value).__name__}", at)
        if not items:
            self.fail(f"'expect' is empty: a {what} with no budget checks nothing", at)
        parsed: list[Expectation] = []
        # The same budget by meaning: 'ttft.p95 < 400ms' and 'ttft.p95<0.4s' are one budget.
        seen: dict[tuple[str, str, float], tuple[Expectation, _Path]] = {}
        for item, item_at in items:
            with self.check():
                parsed.append(self.expectation(item, item_at, what, seen))
        return tuple(parsed)

    def expectation(
        self,
        item: Any,
        item_at: _Path,
        what: str,
        seen: dict[tuple[str, str, float], tuple[Expectation, _Path]],
    ) -> Expectation:
        try:
            expectation = parse_expectation(item, source=self.where(item_at))
        except BudgetError as exc:
            self.errors.append((self.lines.line_of(item_at), exc))
            raise _Skip from None
        if what == "[session]" and any(k in LEVEL_FILTER_KEYS for k, _ in expectation.filters):
            self.fail(
                f"{quote(expectation.text)}: a level filter ({', '.join(LEVEL_FILTER_KEYS)}) "
                "chooses the tests of a sweep; [session] pools every call of the run: put it in "
                "a [[budget]] or the test's marker",
                item_at,
            )
        previous, first = seen.setdefault(expectation.meaning, (expectation, item_at))
        if first != item_at:
            self.fail(
                f"'expect' of this {what} gives the same budget twice: "
                f"{quote(previous.text)} (line {self.lines.line_of(first)}) and "
                f"{quote(expectation.text)} (line {self.lines.line_of(item_at)}); "
                f"remove one",
                item_at,
            )
        return expectation
