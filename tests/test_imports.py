"""Every module imports on its own: a command that loads one module first must not meet a circular import
that the test suite's import order happens to hide."""

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

IMPORT_EACH_ALONE = """
import importlib, json, pkgutil, sys
import dspy_rag
names = [m.name for m in pkgutil.walk_packages(dspy_rag.__path__, "dspy_rag.")]
for sub in ("pipelines", "signatures", "optimizers", "trainsets", "evals"):
    package = importlib.import_module(f"dspy_rag.{sub}")
    names += [f"dspy_rag.{sub}"] + [m.name for m in pkgutil.walk_packages(package.__path__, f"dspy_rag.{sub}.")]
failed = []
for name in sorted(set(names)):
    for loaded in [m for m in sys.modules if m == "dspy_rag" or m.startswith("dspy_rag.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed.append(f"{name}: {exc}")
print(json.dumps({"modules": len(set(names)), "failed": failed}))
"""


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    result = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE], capture_output=True, text=True, timeout=300,
                            check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["modules"] > 40 and report["failed"] == []


# The floors, lowest first: a module imports only from its own floor and those below it.
FLOORS = ("core", "signatures", "pipelines", "trainsets", "evals", "optimizers", "top")
TOP = {"cli", "server", "api", "__init__"}  # the dspy_rag/cli/ and dspy_rag/server/ packages, api.py, the lazy facade
REPO = Path(__file__).resolve().parents[1]


def floor_of_module(name: str) -> str | None:
    """The floor of an imported name: `import dspy_rag` is the package (core), `dspy_rag.Research` the API's."""
    import dspy_rag

    parts = name.split(".")
    if parts[0] != "dspy_rag":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1] in TOP or parts[1] in dspy_rag._EXPORTS and dspy_rag._EXPORTS[parts[1]] == "dspy_rag.api":
        return "top"
    return parts[1] if parts[1] in FLOORS else "core"


def imported_names(file: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in a file, at its top or inside a function."""
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            # `from dspy_rag import pipelines` imports the subpackage, `from dspy_rag import artifacts` a core module
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "dspy_rag" else [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            yield node.lineno, name


def upward_imports(root: Path) -> list[str]:
    """Every import, at the top of a module or inside a function, of a floor above the importing module's."""
    found = []
    for folder in ("dspy_rag", *FLOORS[1:-1]):
        for file in sorted((root / folder).glob("*.py")):
            own = ("top" if file.stem in TOP else "core") if folder == "dspy_rag" else folder
            for line, name in imported_names(file):
                floor = floor_of_module(name)
                if floor is not None and FLOORS.index(floor) > FLOORS.index(own):
                    found.append(f"{file.relative_to(root)}:{line} ({own}) imports {name} ({floor})")
    return found


def test_imports_run_one_way() -> None:
    assert upward_imports(REPO) == []


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    for folder in ("dspy_rag", *FLOORS[1:-1]):
        (tmp_path / folder).mkdir()
    (tmp_path / "pipelines" / "deep.py").write_text("def f():\n    from dspy_rag.optimizers import compile\n")
    (tmp_path / "dspy_rag" / "index.py").write_text("from dspy_rag import api\nfrom dspy_rag import files\n"
                                                    "from dspy_rag import Research\n")
    (tmp_path / "evals" / "rows.py").write_text("import dspy_rag.pipelines.deep\n")  # downward: fine
    assert upward_imports(tmp_path) == [
        "dspy_rag/index.py:1 (core) imports dspy_rag.api (top)",
        "dspy_rag/index.py:3 (core) imports dspy_rag.Research (top)",
        "pipelines/deep.py:2 (pipelines) imports dspy_rag.optimizers (optimizers)",
    ]


CLI_ONLY = ("typer", "rich")  # the command line's libraries: every other module reports through dspy_rag.reporter
CLI_LAYER = Path("dspy_rag", "cli")


def cli_library_imports(root: Path) -> list[str]:
    """Every import of typer or rich (or a module of theirs) outside the dspy_rag/cli/ package."""
    found = []
    for folder in ("dspy_rag", *FLOORS[1:-1]):
        for file in sorted((root / folder).rglob("*.py")):
            if file.relative_to(root).is_relative_to(CLI_LAYER):
                continue
            found += [f"{file.relative_to(root)}:{line} imports {name}" for line, name in imported_names(file)
                      if name.split(".")[0] in CLI_ONLY]
    return found


def test_only_the_command_line_imports_typer_and_rich() -> None:
    assert (REPO / CLI_LAYER / "__init__.py").is_file()  # the layer is where this test looks for it
    assert cli_library_imports(REPO) == []


def test_a_cli_library_import_below_the_command_line_is_found(tmp_path: Path) -> None:
    for folder in ("dspy_rag", "dspy_rag/cli", *FLOORS[1:-1]):
        (tmp_path / folder).mkdir()
    (tmp_path / "dspy_rag" / "cli" / "console.py").write_text("from rich.console import Console\nimport typer\n")
    (tmp_path / "dspy_rag" / "reporter.py").write_text("def f():\n    from rich.progress import Progress\n")
    (tmp_path / "evals" / "evaluate.py").write_text("import typer.testing\nimport richer\n")  # richer: not rich
    assert cli_library_imports(tmp_path) == [
        "dspy_rag/reporter.py:2 imports rich.progress",
        "evals/evaluate.py:1 imports typer.testing",
    ]
