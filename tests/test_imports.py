"""Every module imports on its own: a command that loads one module first must not meet a circular import
that the test suite's import order happens to hide."""

import json
import subprocess
import sys

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


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    result = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE], capture_output=True, text=True, timeout=300,
                            check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["modules"] > 40 and report["failed"] == []
