"""The import direction of DESIGN's architecture, enforced: each module imports only what its
docstring says it may (package modules and third-party libraries alike)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pytest_latency"

# The layers of docs/architecture.md, top to bottom: a module may import modules of the layers
# below its own and nothing above or beside it (its own package's modules aside). `__init__`, the
# public API, re-exports names of these modules lazily.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("plugin",),
    ("cli",),
    ("report", "terminal"),
    ("results",),
    ("testdata", "spend"),
    ("diagnose",),
    ("verdicts",),
    ("evidence",),
    ("pools", "recording", "capture"),
    ("pricing",),
    ("calls", "budgets", "policies", "by_hand", "audit"),
    ("metrics", "attribution"),
    ("wire", "untrusted", "catalogue", "stats", "units", "histogram", "sim", "gc_pauses", "load"),
)
LAYER_OF = {name: index for index, layer in enumerate(LAYERS) for name in layer}
EXTRA: dict[str, set[str]] = {"__init__": {"budgets", "calls", "capture", "metrics", "recording"}}
THIRD_PARTY: dict[str, set[str]] = {
    "pytest": {"plugin"},
    "hdrh": set(),  # the histogram module owns the V2 codec; hdrh is its test oracle only
    "jinja2": {"report"},
    "aiohttp": {"sim"},
    "httpx2": {"plugin", "capture"},
    "httpx": {"capture"},
    "pytest_asyncio": {"plugin"},  # optional: async client fixtures close in the test's loop
    "xdist": {"plugin"},  # the scheduler of a run with split tests (`_shard_schedule`)
    "anthropic": {"plugin"},
    "openai": {"plugin"},
    "google": {"plugin"},  # google-genai, optional: the gemini_client fixtures
    "tomli": {"budgets"},  # tomllib's backport for Python 3.10
    "genai_prices": {"pricing"},  # imported lazily, on the first call priced
    "typing_extensions": {"results"},  # NotRequired, for the type checker only
}


def _may_import(owner: str, target: str) -> bool:
    if target == owner or target in EXTRA.get(owner, set()):
        return True
    if owner not in LAYER_OF or target not in LAYER_OF:
        return False
    return LAYER_OF[target] > LAYER_OF[owner]


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _owner(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved against its own package."""
    package = ["pytest_latency", *path.relative_to(SRC).parent.parts]
    return _imports_of(path.read_text(encoding="utf-8"), package)


def _imports_of(source: str, package: list[str]) -> set[str]:
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module == "pytest_latency":
                names.update(f"pytest_latency.{alias.name}" for alias in node.names)
            else:
                names.add(module)
    return names


def test_relative_imports_are_resolved() -> None:
    # The check sees through `from ..results import SCHEMA` in sim/ as it sees the absolute form.
    source = "from ..results import SCHEMA\nfrom . import _x\nfrom ._wire import y\n"
    resolved = _imports_of(source, ["pytest_latency", "sim"])
    assert resolved == {"pytest_latency.results", "pytest_latency.sim", "pytest_latency.sim._wire"}
    assert not _may_import("sim", "results")
    assert _may_import("results", "histogram") and not _may_import("histogram", "results")


def test_the_layers_name_every_module() -> None:
    owners = {_owner(p) for p in _modules()}
    assert owners - set(LAYER_OF) - set(EXTRA) == set()
    assert set(LAYER_OF) - owners == set(), "a layer names a module that does not exist"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_module_imports_follow_the_architecture(path: Path) -> None:
    owner = _owner(path)
    assert owner in LAYER_OF or owner in EXTRA, f"{owner}: new module, add it to LAYERS"
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "pytest_latency":
            parts = name.split(".")
            if len(parts) == 1:
                continue
            target = parts[1]
            if target.startswith("__"):  # package metadata such as __version__
                continue
            assert _may_import(owner, target), (
                f"{path.relative_to(SRC)} imports {name}: {owner} sits above or beside "
                f"{target} in LAYERS (docs/architecture.md)"
            )
        elif top in THIRD_PARTY:
            assert owner in THIRD_PARTY[top], (
                f"{path.relative_to(SRC)} imports {top}; only {sorted(THIRD_PARTY[top])} may"
            )
        else:
            assert top in sys.stdlib_module_names or top == "__future__", (
                f"{path.relative_to(SRC)} imports undeclared third-party module {top}"
            )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_every_module_says_what_it_owns(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc and len(doc) > 40, f"{path.relative_to(SRC)} needs a module docstring"


def test_importing_the_plugin_stays_cheap() -> None:
    code = (
        "import sys, pytest_latency.plugin; "
        "heavy = {'anthropic', 'openai', 'google.genai', 'jinja2', 'hdrh', 'aiohttp', 'httpx', "
        "'httpx2', "
        "'pytest_latency.verdicts', 'pytest_latency.budgets', 'pytest_latency.metrics', "
        "'pytest_latency.diagnose', 'pytest_latency.capture', 'pytest_latency.sim', "
        "'pytest_latency.results', 'pytest_latency.pools', 'pytest_latency.testdata', "
        # dataclass-heavy (~1 ms each to define): loaded with the first call, not with pytest
        "'pytest_latency.recording', 'pytest_latency.catalogue', 'pytest_latency.wire', "
        # the price table (pydantic and ~1.6 MB of data, ~0.7 s): loaded with the first report
        "'pytest_latency.pricing', 'genai_prices', 'pydantic'"
        "} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]", f"importing the plugin pulled in {out}"
