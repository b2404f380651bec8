"""`dspy-rag eval`: programs side by side on the same questions, one column per pipeline × artifact × model
(× stopping policy, for the deep program).

    dspy-rag eval --questions nvidia-10k --artifact none --artifact nvidia-10k-labeled --model local/qwen2.5-coder-1.5b
    dspy-rag eval --questions nvidia-10k --artifact tenk-bootstrap --policy llm --policy learned --policy plan
    dspy-rag eval --questions hotpotqa --questions musique --artifact none --artifact auto

Several sets' dev questions pool into one table (each question asked on its own set's index and web), with a
table per set beside it.

Every column is scored per question with the shared metrics and with ragas' (`ragas_bridge`; its LLM metrics
with `--judge MODEL`); the table gives means with bootstrap intervals and each column's gain over the first
with a paired interval (same questions resampled). Every run is kept in the run store as it finishes
(`dspy_rag.run_store`), so an interrupted eval resumes and a run made before, by any eval or compile, is reused;
the eval's folder holds its rows and trajectories beside the report. Every column with a run made now appends
a line to the ledger.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_rag import artifacts, paths
from dspy_rag.config import Config, GuardConfig, RoleConfig
from dspy_rag.errors import UserError
from dspy_rag.evals.ragas_bridge import HEADERS, Judge, RagasInputs, cell, ragas_scores, summarize
from dspy_rag.evals.rows import (
    PIPELINES,
    RESULTS,
    EvalSet,
    Key,
    Row,
    cached_rows,
    kept_trajectories,
    load_set,
    weighted,
)
from dspy_rag.evals.rows import summarize as summarize_answers
from dspy_rag.evals.stats import MIN_QUESTIONS_FOR_AN_INTERVAL, bootstrap_ci, gain_interval, paired_delta_ci
from dspy_rag.evals.stored_runs import AnswerRuns, StoredRun
from dspy_rag.files import write_atomic, write_json_atomic
from dspy_rag.ledger import LedgerEntry, append, append_line, ledger_path, read
from dspy_rag.reporter import QUIET, Reporter
from dspy_rag.run_store import RunStore, Tally, code_version, run_context
from dspy_rag.tracking import mlflow_run
from dspy_rag.trainsets.registry import SEPARATOR, Trainset, load_trainsets, pooled_hash

if TYPE_CHECKING:
    import dspy


GUARDS = tuple(GuardConfig.model_fields)
ROLES = tuple(RoleConfig.model_fields)  # the deep program's optional roles, each with a code fallback
ABLATIONS = (*GUARDS, *ROLES)
LOGGED = ("score", "em", "f1", "evidence_recall", "citation_validity", "median_seconds", "median_lm_calls")


@dataclass(frozen=True)
class Switch:
    """A guard or optional role of the deep program turned off (or on), for its ablation column."""

    name: str
    on: bool = False

    def __str__(self) -> str:
        return f"{'with' if self.on else 'without'}-{self.name}"

    @property
    def part(self) -> str:
        """The configuration section it switches in: guards or roles."""
        return "guards" if self.name in GUARDS else "roles"


@dataclass(frozen=True)
class Column:
    pipeline: str
    artifact: str  # "none" for the uncompiled deep program and for the baseline
    model: str
    policy: str = "llm"  # the deep program's stopping policy; the baseline has none
    switch: Switch | None = None  # an ablation column's guard or role, set against the configuration
    planner: str | None = None  # the deep program's planner model, when not `model`

    @property
    def label(self) -> str:
        program = self.pipeline if self.artifact == "none" else f"{self.pipeline}+{self.artifact}"
        policy = "" if self.policy == "llm" else f"/{self.policy}"
        ablation = f"-{self.switch}" if self.switch else ""
        planner = f"+planner-{self.planner.split('/')[-1]}" if self.planner else ""
        return f"{program}{policy}{ablation}@{self.model.split('/')[-1]}{planner}"


def columns_of(pipelines: list[str], artifacts: list[str], models: list[str],
               policies: Sequence[str] = ("llm",), switches: Sequence[Switch] = (),
               planners: Sequence[str | None] = (None,)) -> list[Column]:
    """Every combination; artifacts, policies, planner models and ablations are the deep program's, so the other
    programs run once per model. Each deep column is followed by one column per guard or role switched."""
    made: list[Column] = []
    for m, p, a, policy, planner in itertools.product(models, pipelines, artifacts, policies, planners):
        if p != "deep":
            made.append(Column(p, "none", m))
            continue
        separate = planner if planner != m else None  # a planner of the column's own model: the model plans
        made += [Column(p, a, m, policy, s, separate) for s in (None, *switches)]
    return list(dict.fromkeys(made))


def mlflow_key(label: str) -> str:
    """A column label as an MLflow metric name, which allows no '@' or '+'."""
    return re.sub(r"[^\w./ -]", "_", label)


def ledger_name(column: Column, artifacts_dir: Path) -> str | None:
    """The baseline and the plain yardstick are lineages of their own in `history`; the uncompiled deep program
    is None, and `auto` is the artifact it loads for the column's model (None where the model has none). An
    ablation is no lineage (the ledger follows prompts)."""
    if column.pipeline != "deep":
        return column.pipeline
    if column.artifact == "auto":
        folder = artifacts.chosen("auto", artifacts_dir, column.model)
        return folder.name if folder else None
    return None if column.artifact == "none" else column.artifact


def interval_text(values: list[float], paired_with: list[float] | None = None) -> str:
    if len(values) < MIN_QUESTIONS_FOR_AN_INTERVAL:
        return "(too few questions for an interval)"
    low, high = paired_delta_ci(paired_with, values) if paired_with is not None else bootstrap_ci(values)
    return f"[{low:+.3f}, {high:+.3f}]" if paired_with is not None else f"[{low:.3f}, {high:.3f}]"


def summary(rows: list[Row], weights: dict[str, float], first: list[Row] | None) -> dict[str, Any]:
    scores = [weighted(r, weights) for r in rows]
    result: dict[str, Any] = {
        **summarize_answers(rows), "score": round(statistics.fmean(scores), 4), "score_ci": interval_text(scores),
        "ragas": summarize([r.ragas for r in rows], [r.judge_failed for r in rows]),
    }
    result["f1_ci"] = interval_text([r.f1 for r in rows])
    if first is not None:
        base = [weighted(r, weights) for r in first]
        result["delta"] = round(statistics.fmean(scores) - statistics.fmean(base), 4)
        result["delta_ci"] = interval_text(scores, base)
        result["f1_delta"] = round(statistics.fmean(r.f1 for r in rows) - statistics.fmean(r.f1 for r in first), 4)
        result["f1_delta_ci"] = interval_text([r.f1 for r in rows], [r.f1 for r in first])
    return result


def ragas_names(results: dict[str, dict[str, Any]]) -> list[str]:
    """The ragas metrics of any column, in the bridge's order."""
    return list(dict.fromkeys(name for r in results.values() for name in r["ragas"]))


def markdown(results: dict[str, dict[str, Any]], title: str) -> str:
    names = ["score", "score_ci", "delta", "delta_ci", "em", "f1", "f1_ci", "f1_delta", "f1_delta_ci", "contains", "evidence_recall", "citation_validity",
             "median_lm_calls", "mean_lm_calls", "median_tokens", "mean_tokens", "median_seconds",
             "median_seconds_2_3_steps", "mean_steps", "outside_lm_share", "stopped_early", "failed"]
    ragas = ragas_names(results)
    lines = [f"# {title}", "", "| column | " + " | ".join(names + ragas) + " |",
             "|---" * (len(names) + len(ragas) + 1) + "|"]
    cells = lambda r: [str(r.get(n, "")) for n in names] + [cell(r["ragas"].get(n)) for n in ragas]  # noqa: E731
    lines += [f"| {label} | " + " | ".join(cells(r)) + " |" for label, r in results.items()]
    return "\n".join(lines) + "\n"


def table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The results as the eval's table shows them: its headers and a row of cells per column."""
    ragas = ragas_names(results)
    headers = ["column", "score", "95% CI", "Δ first", "Δ 95% CI", "F1", "ΔF1 first", "ΔF1 95% CI", "evidence",
               "citations", "calls", "steps",
               "s", *(HEADERS[n] for n in ragas)]
    rows = [[label, f"{r['score']:.3f}", r["score_ci"], f"{r.get('delta', 0):+.3f}" if "delta" in r else "",
             r.get("delta_ci", ""), f"{r['f1']:.3f}", f"{r['f1_delta']:+.3f}" if "f1_delta" in r else "",
             r.get("f1_delta_ci", ""), str(r["evidence_recall"]), str(r["citation_validity"]),
             str(r["median_lm_calls"]), str(r["mean_steps"]), str(r["median_seconds"]),
             *(cell(r["ragas"].get(n)) for n in ragas)]
            for label, r in results.items()]
    return headers, rows


def with_ragas(row: Row, inputs: RagasInputs, judge: Judge | None) -> Row:
    """The row with its ragas scores (the LLM-free ones, and the judged ones when there is a judge) and the
    inputs they were scored on."""
    scores = ragas_scores(inputs, judge)
    return replace(row, ragas=scores.values, judge=scores.judge, judge_failed=scores.failed,
                   ragas_inputs=asdict(inputs))


def judged_as_asked(row: Row, judge: Judge | None) -> bool:
    """A cached row stands, unless a judge is asked for that did not judge it."""
    return judge is None or row.judge == judge.model


class EvalFolder:
    """The eval's own rows and deep trajectories beside its report (rows.jsonl, trajectories.jsonl): a view of
    the runs it showed, appended as they finish; a line already there as it stands is not written again."""

    def __init__(self, rows: Path) -> None:
        self.rows, self.trajectories = rows, rows.with_name("trajectories.jsonl")
        self.logged, self.logged_trajectories = cached_rows(self.rows), kept_trajectories(self.trajectories)
        rows.parent.mkdir(parents=True, exist_ok=True)

    def add(self, key: Key, row: Row, trajectory: dict[str, Any] | None) -> None:
        if self.logged.get(key) != row:
            append_line(self.rows, asdict(row))
        if trajectory is not None and self.logged_trajectories.get(key) != trajectory:
            # For reading why a question failed, and for learning from.
            append_line(self.trajectories, {"set": key[0], "pipeline": key[1], "id": key[2], "trajectory": trajectory})


def untouched(switch: Switch, trajectory: dict[str, Any]) -> bool:
    """Whether the switch would have changed nothing of the full program's recorded run: a guard turned off that
    never fired, or the repair (turned on or off) of an answer with nothing flagged, which it never calls for."""
    if switch.name in GUARDS and not switch.on:
        return "guards" in trajectory and not any(fired["guard"] == switch.name for fired in trajectory["guards"])
    if switch.name == "repair":
        return trajectory.get("flagged") == [] if switch.on else "repair" in trajectory and trajectory["repair"] is None
    return False


def same_run_because(switch: Switch) -> str:
    return "the guard never fired" if switch.name in GUARDS else "nothing to repair"


def unchanged_by(column: Column, key: tuple[str, str, str], done: dict[tuple[str, str, str], Row],
                 trajectories: dict[tuple[str, str, str], dict[str, Any]]) -> Row | None:
    """The full program's row of a question its ablation's switch leaves untouched (`untouched`): a switch that
    changes no call makes the same run (the programs are greedy; the noise of a run twice is measured beside).
    None when it would change the run, or the trajectory predates the records that tell."""
    if column.switch is None:
        return None
    full = (key[0], replace(column, switch=None).label, key[2])
    trajectory = trajectories.get(full)
    if full not in done or trajectory is None or not untouched(column.switch, trajectory):
        return None
    return replace(done[full], pipeline=column.label, same_as=full[1])


@dataclass
class Measured:
    """Each column's rows, the rows run this time (the rest were reused), and the columns judged this time."""

    rows: dict[Column, list[Row]]
    new: dict[Column, list[Row]]
    judged: set[Column]

    def fresh(self) -> list[Column]:
        """The columns that ran or judged anything this time."""
        return [c for c in self.rows if self.new[c] or c in self.judged]

    def tally(self, column: Column) -> Tally:
        return Tally(len(self.new[column]), len(self.rows[column]) - len(self.new[column]))


Prepare = Callable[[Column], tuple["dspy.Module", AnswerRuns]]


def run_columns(eval_set: EvalSet, columns: list[Column], cache: Path, prepare: Prepare,
                use_lm: Callable[[Column], None], judge: Judge | None = None, reporter: Reporter = QUIET) -> Measured:
    """Each column's rows: from the run store when the same run was made before, else run now (`prepare` gives
    a column's program and its runs in the store; `use_lm` readies its model). The rows and trajectories are
    also appended to the eval's folder (`cache`) when they are new to it."""
    folder = EvalFolder(cache)
    done: dict[Key, Row] = {}
    trajectories: dict[Key, dict[str, Any]] = {}
    measured = Measured({}, {}, set())
    for column in columns:
        program, runs = prepare(column)
        measured.rows[column], measured.new[column] = [], []
        for n, question in enumerate(eval_set.questions, start=1):
            key = (eval_set.name, column.label, question.id)
            run = runs.stored(column.label, question)
            if run is None and (unchanged := unchanged_by(column, key, done, trajectories)) is not None:
                run = StoredRun(unchanged, None, reused=True)
            elif run is None:
                use_lm(column)
                run = runs.run(program, column.label, question)
            if run.row.ragas is None or not judged_as_asked(run.row, judge):
                # The answer stands; its ragas scores (or the judge asked for) are new to it.
                run.row = with_ragas(run.row, RagasInputs.from_json(run.row.ragas_inputs or {}), judge)
                if run.row.same_as is None:
                    runs.keep(question, run)
                if judge is not None:
                    measured.judged.add(column)
            done[key] = run.row
            if run.trajectory is not None:
                trajectories[key] = run.trajectory
            folder.add(key, run.row, run.trajectory)
            reporter.line(f"{column.label} {n}/{len(eval_set.questions)} {progress_text(column, run)}")
            measured.rows[column].append(run.row)
            if not run.reused:
                measured.new[column].append(run.row)
    return measured


def progress_text(column: Column, run: StoredRun) -> str:
    """A question's line of progress: its F1 and seconds, and whether it failed or its run was another's."""
    row = run.row
    failed = f" (failed: {row.failed})" if row.failed else ""
    same = (f" (the same run as {row.same_as}: {same_run_because(column.switch)})"
            if row.same_as and column.switch else "")
    reused = " (reused from the run store)" if run.reused and not row.same_as else ""
    return f"f1 {row.f1:.2f} {row.seconds:.0f} s{failed}{same}{reused}"


def column_settings(config: Config, column: Column) -> Config:
    """A column's settings: its model's as `settings_for` scopes them (its planner's scoped again from those, so a
    planner of the provider lm.api_key was set for keeps it beside another provider's column model), its guard or
    role switched."""
    from dspy_rag.models import settings_for

    scoped = settings_for(config.lm, column.model).model_copy(update={"planner_model": column.planner})
    settings = config.model_copy(update={"lm": scoped})
    if (switch := column.switch) is not None:
        switched = getattr(config, switch.part).model_copy(update={switch.name: switch.on})
        settings = settings.model_copy(update={switch.part: switched})
    return settings


def run_eval(config: Config, questions: str | Sequence[str], pipeline: list[str] | None = None,
             artifact: list[str] | None = None, model: list[str] | None = None, policy: list[str] | None = None,
             without: list[str] | None = None, limit: int | None = None, out_dir: Path | None = None,
             judge: str | None = None, reporter: Reporter = QUIET, with_: list[str] | None = None,
             take: int = 1, planner_model: list[str] | None = None) -> dict[str, Any]:
    """Evaluate pipelines, artifacts and models side by side on the dev questions of one trainset, or of several
    pooled (None: deep, the uncompiled program, the configured model, the LM policy; `limit` is per set; `take`
    2, 3 ... measures the same runs again, apart from the first; `planner_model`: the deep program's planner models,
    "none" for the column's own model, default the configured one); returns the report it writes to results.json."""
    from typing import get_args

    import dspy

    from dspy_rag.evals.research_metric import DEFAULT_WEIGHTS, describe
    from dspy_rag.models import loaded_beside
    from dspy_rag.pipelines.policy import PolicyMode
    from dspy_rag.pipelines.programs import program_for

    if out_dir is not None:  # checked now: the results are written after the whole run
        paths.folder(out_dir, "--out", "the results")
    pipelines = pipeline or ["deep"]
    if unknown := set(pipelines) - set(PIPELINES):
        raise UserError(f"unknown pipeline {sorted(unknown)}; choose {', '.join(PIPELINES)}")
    policies = policy or ["llm"]
    if unknown := set(policies) - set(get_args(PolicyMode)):
        raise UserError(f"unknown policy {sorted(unknown)}; choose {', '.join(get_args(PolicyMode))}")
    if unknown := {*(without or []), *(with_ or [])} - set(ABLATIONS):
        raise UserError(f"unknown guard or role {sorted(unknown)}; choose {', '.join(ABLATIONS)}")
    switches = [*(Switch(name) for name in without or []), *(Switch(name, on=True) for name in with_ or [])]
    for switch in switches:  # a column switched to what the configuration already says is the full program again
        if getattr(getattr(config, switch.part), switch.name) == switch.on:
            state = "on" if switch.on else "off"
            raise UserError(f"--{'with' if switch.on else 'without'} {switch.name}: the configuration already has it "
                            f"{state}; switch it the other way")
    planners = [None if p == "none" else p for p in planner_model or [config.lm.planner_model or "none"]]
    columns = columns_of(pipelines, artifact or ["none"], model or [config.lm.model], policies, switches, planners)
    trainsets = load_trainsets(questions)
    eval_sets = [load_set(trainset, config) for trainset in trainsets]
    for eval_set in eval_sets:
        eval_set.questions = eval_set.questions[:limit]
    name = SEPARATOR.join(t.name for t in trainsets)
    folder = out_dir or RESULTS / (f"eval-{name}" if take == 1 else f"eval-{name}-take-{take}")
    if take > 1:  # a repeat measures the model's own run-to-run noise: no LM cache may answer for it
        config = config.model_copy(update={"lm": config.lm.model_copy(update={"cache": False})})

    def lm_for(name: str) -> dspy.LM:
        """One LM per model, shared by its columns, the judge and a planner of the same model."""
        return loaded_beside(config.lm, name)

    def preparer(trainset: Trainset, eval_set: EvalSet) -> Prepare:
        def prepare(column: Column) -> tuple[dspy.Module, AnswerRuns]:
            settings = column_settings(config, column)
            program = program_for(column.pipeline, settings, eval_set.index, eval_set.web, column.policy,
                                  artifact=column.artifact)
            context = run_context(program, settings, trainset.name, trainset.content_hash, column.label,
                                  eval_set.web)
            return program, AnswerRuns(store, context, take)
        return prepare

    def use_lm(column: Column) -> None:
        """The column's model, loaded only when a question of it is run (not when every run is reused)."""
        dspy.configure(lm=lm_for(column.model), adapter=dspy.JSONAdapter())

    grader = Judge(judge, lm_for(judge), eval_sets[0].index.embedder) if judge else None
    with RunStore.of(config) as store:
        by_set = [run_columns(eval_set, columns, folder / "rows.jsonl", preparer(trainset, eval_set), use_lm, grader,
                              reporter) for trainset, eval_set in zip(trainsets, eval_sets, strict=True)]
    if grader:
        reporter.line(f"judge {judge}, this run: {grader.report()}")
    weights = dict(DEFAULT_WEIGHTS)
    measured = pooled(by_set)
    results = summaries(measured.rows, columns, weights)
    tallies = {c.label: asdict(measured.tally(c)) for c in columns}
    total = Tally(sum(t["run"] for t in tallies.values()), sum(t["reused"] for t in tallies.values()))
    suffix = f", take {take}" if take > 1 else ""
    title = title_of(eval_sets, describe(weights)) + suffix
    report: dict[str, Any] = {"trainset": name, "title": title, "columns": results,
                              "rows": {c.label: [asdict(r) for r in measured.rows[c]] for c in columns},
                              "runs": {"run": total.run, "reused": total.reused, "columns": tallies}}
    tables = markdown(results, title)
    if len(eval_sets) > 1:
        report["sets"] = {s.name: {"title": title_of([s], describe(weights)) + suffix,
                                   "columns": summaries(one.rows, columns, weights)}
                          for s, one in zip(eval_sets, by_set, strict=True)}
        tables += "".join("\n" + markdown(part["columns"], part["title"]) for part in report["sets"].values())
    write_json_atomic(folder / "results.json", report)
    write_atomic(folder / "report.md", (tables + f"\nRuns: {total.text()}.\n").encode("utf-8"))
    reporter.line(f"runs: {total.text()}")
    if measured.fresh():
        with mlflow_run(config, f"eval {name}", reporter.line) as tracked:
            tracked.params({"trainset": name, "trainset_hash": SEPARATOR.join(t.content_hash for t in trainsets),
                            "questions": sum(len(s.questions) for s in eval_sets), "metric": describe(weights),
                            "judge": judge, "take": take})
            tracked.metrics({f"{mlflow_key(c.label)}.{metric}": results[c.label].get(metric)
                             for c in measured.fresh() for metric in LOGGED})
    if take == 1:  # a repeat is the noise of a measurement the ledger has, not a new one
        for trainset, eval_set, one in zip(trainsets, eval_sets, by_set, strict=True):
            record(config, Measurement(trainset.name, trainset.content_hash, len(eval_set.questions)), one, columns,
                   weights)
        if len(trainsets) > 1:  # the pooled figure too, as a compile on the pooled sets measures it
            record(config, Measurement(name, pooled_hash(trainsets), sum(len(s.questions) for s in eval_sets),
                                       pooled=True), measured, columns, weights)
    return report


def pooled(by_set: Sequence[Measured]) -> Measured:
    """The sets' measurements as one: each column's rows set after set, so columns stay paired by question."""
    columns = list(by_set[0].rows)
    return Measured({c: [r for m in by_set for r in m.rows[c]] for c in columns},
                    {c: [r for m in by_set for r in m.new[c]] for c in columns},
                    set().union(*(m.judged for m in by_set)))


def summaries(rows: dict[Column, list[Row]], columns: list[Column], weights: dict[str, float]) -> dict[str, Any]:
    """Each column's summary, with its gain over the first column's on the same questions."""
    first = rows[columns[0]]
    return {c.label: summary(rows[c], weights, None if c == columns[0] else first) for c in columns}


def title_of(eval_sets: Sequence[EvalSet], metric: str) -> str:
    counts = f" ({', '.join(f'{s.name} {len(s.questions)}' for s in eval_sets)})" if len(eval_sets) > 1 else ""
    return (f"{SEPARATOR.join(s.name for s in eval_sets)} dev, {sum(len(s.questions) for s in eval_sets)} "
            f"questions{counts}, metric {metric}")


@dataclass(frozen=True)
class Measurement:
    """What a ledger line's score was measured on: a set, or several pooled (`pooled`: the runs are those of the
    sets' own lines, so the pooled line counts them as reused and costs nothing)."""

    trainset: str
    trainset_hash: str
    questions: int
    pooled: bool = False


def record(config: Config, on: Measurement, measured: Measured, columns: list[Column],
           weights: dict[str, float]) -> None:
    """One ledger line per column and set, and per column on the pooled sets. The ledger follows prompts
    across recompiles of one model, so a column that only swaps the stopping policy, switches a guard or role, or
    plans with a model of its own writes none (its line would pass for the program's own). A column whose every
    run was reused writes its line only when the ledger lacks that measurement (its runs were made by a compile's
    dev scoring or another set's eval), marked as reused. Costs are those of the runs made now. A compiled column
    measured beside the uncompiled program carries the paired interval of its gain over it."""
    from dspy_rag.evals.research_metric import describe

    def scores(column: Column) -> list[float]:
        return [weighted(r, weights) for r in measured.rows[column]]

    path = ledger_path(config)
    known = {measurement(e) for e in read(path)}
    for column in (c for c in columns if c.policy == "llm" and c.switch is None and c.planner is None):
        new, uncompiled = [] if on.pooled else measured.new[column], Column("deep", "none", column.model)
        beside = column.pipeline == "deep" and column != uncompiled and uncompiled in measured.rows
        entry = LedgerEntry(
            kind="eval", artifact=ledger_name(column, config.artifacts.path), parent=None,
            model=column.model, trainset=on.trainset, trainset_hash=on.trainset_hash, split="dev",
            metric=describe(weights), score=round(statistics.fmean(scores(column)), 4),
            score_before=round(statistics.fmean(scores(uncompiled)), 4) if beside else None,
            questions=on.questions, lm_calls=sum(r.lm_calls for r in new),
            tokens=sum(r.tokens for r in new), seconds=round(sum(r.seconds for r in new), 1),
            reused=on.questions if on.pooled else measured.tally(column).reused,
            gain_ci=gain_interval(scores(uncompiled), scores(column)) if beside else None,
            code_version=code_version())
        if new or measurement(entry) not in known:
            append(path, entry)


def measurement(entry: LedgerEntry) -> tuple[Any, ...]:
    """What a ledger line measured, less what it cost: two lines alike here are one measurement."""
    return (entry.kind, entry.artifact, entry.model, entry.trainset, entry.trainset_hash, entry.metric,
            entry.questions, entry.code_version, entry.score, entry.score_before, tuple(entry.gain_ci or ()))
