"""Compiled programs on disk: `artifacts/<name>/` with the DSPy state as JSON, a manifest and the
trajectories the program learned from. Never pickle.

An artifact is written into a hidden sibling folder and renamed into place, so an interrupted compile
leaves nothing half-written. Loading refuses what is corrupt (state that does not match its manifest's
checksum), foreign (not ours, or made for other modules) or newer than this version understands.
"""

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.saving import get_dependency_versions
from pydantic import TypeAdapter, ValidationError

from dspy_rag import paths
from dspy_rag.errors import UserError
from dspy_rag.files import json_bytes, shipped_artifacts, write_atomic

FORMAT = "dspy-rag-artifact"
ARTIFACT_VERSION = 1
STATE_FILE, MANIFEST_FILE, TRAJECTORIES_FILE = "program.json", "manifest.json", "trajectories.jsonl"
SHIPPED = shipped_artifacts()  # the compiled defaults that come with the tool
MAX_FILE_BYTES = 20 * 2**20  # a state with a few dozen demos is well under 1 MB
_PLAIN_NAME = re.compile(r"\w[\w.+-]{0,127}")  # no separators, no leading dot (staging folders use one)


def program_signature(program: dspy.Module) -> dict[str, list[str]]:
    """Each predictor's input and output field names: what a state must fit to load into this program."""
    return {name: [*p.signature.input_fields, "->", *p.signature.output_fields]
            for name, p in program.named_predictors()}


@dataclass
class Manifest:
    name: str
    program: str
    predictors: dict[str, list[str]]
    model: str
    optimizer: str
    trainset: str  # the set's name; a pooled compile's sets' names joined by "+"
    trainset_hash: str
    metric: str
    weights: dict[str, float]
    dev_questions: int
    dev_before: float | None
    dev_after: float | None
    teacher: str | None = None
    planner_model: str | None = None  # the planner's own model while compiling (lm.planner_model), if any
    optimizer_settings: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    lm_calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    trajectories: int = 0
    dev_scores: dict[str, list[float]] = field(default_factory=dict)  # question id -> [before, after]
    dev_reused: int = 0  # dev runs (before and after) taken from the run store, not run by this compile
    trainsets: list[dict[str, str]] = field(default_factory=list)  # every set fit on: name, hash (none before pooling)
    dspy_version: str = dspy.__version__
    created: str = ""
    state_sha256: str = ""
    format: str = FORMAT
    version: int = ARTIFACT_VERSION


def dspy_state(program: dspy.Module) -> dict[str, Any]:
    """The program's state as `dspy.Module.save` writes it (so `Module.load` reads it), without LMs: a predictor
    bound to its own LM would carry that LM's settings, keys included, and artifacts hold prompts only."""
    state = program.dump_state()
    for predictor_state in state.values():
        if isinstance(predictor_state, dict):
            predictor_state["lm"] = None
    return {**state, "metadata": {"dependency_versions": get_dependency_versions()}}


def save(folder: Path, program: dspy.Module, manifest: Manifest, trajectories: list[dict[str, Any]],
         replace: bool = False) -> None:
    """Write the artifact atomically: a complete folder appears at `folder`, or nothing changes."""
    if folder.exists() and not replace:
        raise UserError(f"artifact {folder} exists; choose another --name or pass --replace")
    state = json_bytes(dspy_state(program), indent=1)
    manifest.state_sha256 = hashlib.sha256(state).hexdigest()
    manifest.created = manifest.created or datetime.now(UTC).isoformat(timespec="seconds")
    manifest.trajectories = len(trajectories)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        write_atomic(staging / STATE_FILE, state)
        write_atomic(staging / TRAJECTORIES_FILE,
                     b"".join(json_bytes(t) + b"\n" for t in trajectories))
        write_atomic(staging / MANIFEST_FILE, json.dumps(asdict(manifest), indent=1).encode("utf-8"))
        if folder.exists():  # --replace: the old folder moves aside only once the new one is complete
            retired = folder.with_name(f".{folder.name}.retired")
            shutil.rmtree(retired, ignore_errors=True)
            os.replace(folder, retired)
            os.replace(staging, folder)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def folder_for(artifacts_dir: Path, name: str) -> Path:
    """The folder of an artifact called `name`: always directly inside `artifacts_dir`."""
    if not _PLAIN_NAME.fullmatch(name):
        raise UserError(f"artifact name '{name}' must be a plain folder name (letters, digits, '.', '_', '+', '-', "
                        "not starting with '.'), e.g. nvidia-10k-bootstrap")
    return artifacts_dir / name


def locate(name_or_path: str, artifacts_dir: Path) -> Path:
    """A path to an artifact folder, or a name under the configured artifacts folder or the shipped ones."""
    if paths.named(Path(name_or_path), "artifact").is_dir():
        return Path(name_or_path)
    for root in (artifacts_dir, SHIPPED):
        if (candidate := folder_for(root, name_or_path)).is_dir():
            return candidate
    raise UserError(f"no artifact '{name_or_path}' (looked in {artifacts_dir} and {SHIPPED}); "
                    "list them with `ls artifacts`, or compile one with `dspy-rag compile`")


def default_name(model: str) -> str:
    """The shipped artifact for a model: `deep-qwen2.5-coder-0.5b` for `local/qwen2.5-coder-0.5b`."""
    return "deep-" + model.split("/")[-1]


def chosen(setting: str, artifacts_dir: Path, model: str) -> Path | None:
    """The artifact folder a setting names: `none` for the uncompiled program, `auto` for the model's default."""
    if setting == "none":
        return None
    if setting == "auto":
        if paths.name_problem(Path(default_name(model))):  # no artifact can be named after this model
            return None
        return next((d for d in (artifacts_dir / default_name(model), SHIPPED / default_name(model)) if d.is_dir()),
                    None)
    return locate(setting, artifacts_dir)


def read_plain(path: Path) -> bytes:
    """A file of the artifact itself: not a link to somewhere else, not a device, not absurdly large."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path} is not a plain file (a link or a device); an artifact holds its own files, "
                        "recompile it")
    if info.st_size > MAX_FILE_BYTES:
        raise UserError(f"{path} is {info.st_size / 2**20:.0f} MB, over the {MAX_FILE_BYTES // 2**20} MB an "
                        "artifact file may hold; recompile the artifact")
    return path.read_bytes()


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST_FILE
    try:
        raw = json.loads(read_plain(path).decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{folder} is not a dspy-rag artifact (no {MANIFEST_FILE}); compile one with "
                        "`dspy-rag compile`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is corrupt ({type(exc).__name__}); recompile the artifact") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise UserError(f"{folder} is not a dspy-rag artifact (its manifest is foreign); compile one with "
                        "`dspy-rag compile`")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path} is corrupt (version {version!r:.20} is no artifact version); recompile the artifact")
    if version > ARTIFACT_VERSION:
        raise UserError(f"{folder} was written by a newer dspy-rag (artifact version {version}, this one reads up "
                        f"to {ARTIFACT_VERSION}); upgrade dspy-rag")
    known = {f.name: f.type for f in fields(Manifest)}
    for name, value in raw.items():
        try:  # strict: a mistyped field ("predictors": 5, "model": 42) is corrupt, not coerced
            if name in known:
                TypeAdapter(known[name]).validate_python(value, strict=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join([name, *(str(part) for part in first["loc"])])
            raise UserError(f"{path} is corrupt ({where}: {first['msg'].lower()}); recompile the artifact") from exc
    try:
        return Manifest(**{k: v for k, v in raw.items() if k in known})
    except TypeError as exc:
        raise UserError(f"{path} is corrupt (missing fields); recompile the artifact") from exc


@dataclass(frozen=True)
class Rename:
    """A predictor of an older program under its current name. Its state moves whole, unless its signature changed
    too (`fields`): then its demos' fields are renamed, the fields the new signature lacks dropped, and the new
    signature's own instruction kept (the old one asked for another output)."""

    old: str
    new: str
    fields: dict[str, str] | None = None


SYNTHESIZER = "synthesizer.short_answer.predict"
# Each role became a module of its own, its predictor named after it; before that, the synthesizer wrote a cited
# answer and a short answer in JSON, where the short answer is now its own plain call.
RENAMES = (
    Rename("synthesize", SYNTHESIZER, {"evidence": "passages"}),
    Rename("short_answer.predict", SYNTHESIZER),
    Rename("plan", "planner.predict"),
    Rename("rewrite", "researcher.rewriter.predict"),
    Rename("supervise", "researcher.supervisor.predict"),
    Rename("distill", "researcher.distiller.predict"),
    Rename("reflect", "researcher.reflection.predict"),
    Rename("decide", "policy.predict"),
)
# Predictors the program gained since; an artifact compiled before one loads it uncompiled (its own instruction).
ADDED = ("router.route", "router.general", "synthesizer.repair.predict")


def migrated_predictors(predictors: dict[str, list[str]], expected: dict[str, list[str]]
                        ) -> tuple[dict[str, list[str]], list[Rename]]:
    """The manifest's predictors as this program names them (with those added since), and the renames that took.
    A predictor that moves whole keeps the fields it was compiled with, so one whose signature changed since still
    fails to load."""
    out = {**predictors, **{name: expected[name] for name in ADDED if name in expected and name not in predictors}}
    renamed: list[Rename] = []
    for rename in RENAMES:
        if rename.old in out and rename.old not in expected and rename.new in expected and rename.new not in out:
            out = {(rename.new if k == rename.old else k):
                   (expected[rename.new] if k == rename.old and rename.fields is not None else v)
                   for k, v in out.items()}
            renamed.append(rename)
    return out, renamed


def migrated_state(state: dict[str, Any], renamed: list[Rename], program: dspy.Module) -> dict[str, Any]:
    """The saved state with each renamed predictor's state moved to its new name (and fields), and the program's
    own state for each predictor added since."""
    predictors = dict(program.named_predictors())
    for name in ADDED:
        if name in predictors and name not in state:
            state[name] = predictors[name].dump_state()
    for rename in renamed:
        old = state.pop(rename.old)
        if rename.fields is None:
            state[rename.new] = old
            continue
        target = predictors[rename.new]
        keep = set(target.signature.fields)
        demos = [{rename.fields.get(k, k): v for k, v in demo.items() if rename.fields.get(k, k) in keep}
                 for demo in old.get("demos", [])]
        state[rename.new] = {**target.dump_state(), "demos": demos}
    return state


def load(folder: Path, program: dspy.Module) -> Manifest:
    """Load the artifact's prompts and demos into `program`; its manifest says where it came from."""
    manifest = read_manifest(folder)
    expected = program_signature(program)
    predictors, renamed = migrated_predictors(manifest.predictors, expected)
    if predictors != expected:
        raise UserError(f"{folder} was compiled for other modules ({', '.join(manifest.predictors) or 'none'}) than "
                        f"this {type(program).__name__} has; recompile it for this program")
    try:
        state = read_plain(folder / STATE_FILE)
    except OSError as exc:
        raise UserError(f"{folder / STATE_FILE} cannot be read ({exc.strerror}); recompile the artifact") from exc
    if hashlib.sha256(state).hexdigest() != manifest.state_sha256:
        raise UserError(f"{folder / STATE_FILE} is corrupt (it does not match its manifest's checksum); "
                        "recompile the artifact")
    try:
        saved = json.loads(state)
        saved.pop("metadata", None)  # DSPy's own record of the versions it was saved with
        program.load_state(migrated_state(saved, renamed, program))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{folder / STATE_FILE} does not fit this program ({type(exc).__name__}); recompile") from exc
    return manifest
