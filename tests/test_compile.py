"""`compile` end to end with a scripted LM over a real (small) index: demos are bootstrapped from runs the
metric passes, the dev split is scored before and after, the artifact and its ledger line are written, and
an interrupted compile leaves neither."""

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from conftest import CALLS_PER_RUN, REPLIES, scratch_config
from dspy_rag import artifacts, models
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.evals.research_metric import ResearchMetric, example_of, gold_evidence
from dspy_rag.evals.stats import gain_interval
from dspy_rag.ledger import read
from dspy_rag.optimizers import compile as compiling
from dspy_rag.optimizers.pool import Pool
from dspy_rag.optimizers.teleprompters import OPTIMIZERS, LabeledPerModule, LabeledSearch
from dspy_rag.pipelines.trajectory import TRAJECTORY_VERSION
from dspy_rag.trainsets.formats import Question
from dspy_rag.trainsets.registry import load_trainset


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("DSPY_RAG_CACHE", str(tmp_path / "cache"))  # what the compile caches (web snapshot indexes) stays here
    return scratch_config(tmp_path, **{"artifacts.path": tmp_path / "artifacts", "retrieval.reranker": "none"})


@pytest.fixture()
def scripted(monkeypatch: pytest.MonkeyPatch) -> list[DummyLM]:
    made: list[DummyLM] = []

    def build_lm(_config: Any) -> DummyLM:
        made.append(DummyLM(REPLIES, adapter=dspy.JSONAdapter()))
        return made[-1]

    monkeypatch.setattr(models, "build_lm", build_lm)
    return made


def run(trainset: Path, config: Config, optimizer: str, **options: Any) -> artifacts.Manifest:
    request = compiling.CompileRequest(str(trainset), optimizer, **{"name": "tiny-" + optimizer, **options})
    return compiling.compile_program(request, config)


def test_bootstrap_keeps_demos_from_passing_runs_and_records_everything(trainset: Path, settings: Config,
                                                                         scripted: list[DummyLM]) -> None:
    manifest = run(trainset, settings, "bootstrap")
    folder = settings.artifacts.path / "tiny-bootstrap"
    state = json.loads((folder / "program.json").read_text())
    # the two passing train runs (q1, q3) became demos, each predictor gets one trace per run
    answer_demos = state["synthesizer.short_answer.predict"]["demos"]
    assert [d["short_answer"] for d in answer_demos] == ["$15.01 billion"] * 2
    assert all(d.get("augmented") for d in answer_demos)  # traced, complete demos only: no raw examples
    assert {d["question"] for d in state["planner.predict"]["demos"] if d.get("augmented")} == {
        "Question 1: what was the revenue?", "Question 3: what was the revenue?"}
    assert manifest.dev_questions == 2 and set(manifest.dev_scores) == {"q5", "q6"}
    assert manifest.dev_scores["q5"][0] > manifest.dev_scores["q6"][0]  # right answer beats wrong one
    assert manifest.lm_calls == len(scripted[0].history) > 0
    learned = [json.loads(line) for line in (folder / "trajectories.jsonl").read_text().splitlines()]
    assert [t["example"] for t in learned] == ["q1", "q2", "q3"]  # two demos wanted: q4 was never needed
    assert all(t["trajectory"]["version"] == TRAJECTORY_VERSION and t["trajectory"]["steps"] for t in learned)
    entries = read(settings.artifacts.path / "ledger.jsonl")
    assert [(e.kind, e.artifact, e.optimizer, e.score, e.score_before) for e in entries] == [
        ("compile", "tiny-bootstrap", "bootstrap", manifest.dev_after, manifest.dev_before)]
    assert entries[0].trainset_hash == load_trainset(str(trainset)).content_hash
    assert artifacts.load(folder, compiled_program(settings)).name == "tiny-bootstrap"


def compiled_program(settings: Config) -> dspy.Module:
    from dspy_rag.index import Index
    from dspy_rag.pipelines.programs import build_program

    return build_program("deep", settings, Index(settings), None)


def test_labeled_few_shot_makes_no_lm_calls_to_optimize(trainset: Path, settings: Config,
                                                        scripted: list[DummyLM]) -> None:
    manifest = run(trainset, settings, "labeled")
    assert manifest.lm_calls == 4 * CALLS_PER_RUN  # two dev questions before and after
    state = json.loads((settings.artifacts.path / "tiny-labeled" / "program.json").read_text())
    # no example shows the passages of its answer, so the short answer gets no demo that would show "Not supplied"
    assert state["synthesizer.short_answer.predict"]["demos"] == []
    # only q1 is labeled with a plan, so the planner gets that one demo rather than unusable ones
    assert [d["question"] for d in state["planner.predict"]["demos"]] == ["Question 1: what was the revenue?"]
    assert [s["sub_question"] for s in state["planner.predict"]["demos"][0]["steps"]] == ["What was Data Center revenue?"]


class FirstDemo(dspy.Module):
    """Answers every question with its one predictor's first demo: a program whose score depends on its demos
    alone."""

    def __init__(self) -> None:
        super().__init__()
        self.predict = dspy.Predict("question -> short_answer")

    def forward(self, question: str) -> dspy.Prediction:
        return dspy.Prediction(short_answer=self.predict.demos[0].short_answer if self.predict.demos else "")


def test_labeled_search_keeps_the_draw_that_scores_best_on_validation() -> None:
    train = [dspy.Example(question=f"q{n}", short_answer=f"a{n}").with_inputs("question") for n in range(8)]
    demo = {seed: LabeledPerModule(1, False, seed).compile(FirstDemo(), trainset=train).predict.demos[0].short_answer
            for seed in range(4)}
    assert len(set(demo.values())) > 1  # the seeds draw different demos
    wanted = demo[2]
    val = [dspy.Example(question="v", short_answer=wanted).with_inputs("question")]
    def same(example: dspy.Example, prediction: dspy.Prediction, trace: object = None) -> float:
        return float(prediction.short_answer == example.short_answer)

    search = LabeledSearch(same, k=1, stratify=False, draws=4, validation=1)
    kept = search.compile(FirstDemo(), trainset=train, valset=val)
    assert kept.predict.demos[0].short_answer == wanted
    assert [c["seed"] for c in search.candidates] == [0, 1, 2, 3]
    assert [c["validation"] for c in search.candidates] == [float(demo[s] == wanted) for s in range(4)]
    best = next(c["seed"] for c in search.candidates if c["validation"] == 1.0)
    assert demo[best] == wanted  # the first draw that scored best, the earlier seed winning a tie
    with pytest.raises(UserError, match="validation questions"):
        search.compile(FirstDemo(), trainset=train, valset=[])


def test_labeled_search_records_each_draws_validation_score(trainset: Path, settings: Config,
                                                            scripted: list[DummyLM]) -> None:
    manifest = run(trainset, settings, "labeled-search", settings={"draws": 2})
    # the tiny set's four train questions: every 4th (q1) is kept aside to score the draws on
    kept = manifest.optimizer_settings
    assert (kept["train"], kept["val"], kept["validation"]) == (3, 1, 24)
    assert [c["seed"] for c in kept["candidates"]] == [0, 1]
    assert all(0.0 <= c["validation"] <= 1.0 for c in kept["candidates"])
    # the draws' validation runs went through the run store: compiled again, nothing is run
    calls = sum(len(lm.history) for lm in scripted)
    again = run(trainset, settings, "labeled-search", settings={"draws": 2}, name="again")
    assert again.optimizer_settings["candidates"] == kept["candidates"]
    assert sum(len(lm.history) for lm in scripted) == calls


def test_a_recompile_starts_from_its_parent(trainset: Path, settings: Config, scripted: list[DummyLM]) -> None:
    first = run(trainset, settings, "labeled")
    calls = len(scripted[0].history)  # the process's one model, loaded once for both compiles
    manifest = run(trainset, settings, "bootstrap", parent="tiny-labeled")
    assert manifest.parent == "tiny-labeled" and manifest.dev_before == first.dev_after
    # the parent's dev scores came from the cache: only bootstrapping (q1-q3) and the dev run after spent calls
    assert len(scripted) == 1 and len(scripted[0].history) - calls == (3 + 2) * CALLS_PER_RUN
    entries = read(settings.artifacts.path / "ledger.jsonl")
    assert [(e.artifact, e.parent) for e in entries] == [("tiny-labeled", None), ("tiny-bootstrap", "tiny-labeled")]


def test_an_interrupted_compile_leaves_no_artifact_and_no_ledger_line(trainset: Path, settings: Config,
                                                                      scripted: list[DummyLM],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real_score = ResearchMetric.score

    def interrupted(self: ResearchMetric, example: dspy.Example, prediction: dspy.Prediction) -> float:
        calls["n"] += 1
        if calls["n"] == 2:  # in the middle of optimizing (the dev runs are scored from their stored rows)
            raise KeyboardInterrupt
        return real_score(self, example, prediction)

    monkeypatch.setattr(ResearchMetric, "score", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(trainset, settings, "bootstrap")
    assert not settings.artifacts.path.exists() or list(settings.artifacts.path.iterdir()) == []


def test_an_existing_name_is_refused_before_any_work(trainset: Path, settings: Config,
                                                     scripted: list[DummyLM]) -> None:
    run(trainset, settings, "labeled")
    made = len(scripted)
    models._LOADED.clear()  # a model loaded for the refused compile would be built again
    with pytest.raises(UserError, match="--replace"):
        run(trainset, settings, "labeled")
    assert len(scripted) == made  # no LM was even loaded


def test_a_teacher_that_is_also_the_planner_model_loads_once(trainset: Path, settings: Config,
                                                            scripted: list[DummyLM]) -> None:
    teacher = "local/qwen2.5-coder-1.5b"
    planned = settings.model_copy(update={"lm": settings.lm.model_copy(update={"planner_model": teacher})})
    run(trainset, planned, "labeled", teacher=teacher)
    assert len(scripted) == 2  # the model, and one for the teacher and the planner


def test_unknown_optimizer_and_setting_are_one_line_errors(trainset: Path, settings: Config) -> None:
    with pytest.raises(UserError, match="choose labeled, labeled-search, bootstrap, random-search, mipro, gepa"):
        run(trainset, settings, "simba")
    with pytest.raises(UserError, match="no setting"):
        run(trainset, settings, "bootstrap", settings={"temperature": 2})


def test_dry_run_estimates_grow_with_the_optimizer(trainset: Path) -> None:
    data = Pool.load(str(trainset))
    costs = {}
    for name, optimizer in OPTIMIZERS.items():
        split = compiling.splits(data, optimizer, None, None)
        costs[name] = compiling.estimate(optimizer, optimizer.defaults, split, "local/qwen2.5-coder-0.5b")
    assert costs["labeled"].program_runs == 4  # dev before and after only
    assert costs["labeled"].program_runs < costs["bootstrap"].program_runs < costs["random-search"].program_runs
    assert costs["bootstrap"].lm_calls == costs["bootstrap"].program_runs * compiling.CALLS_PER_RUN
    assert costs["gepa"].seconds and costs["gepa"].seconds > costs["bootstrap"].seconds
    split = compiling.splits(data, OPTIMIZERS["bootstrap"], None, None)
    taught = compiling.estimate(OPTIMIZERS["bootstrap"], OPTIMIZERS["bootstrap"].defaults, split,
                                "local/qwen2.5-coder-0.5b", "local/qwen2.5-coder-1.5b")
    assert taught.program_runs == costs["bootstrap"].program_runs
    assert costs["bootstrap"].seconds and taught.seconds and taught.seconds > costs["bootstrap"].seconds
    assert compiling.estimate(OPTIMIZERS["bootstrap"], OPTIMIZERS["bootstrap"].defaults, split,
                              "local/qwen2.5-coder-0.5b", "openai/gpt-4o-mini").seconds is None


def test_the_metric_speaks_every_shape_dspy_calls_it_with() -> None:
    example = example_of(Question("q", "Who?", "TSMC and Samsung", gold_sections=("Item 1A",)))
    prediction = dspy.Prediction(answer="TSMC and Samsung make the wafers.", short_answer="TSMC and Samsung",
                                 draft="TSMC and Samsung make the wafers.", passages=[])
    metric = ResearchMetric({"f1": 1.0})
    assert metric(example, prediction) == 1.0
    assert metric(example, prediction, trace=[]) is True
    wrong = dspy.Prediction(answer="Intel.", short_answer="Intel", draft="Intel.", passages=[])
    assert metric(example, wrong, trace=[]) is False
    feedback = metric(example, wrong, None, "synthesizer.short_answer.predict", None)
    assert feedback.score == 0.0 and "TSMC and Samsung" in feedback.feedback
    with pytest.raises(ValueError, match="unknown score components"):
        ResearchMetric({"f2": 1.0})


@pytest.mark.slow
def test_musique_decompositions_become_the_planners_labeled_demos(tenk_index: Any) -> None:
    from dspy.teleprompt import LabeledFewShot

    from dspy_rag.pipelines.deep import DeepResearch
    from dspy_rag.retrieval import Retriever
    from dspy_rag.trainsets.formats import sub_question

    assert sub_question("Hello Love >> performer") == "What is the performer of Hello Love?"
    assert sub_question("Which state borders #2 to the east?") == "Which state borders the answer of step 2 to the east?"
    musique = [q for q in load_trainset("musique").questions("train") if len(q.plan) >= 2][:2]
    compiled = LabeledFewShot(k=2).compile(DeepResearch(Retriever(tenk_index, top_k=5)),
                                           trainset=[example_of(q) for q in musique])
    plans = [[s.sub_question for s in demo.steps] for demo in compiled.planner.predict.demos]
    assert sorted(plans) == sorted([s["sub_question"] for s in q.plan] for q in musique)
    prompt = dspy.JSONAdapter().format(compiled.planner.predict.signature, compiled.planner.predict.demos,
                                       {"question": "Q?", "sections": [], "web_available": False, "findings": []})
    assert musique[0].plan[1]["sub_question"] in "".join(m["content"] for m in prompt)


@pytest.mark.slow
def test_hotpotqa_supporting_paragraphs_become_the_short_answers_labeled_demos(tenk_index: Any) -> None:
    from dspy_rag.pipelines.deep import DeepResearch
    from dspy_rag.retrieval import Retriever

    hotpotqa = load_trainset("hotpotqa")
    corpus = {p.id: p for p in hotpotqa.passages}
    questions = hotpotqa.questions("train")[:3]
    for question in questions:  # the supporting paragraphs are the corpus's own, and hold their sentences
        assert question.support and all(corpus[s.passage.id] == s.passage for s in question.support)
        assert all(sentence in s.passage.text for s in question.support for sentence in s.sentences)
    compiled = LabeledPerModule(k=2).compile(DeepResearch(Retriever(tenk_index, top_k=5)),
                                             trainset=[example_of(q) for q in questions])
    assert compiled.planner.predict.demos == []  # HotpotQA labels no plan
    demos = compiled.synthesizer.short_answer.predict.demos
    assert len(demos) == 2 and {d.short_answer for d in demos} <= {q.answer for q in questions}
    by_question = {q.question: q for q in questions}
    for demo in demos:  # the demo shows the supporting paragraphs as the index does, numbered
        evidence = gold_evidence(by_question[demo.question].support)
        assert len(demo.passages) == len(evidence) and demo.passages[0].startswith("[1] ")
        assert all(p.text in shown for p, shown in zip(evidence, demo.passages, strict=True))
    assert example_of(Question("q", "Who?", "A")).get("passages") is None  # no support: no short-answer demo


def test_ask_runs_an_artifact_under_another_model_and_says_so(trainset: Path, settings: Config,
                                                              scripted: list[DummyLM], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from dspy_rag.cli import app

    run(trainset, settings, "labeled")
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM(REPLIES, adapter=dspy.JSONAdapter()))
    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {settings.artifacts.path}}}\n"
                                            "retrieval: {reranker: none}\n")
    index = load_trainset(str(trainset)).index(settings).config.index.path
    result = CliRunner().invoke(app, ["ask", "--json", "--index", str(index), "--model", "local/qwen2.5-coder-1.5b",
                                      "--artifact", "tiny-labeled", "What was Data Center revenue?"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["artifact"] == "tiny-labeled" and answer["short_answer"] == "$15.01 billion"
    shown = CliRunner().invoke(app, ["ask", "--index", str(index), "--model", "local/qwen2.5-coder-1.5b",
                                     "--artifact", "tiny-labeled", "What was Data Center revenue?"])
    assert "artifact tiny-labeled (labeled on tiny, compiled for local/qwen2.5-coder-0.5b" in shown.stderr
    assert "Answer: $15.01 billion" in shown.stdout
    uncompiled = CliRunner().invoke(app, ["ask", "--json", "--index", str(index), "--artifact", "none", "Revenue?"])
    assert json.loads(uncompiled.stdout)["artifact"] is None


def test_compile_json_prints_the_saved_manifest_alone_on_stdout(trainset: Path, settings: Config,
                                                                 scripted: list[DummyLM], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dspy_rag.cli import app

    (tmp_path / "dspy-rag.yaml").write_text(f"artifacts: {{path: {settings.artifacts.path}}}\n"
                                            "retrieval: {reranker: none}\n")
    result = CliRunner().invoke(app, ["compile", "--trainset", str(trainset), "--optimizer", "labeled",
                                      "--name", "tiny-json", "--config", str(tmp_path / "dspy-rag.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    folder = settings.artifacts.path / "tiny-json"
    saved = json.loads((folder / artifacts.MANIFEST_FILE).read_text())
    assert json.loads(result.stdout) == {"folder": str(folder), **saved}  # the whole of stdout is one document
    assert "dev (2 questions)" in result.stderr  # progress goes to stderr


def test_the_gain_is_called_a_gain_only_outside_noise() -> None:
    def text(before: list[float], after: list[float]) -> str:
        return compiling.gain_text(sum(after) / len(after) - sum(before) / len(before), gain_interval(before, after))

    assert "too few dev questions" in text([0.2, 0.3], [0.9, 1.0])
    assert text([0.2] * 10, [0.9] * 10) == "+0.700 (95% CI +0.700 … +0.700: a gain)"
    assert text([0.0, 1.0] * 5, [1.0, 0.0] * 5).endswith("inside noise)")


# What MIPROv2's proposer and GEPA's reflection model write, keyed like REPLIES by an output field of their prompts.
PROPOSER_REPLIES = {
    "`proposed_instruction`": {"proposed_instruction": "Answer with the exact figure the 10-K states."},
    "`observations`": {"observations": "Questions about NVIDIA's fiscal 2023 figures."},
    "`summary`": {"summary": "Questions about NVIDIA's fiscal 2023 figures."},
}


@pytest.mark.parametrize("pooled", [False, True], ids=["one set", "two sets"])
@pytest.mark.parametrize(("optimizer", "options"), [
    ("random-search", {"candidates": 1}),
    ("mipro", {"candidates": 2, "trials": 2, "minibatch": 1}),
    ("gepa", {"max_metric_calls": 6, "minibatch": 1}),
])
def test_the_searching_optimizers_compile_end_to_end(trainset: Path, other: Path, settings: Config, optimizer: str,
                                                     options: dict[str, int], pooled: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "build_lm", lambda _config: DummyLM({**PROPOSER_REPLIES, **REPLIES},
                                                                       adapter=dspy.JSONAdapter()))
    manifest = run(Path(f"{trainset},{other}") if pooled else trainset, settings, optimizer, settings=options)
    assert manifest.optimizer == optimizer and manifest.optimizer_settings["train"] > 0
    assert manifest.dev_before is not None and manifest.dev_after is not None
    assert manifest.trainset == ("tiny+other" if pooled else "tiny")
    assert artifacts.load(settings.artifacts.path / f"tiny-{optimizer}", compiled_program(settings)).name == manifest.name
