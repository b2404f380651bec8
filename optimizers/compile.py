"""`dspy-rag compile`: optimize the deep program's prompts and demos on a trainset's train split, or on the pooled
train splits of several (optimizer/pool.py).

The dev split is scored before and after with the same metric (its runs shared with eval through the run
store); the gain is reported with a paired bootstrap interval, so a gain inside noise reads as one. The result is saved as an artifact (atomically,
at the very end: an interrupted compile leaves nothing) and one line is appended to the ledger.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import dspy

from dspy_rag import artifacts
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.research_metric import ResearchMetric
from dspy_rag.evals.rows import weighted
from dspy_rag.evals.stats import gain_interval, verdict
from dspy_rag.evals.stored_runs import AnswerRuns
from dspy_rag.ledger import LedgerEntry, append
from dspy_rag.models import loaded, loaded_beside, mark, planner_lm, usage_after
from dspy_rag.optimizers.evidence import with_found_evidence
from dspy_rag.optimizers.pool import Pool, PooledProgram, SetPrograms
from dspy_rag.optimizers.teleprompters import CALLS_PER_RUN, OPTIMIZERS, Optimizer, optimizer_settings
from dspy_rag.pipelines.programs import build_program
from dspy_rag.reporter import QUIET, Bars, Reporter
from dspy_rag.retrieval import Retriever
from dspy_rag.run_store import RunStore, Tally, code_version, run_context
from dspy_rag.tracking import mlflow_run

SECONDS_PER_CALL = {"local/qwen2.5-coder-0.5b": 6.5, "local/qwen2.5-coder-1.5b": 16.0}
VALSET_SHARE = 4  # optimizers that search keep every 4th train example aside to score candidates


@dataclass
class CompileRequest:
    trainset: str | list[str]  # one name or path, several, or several joined by commas: their splits are pooled
    optimizer: str
    name: str | None = None
    teacher: str | None = None
    parent: str | None = None
    weights: dict[str, float] | None = None
    threshold: float = 0.5
    settings: dict[str, Any] = field(default_factory=dict)
    train_limit: int | None = None
    dev_limit: int | None = None
    replace: bool = False


@dataclass
class Estimate:
    program_runs: int
    lm_calls: int
    seconds: float | None


@dataclass
class Splits:
    train: list[dspy.Example]
    val: list[dspy.Example]
    dev: list[dspy.Example]


def splits(pool: Pool, optimizer: Optimizer, train_limit: int | None, dev_limit: int | None) -> Splits:
    """The pooled splits, the limits taken per set."""
    train, dev = pool.examples("train", train_limit), pool.examples("dev", dev_limit)
    val = train[::VALSET_SHARE] if optimizer.needs_valset and len(train) >= VALSET_SHARE else []
    return Splits([e for e in train if e not in val], val, dev)


def estimate(optimizer: Optimizer, settings: dict[str, Any], data: Splits, model: str,
             teacher: str | None = None) -> Estimate:
    """An upper bound: the dev runs before and after go at the model's speed, the optimizer's runs at the slower
    of model and teacher (a teacher runs the bootstrapped traces; the student scores candidates)."""
    optimizing, dev = optimizer.runs(len(data.train), len(data.val), settings), 2 * len(data.dev)
    runs = optimizing + dev
    rates = [SECONDS_PER_CALL.get(m) for m in (model, teacher) if m]
    if None in rates:
        return Estimate(runs, runs * CALLS_PER_RUN, None)
    seconds = (optimizing * max(rates) + dev * rates[0]) * CALLS_PER_RUN
    return Estimate(runs, runs * CALLS_PER_RUN, seconds)


class Tracker:
    """Progress per phase, and the trajectories of the runs the optimizer learned from."""

    def __init__(self, bars: Bars, key: Callable[[dspy.Example], str] = lambda example: example.id) -> None:
        self.bars, self.key = bars, key  # key: an example's id in the artifact (SET:ID when pooled)
        self.phase = self.label = ""
        self.unit = "run"
        self.done = 0
        self.learned_from: list[dict[str, Any]] = []

    def start(self, phase: str, label: str, total: int | None, unit: str = "run") -> None:
        self.phase, self.label, self.unit, self.done = phase, label, unit, 0
        self.bars.start(label, total)

    def __call__(self, example: dspy.Example, prediction: dspy.Prediction | None, score: float) -> None:
        """One scored run or plan; no prediction when the run came from the run store."""
        self.done += 1
        how = "scored" if prediction is not None else "reused from the run store"
        self.bars.advance(f"{self.label}: {self.unit} {self.done} ({example.id}) {how} {score:.3f}")
        trajectory = getattr(prediction, "trajectory", None)
        if self.phase == "optimize" and trajectory is not None:
            self.learned_from.append({"example": self.key(example), "score": round(score, 4),
                                      "trajectory": trajectory.to_json()})


class StoredScores:
    """A program's scores on dev (or validation) questions, through the run store: a program scored before, by a
    compile or an eval with the same prompts, demos, model, settings and code, is not run again (a recompile does
    not pay for its parent's dev run). Each question runs on its own set's index and web, and is stored under that
    set, as its eval would store it."""

    def __init__(self, store: RunStore, config: Config, pool: Pool, programs: SetPrograms, name: str) -> None:
        self.store, self.config, self.pool, self.programs, self.name = store, config, pool, programs, name
        self.questions = {(s.name, q.id): q for s in pool.sets for part in ("train", "dev") for q in s.questions(part)}
        self.tally = Tally()

    def _runs(self, program: dspy.Module, trainset: str) -> tuple[dspy.Module, AnswerRuns]:
        bound = self.programs.bound(program, trainset)
        member = self.pool.member(trainset)
        return bound, AnswerRuns(self.store, run_context(bound, self.config, member.name, member.content_hash,
                                                         f"deep (compile {self.name})", self.programs.webs[trainset]))

    def scores(self, program: dspy.Module, examples: list[dspy.Example], metric: ResearchMetric) -> list[float]:
        if isinstance(program, PooledProgram):  # an optimizer's candidate: its prompts are the first program's
            program = program.first()
        bound: dict[str, tuple[dspy.Module, AnswerRuns]] = {}  # the program bound once to each set
        scores = []
        for example in examples:
            if example.trainset not in bound:
                bound[example.trainset] = self._runs(program, example.trainset)
            scores.append(self._score(*bound[example.trainset], example, metric))
        return scores

    def _score(self, program: dspy.Module, runs: AnswerRuns, example: dspy.Example, metric: ResearchMetric) -> float:
        question = self.questions[(example.trainset, example.id)]
        run = runs.stored(self.name, question)
        if run is None:
            run = runs.run(program, self.name, question)
            self.tally.run += 1
        else:
            self.tally.reused += 1
        score = weighted(run.row, metric.weights)
        metric.on_score(example, run.prediction, score)
        return score


def gain_text(gain: float, interval: list[float] | None) -> str:
    if interval is None:
        return f"{gain:+.3f} (too few dev questions to tell a gain from noise)"
    low, high = interval
    return f"{gain:+.3f} (95% CI {low:+.3f} … {high:+.3f}: {verdict(low, high)})"


@dataclass
class Outcome:
    """What the optimize phase gives the record phase."""
    program: dspy.Module
    before: list[float]
    after: list[float]
    learned_from: list[dict[str, Any]]
    candidates: list[dict[str, Any]]  # what a searching optimizer scored, e.g. each demo draw's validation score


def optimize(program: dspy.Module, data: Splits, optimizer: Optimizer, settings: dict[str, Any],
             metric: ResearchMetric, dev: StoredScores, teacher: dspy.LM | None, lm: dspy.LM,
             tracker: Tracker) -> Outcome:
    """Score the dev split, compile on the train split, score the dev split again. A teleprompter that ranks
    candidates on validation questions (`scorer`) scores them through the run store too, apart from the dev tally."""
    tracker.start("before", f"dev before ({len(data.dev)})", len(data.dev))
    before = dev.scores(program, data.dev, metric)
    scored, unit = optimizer.scored(len(data.train), len(data.val), settings), optimizer.unit
    tracker.start("optimize", f"optimize ({optimizer.name}, ≤{scored} {unit}s)", None, unit)
    teleprompter = optimizer.build(metric, settings, teacher, lm)
    if hasattr(teleprompter, "scorer"):
        validation = StoredScores(dev.store, dev.config, dev.pool, dev.programs, dev.name)
        teleprompter.scorer = lambda candidate, examples: mean(
            validation.scores(candidate, examples, metric))
    student, train, val = program, data.train, data.val
    if len(dev.pool.sets) > 1:  # each train question researched on its own set's index and web
        student, train, val = dev.programs.pooled(program), PooledProgram.routed(train), PooledProgram.routed(val)
    extra = {"valset": val} if val else {}
    compiled = teleprompter.compile(student, trainset=train, **extra, **optimizer.compile_args(settings))
    if isinstance(compiled, PooledProgram):
        compiled = compiled.first()
    tracker.start("after", f"dev after ({len(data.dev)})", len(data.dev))
    return Outcome(compiled, before, dev.scores(compiled, data.dev, metric), tracker.learned_from,
                   getattr(teleprompter, "candidates", []))


def record(folder: Path, outcome: Outcome, manifest: artifacts.Manifest, config: Config, replace: bool,
           gain_ci: list[float] | None) -> None:
    """Save the artifact, then append its ledger line: a ledger line never names a missing artifact."""
    artifacts.save(folder, outcome.program, manifest, outcome.learned_from, replace=replace)
    append(config.artifacts.path / "ledger.jsonl", LedgerEntry(
        kind="compile", artifact=manifest.name, parent=manifest.parent, model=manifest.model,
        trainset=manifest.trainset, trainset_hash=manifest.trainset_hash, split="dev", metric=manifest.metric,
        score=manifest.dev_after or 0.0, score_before=manifest.dev_before, questions=manifest.dev_questions,
        optimizer=manifest.optimizer, lm_calls=manifest.lm_calls, tokens=manifest.tokens, seconds=manifest.seconds,
        reused=manifest.dev_reused, gain_ci=gain_ci, code_version=code_version()))


def compile_program(request: CompileRequest, config: Config, reporter: Reporter = QUIET) -> artifacts.Manifest:
    if request.optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer '{request.optimizer}'; choose {', '.join(OPTIMIZERS)}")
    optimizer = OPTIMIZERS[request.optimizer]
    settings = optimizer_settings(optimizer, request.settings)
    pool = Pool.load(request.trainset)
    data = splits(pool, optimizer, request.train_limit, request.dev_limit)
    model = config.lm.model
    name = request.name or f"{pool.name}-{optimizer.name}-{model.split('/')[-1]}"
    folder = artifacts.folder_for(config.artifacts.path, name)
    if folder.exists() and not request.replace:
        raise UserError(f"artifact {folder} exists; choose another --name or pass --replace")
    started = time.perf_counter()
    tools = {s.name: (s.index(config), s.web(config)) for s in pool.sets}
    retrievers = {name: Retriever(index, config.retrieval.top_k, config.retrieval.rrf_k)
                  for name, (index, _web) in tools.items()}
    data.train = with_found_evidence(data.train, retrievers)
    reporter.say(f"loading {model}" + (f" and the teacher {request.teacher}" if request.teacher else ""))
    lm = loaded(config.lm)  # a teacher that is also the planner model loads once
    teacher = loaded_beside(config.lm, request.teacher) if request.teacher else None
    dspy.configure(lm=lm, adapter=dspy.JSONAdapter())
    program = build_program("deep", config, *tools[pool.sets[0].name])
    if request.parent:
        parent = artifacts.load(artifacts.locate(request.parent, config.artifacts.path), program)
        reporter.say(f"starting from {parent.name} (compiled for {parent.model} by {parent.optimizer})")
    marked = mark(lm, teacher, planner_lm(config.lm))
    with mlflow_run(config, name, reporter.say) as tracked:
        with reporter.bars() as bars:
            tracker = Tracker(bars, pool.key)
            metric = ResearchMetric(request.weights, request.threshold, on_score=tracker)
            tracked.params({"optimizer": optimizer.name, **settings, "model": model, "teacher": request.teacher,
                            "parent": request.parent, "trainset": pool.name, "trainset_hash": pool.content_hash,
                            "metric": metric.name, "train": len(data.train), "dev": len(data.dev)})
            with RunStore.of(config) as store:
                dev = StoredScores(store, config, pool, SetPrograms(config, tools), name)
                outcome = optimize(program, data, optimizer, settings, metric, dev, teacher, lm, tracker)
        before, after = outcome.before, outcome.after
        usage = usage_after(marked)
        manifest = artifacts.Manifest(
            name=name, program=type(program).__name__, predictors=artifacts.program_signature(outcome.program),
            model=model, optimizer=optimizer.name, trainset=pool.name, trainset_hash=pool.content_hash,
            trainsets=pool.record(),
            metric=metric.name, weights=metric.weights, dev_questions=len(data.dev),
            dev_before=round(sum(before) / len(before), 4), dev_after=round(sum(after) / len(after), 4),
            teacher=request.teacher, planner_model=config.lm.separate_planner,
            optimizer_settings={**settings, "threshold": request.threshold, "train": len(data.train),
                                "val": len(data.val),
                                **({"candidates": outcome.candidates} if outcome.candidates else {})},
            parent=request.parent and parent.name, lm_calls=usage["lm_calls"],
            tokens=usage["prompt_tokens"] + usage["completion_tokens"],
            seconds=round(time.perf_counter() - started, 1),
            dev_scores={pool.key(e): [round(b, 4), round(a, 4)] for e, b, a in zip(data.dev, before, after, strict=True)},
            dev_reused=dev.tally.reused)
        interval = gain_interval(before, after)
        record(folder, outcome, manifest, config, request.replace, interval)
        tracked.metrics({"dev_before": manifest.dev_before, "dev_after": manifest.dev_after,
                         "lm_calls": manifest.lm_calls, "tokens": manifest.tokens, "seconds": manifest.seconds})
        reporter.say(f"dev ({len(data.dev)} questions) {manifest.dev_before:.3f} → {manifest.dev_after:.3f}, gain "
            f"{gain_text(mean(after) - mean(before), interval)}; dev runs: {dev.tally.text()}; "
            f"{manifest.lm_calls} LM calls, {manifest.seconds:.0f} s; saved {folder}")
    return manifest
