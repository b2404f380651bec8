"""The commands that use the assistant: read documents into the index, ask it a question."""

import threading
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from dspy_rag import paths
from dspy_rag.api import Research, Say, clean_question
from dspy_rag.cli.console import AnswerDraft, StageBar, bar_display, err, out, progress, styled
from dspy_rag.cli.options import (
    ArtifactOption,
    ConfigOption,
    IndexOption,
    JsonOption,
    ModelOption,
    Policy,
    config_of,
    print_json,
)
from dspy_rag.errors import UserError
from dspy_rag.reporter import QUIET


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
    store = Index(config_of(config, **{"index.path": index}))
    with bar_display(transient=True, disable=as_json) as bar:
        report = store.ingest(inputs or [], StageBar(bar), repair=repair)
    sources = store.sources  # read once: the catalog holds every source, a folder may add thousands
    summary = store.summary(report, sources)
    if as_json:
        print_json(summary)
    else:
        if report.repaired:
            out.print(f"repaired {report.repaired} chunks whose vectors were lost")
        for source in report.added + report.replaced:
            sections = sources[source]["sections"]
            verb = "added" if source in report.added else "replaced"
            out.print(f"{verb} {source}: {sources[source]['chunks']} chunks in {len(sections)} sections")
            for section in sections:
                out.print(f"  {section}")
        for source in report.unchanged:
            out.print(f"unchanged {source}")
        if report.skipped:
            out.print(f"skipped {len(report.skipped)} files of unsupported types")
        for item, reason in report.failed.items():
            err.print(f"failed {item}: {reason}")
        out.print(f"index {store.root}: {summary['chunks_total']} chunks, {report.seconds:.1f} s")
        if "collection" in summary:  # what another machine sets to read this index from the server
            out.print(f"shared on {store.config.index.chroma_url} as index.collection: {summary['collection']}")
    if report.failed:
        raise typer.Exit(1)


class Interruptible:
    """A research's progress lines, which stop it at its next step once Ctrl-C was pressed: a research that streams
    its answer runs in a worker thread, which Ctrl-C does not reach."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.stopped = threading.Event()

    def __call__(self, *heard: str | None) -> None:
        if self.stopped.is_set():
            raise KeyboardInterrupt
        self.say(*heard)


def ask(
    question: Annotated[str, typer.Argument(help="the question to research")],
    pipeline: Annotated[Literal["deep", "baseline"], typer.Option(help="which program answers")] = "deep",
    policy: Annotated[Policy, typer.Option(help="deep: who decides to go on or stop and how each step searches "
                                           "(learned: the artifact's distilled classifiers, no LM call; auto: "
                                           "learned where the artifact has them, else llm)")] = "auto",
    config: ConfigOption = None,
    index: IndexOption = None,
    model: ModelOption = None,
    planner_model: Annotated[str | None, typer.Option(help="deep: a model of its own for the planner, e.g. "
                                                      "local/qwen2.5-coder-1.5b; none: the model plans (default "
                                                      "lm.planner_model)")] = None,
    web: Annotated[str | None, typer.Option("--web", help="tavily, off, or PATH of a snapshot (.jsonl or folder)")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="deep: save the trajectory as JSON here")] = None,
    artifact: ArtifactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Research a question over the index (and the web, when on) and print a cited answer."""
    from dspy_rag.citations import source_name
    from dspy_rag.files import write_json_atomic

    started = time.perf_counter()
    text = clean_question(question)
    if trace is not None and pipeline == "baseline":
        raise UserError("--trace saves the deep program's trajectory; the baseline has none (drop one of the two)")
    if trace is not None:  # checked now: the trajectory is written after the research
        paths.output_file(trace, "--trace")
    settings = config_of(config, **{"index.path": index, "lm.model": model,
                                    "lm.planner_model": "" if planner_model == "none" else planner_model})
    say = Interruptible(QUIET.say if as_json else progress)
    research = Research.open(settings, pipeline, policy, artifact, web, on_event=say)
    also = f" and web search ({research.web.name})" if research.web else ""
    say(f"{pipeline} research over {research.index.chunk_count} chunks{also}, "
        f"reranked by {research.reranker}")
    drafting = out.is_terminal and not as_json  # a pipe or --json gets the finished output alone
    try:
        with AnswerDraft() as draft:
            answer = research.run(text, started, on_token=draft.hear if drafting else None)
    except KeyboardInterrupt:
        say.stopped.set()
        raise
    result, trajectory, usage = answer.result, answer.trajectory, answer.usage
    if trace is not None and trajectory is not None:
        try:
            write_json_atomic(trace, trajectory)
        except OSError as exc:
            raise UserError(f"cannot write the trajectory to {trace}: {exc.strerror}; pick a writable path") from exc
    if answer.web_error and pipeline == "baseline":
        say(f"web search failed: {answer.web_error}; answered from the documents")
    if pipeline == "baseline":  # the deep program streams its firings as they happen
        for fired in answer.guards:
            say(f"{fired['guard']}: {fired['changed']} ({fired['why']}); saw {fired['saw']}", "guard")
    if as_json:
        print_json(answer.to_json())
        return
    out.print()
    if result.short_answer:
        out.print(styled(("Answer:", "bold"), f" {result.short_answer}\n"))
    out.print(result.answer)
    for flag in getattr(result, "flagged", []):
        out.print(styled(("unsupported:", "yellow"), f" {flag['sentence']} ({flag['reason']})"))
    if result.single_source:
        out.print(styled(("single source:", "yellow"), f" only {source_name(result.single_source['source'])} "
                         f"states {result.single_source['claim']}"))
    if result.citations:
        out.print(styled("\n", ("Sources", "bold")))
        for citation in result.citations:
            out.print(f"  [{citation.label}] {source_name(citation.source)} · {citation.chunk_id}")
    stopped = f" · stopped early: {trajectory['stopped_early']}" if trajectory and trajectory["stopped_early"] else ""
    planning = settings.lm.separate_planner
    planner = f" (planner {planning})" if pipeline == "deep" and planning else ""
    out.print(styled(("\n" + f"{pipeline} · {settings.lm.model}{planner} · {usage['lm_calls']} LM call(s) · "
                      f"{usage['prompt_tokens'] + usage['completion_tokens']} tokens · {answer.seconds:.1f} s{stopped}",
                      "dim")))
