"""`dspy-rag distill-policy`: learn when to stop researching, as a logistic regression that replaces the
policy LM call.

    dspy-rag distill-policy --trainset nvidia-10k --artifact tenk-bootstrap
    dspy-rag distill-policy --trainset hotpotqa --trainset musique --decisions 150

The artifact's program researches train questions to the end of their plans (several sets' in turn, each on its
own set's index and web, until `--decisions` decision points are traced, or all of them); each decision point gets
its features, the policy LM's own decision and a label (`policy_labels`). A standardised, class-balanced
logistic regression is cross-validated by question; the decision threshold is the one whose out-of-fold
stops earn the most reward (score minus a cost per step) over the traced questions. The final model,
fit on every decision point, is written into the artifact as `policy.json`.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Sequence
from itertools import zip_longest
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.reporter import QUIET, Reporter
from dspy_rag.run_store import RunContext, RunStore, Tally, run_context

if TYPE_CHECKING:  # dspy and scikit-learn cost a second to import, and every CLI command loads this module
    import dspy
    from sklearn.pipeline import Pipeline

    from dspy_rag.evals.research_metric import ResearchMetric
    from dspy_rag.optimizers.policy_labels import Decision, TracedQuestion
    from dspy_rag.pipelines.deep import DeepResearch
    from dspy_rag.pipelines.learned_policy import LearnedPolicy
    from dspy_rag.pipelines.policy_features import Embed

DEFAULT_STEP_COST = 0.02  # a step must raise the score by 2 points (of 100) to be worth its ~5 LM calls
MAX_FOLDS = 5
T = TypeVar("T")
TRACE = "trace"  # the kind of run in the run store: a question researched to the end of its plan, taken apart


@dataclass
class DistillRequest:
    trainset: str | list[str]  # one name or path, or several whose train questions are traced in turn
    artifact: str | None = None
    step_cost: float = DEFAULT_STEP_COST
    train_limit: int | None = None  # per set
    decisions: int | None = None  # stop tracing once this many decision points are traced


@dataclass
class Dataset:
    """The decision points of the traced questions: features, labels (1 = FINISH), the LM's decisions, question."""

    decisions: list[Decision]
    x: np.ndarray
    finish: np.ndarray
    lm_finish: np.ndarray
    groups: np.ndarray


def dataset(traces: list[TracedQuestion], cost: float) -> Dataset:
    from dspy_rag.pipelines.policy_features import vector

    decisions = [d for t in traces for d in t.decisions]
    return Dataset(decisions, np.array([vector(d.features) for d in decisions]),
                   np.array([label for t in traces for label in t.labels(cost)], dtype=int),
                   np.array([d.lm_decision == "FINISH" for d in decisions], dtype=int),
                   np.array([n for n, t in enumerate(traces) for _ in t.decisions]))


def fit_classifier(x: np.ndarray, finish: np.ndarray) -> Pipeline:
    """Standardised features, a logistic regression whose classes weigh alike however rare FINISH is."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    model = Pipeline([("scale", StandardScaler()),
                      ("classify", LogisticRegression(class_weight="balanced", max_iter=1000))])
    return model.fit(x, finish)


def policy_of(model: Pipeline, threshold: float, summary: dict[str, Any]) -> LearnedPolicy:
    """The fitted model as the JSON policy the program runs."""
    from dspy_rag.pipelines.learned_policy import LearnedPolicy
    from dspy_rag.pipelines.policy_features import FEATURES

    scaler, classifier = model.named_steps["scale"], model.named_steps["classify"]
    return LearnedPolicy(list(FEATURES), scaler.mean_.tolist(), scaler.scale_.tolist(), classifier.coef_[0].tolist(),
                         float(classifier.intercept_[0]), threshold, summary)


def questions_per_label(data: Dataset) -> int:
    """How many questions the rarer label occurs in."""
    return min(len(set(data.groups[data.finish == label])) for label in (0, 1))


def out_of_fold(data: Dataset) -> tuple[np.ndarray, int]:
    """Each decision point's p(FINISH) from a model fit without its question, and the number of folds."""
    from sklearn.model_selection import StratifiedGroupKFold

    folds = min(MAX_FOLDS, questions_per_label(data))
    probabilities = np.zeros(len(data.finish))
    for train, test in StratifiedGroupKFold(n_splits=folds).split(data.x, data.finish, data.groups):
        if len(set(data.finish[train])) < 2:
            raise UserError(f"a cross-validation fold holds only one label; use more train questions ({folds} "
                            "questions carry the rarer label)")
        probabilities[test] = fit_classifier(data.x[train], data.finish[train]).predict_proba(data.x[test])[:, 1]
    return probabilities, folds


def per_question(traces: list[TracedQuestion], flat: Sequence[Any]) -> list[list[Any]]:
    """Values of the flat decision-point order, grouped by question."""
    grouped, start = [], 0
    for trace in traces:
        grouped.append(list(flat[start:start + len(trace.decisions)]))
        start += len(trace.decisions)
    return grouped


def simulate(scores: list[float], stops: list[bool], cost: float) -> tuple[float, int, float]:
    """Reward, steps and score of a policy that stops at its first yes (else after the last step)."""
    stop = next((i for i, yes in enumerate(stops) if yes), len(scores) - 1)
    return scores[stop] - cost * (stop + 1), stop + 1, scores[stop]


def outcome(traces: list[TracedQuestion], stops: list[list[bool]], cost: float) -> dict[str, float]:
    """Mean reward, steps and score over the questions."""
    runs = [simulate(t.scores, s, cost) for t, s in zip(traces, stops, strict=True)]
    return {name: round(statistics.fmean(r[n] for r in runs), 4) for n, name in enumerate(("reward", "steps", "score"))}


def choose_threshold(traces: list[TracedQuestion], probabilities: np.ndarray, cost: float) -> float:
    """The threshold whose stops earn the most mean reward; of equals, the highest (it stops only when surer)."""
    grouped = per_question(traces, probabilities.tolist())
    candidates = sorted(set(probabilities.tolist()) | {1.0}, reverse=True)
    return max(candidates, key=lambda t: outcome(traces, [[p >= t for p in ps] for ps in grouped], cost)["reward"])


def fit_policy(traces: list[TracedQuestion], cost: float, context: dict[str, Any]) -> LearnedPolicy:
    """Cross-validate, choose the threshold, fit on everything; the summary says how well and on what."""
    learned_from = [t for t in traces if t.decisions]
    if not learned_from:
        raise UserError("no decision point to learn from: every traced run finished its plan after one step; "
                        "distill from an artifact whose planner makes multi-step plans (compile one first)")
    data = dataset(learned_from, cost)
    if questions_per_label(data) < 2:
        counts = Counter("FINISH" if f else "CONTINUE" for f in data.finish)
        raise UserError(f"the labels need both FINISH and CONTINUE in at least two questions each to cross-validate "
                        f"(FINISH {counts['FINISH']}, CONTINUE {counts['CONTINUE']} decision points); use more "
                        "train questions or another trainset")
    probabilities, folds = out_of_fold(data)
    threshold = choose_threshold(learned_from, probabilities, cost)
    predicted = (probabilities >= threshold).astype(int)
    stops = {"learned": per_question(learned_from, predicted.astype(bool).tolist()),
             # REVISE replays as going on: the re-planned run it asked for was not traced.
             "llm": per_question(learned_from, data.lm_finish.astype(bool).tolist()),
             "plan": [[False] * len(t.decisions) for t in learned_from],
             "oracle": [t.labels(cost) for t in learned_from]}  # the labels' own stops: the best a stop rule can do
    summary = {
        **context, "step_cost": cost, "questions": len(traces), "questions_with_decisions": len(learned_from),
        "decision_points": len(data.finish), "labels": {"FINISH": int(data.finish.sum()),
                                                        "CONTINUE": int(len(data.finish) - data.finish.sum())},
        "lm_decisions": dict(Counter(d.lm_decision for d in data.decisions)), "folds": folds,
        "cv_accuracy": round(float(np.mean(predicted == data.finish)), 4),
        "lm_agreement": round(float(np.mean(predicted == data.lm_finish)), 4),
        "lm_label_accuracy": round(float(np.mean(data.lm_finish == data.finish)), 4),
        "replayed": {name: outcome(learned_from, s, cost) for name, s in stops.items()},
    }
    return policy_of(fit_classifier(data.x, data.finish), threshold, summary)


def report(policy: LearnedPolicy) -> str:
    s = policy.summary
    policies = "; ".join(f"{name} {r['steps']:.2f} steps, score {r['score']:.3f}, reward {r['reward']:.3f}"
                         for name, r in s["replayed"].items())
    target = s.get("decision_target")
    short = f" (short of the {target} asked for: the train questions ran out)" if target and s["decision_points"] < target else ""
    sets = s.get("per_set") or {}
    by_set = (" [" + ", ".join(f"{name} {n['decision_points']} of {n['questions']} questions" for name, n in sets.items())
              + "]") if len(sets) > 1 else ""
    return (f"{s['decision_points']} decision points{short} from {s['questions_with_decisions']} of {s['questions']} "
            f"questions{by_set} (FINISH {s['labels']['FINISH']}, CONTINUE {s['labels']['CONTINUE']}); {s['folds']}-fold "
            f"accuracy {s['cv_accuracy']:.2f} against the labels, agreement with the LM policy "
            f"{s['lm_agreement']:.2f} (the LM policy's own accuracy {s['lm_label_accuracy']:.2f}); threshold "
            f"{policy.threshold:.3f}; the traced runs replayed per policy (learned: out of fold), per question: "
            f"{policies}")


def stored_trace(store: RunStore, context: RunContext, program: DeepResearch, example: dspy.Example,
                 metric: ResearchMetric, embed: Embed, tally: Tally) -> TracedQuestion:
    """The question traced to the end of its plan, from the run store when the same trace was made before (its
    decision points are scored with the metric, so the metric is keyed too)."""
    from dspy_rag.optimizers.policy_labels import Decision, TracedQuestion, trace_question

    key = context.key(TRACE, example.question, [metric.name, example.short_answer, example.aliases,
                                                 example.gold_passages, example.gold_sections])
    if (found := store.get(key)) is not None:
        tally.reused += 1
        return TracedQuestion(example.id, [Decision(**d) for d in found["decisions"]], found["final_score"])
    traced = trace_question(program, example, metric, embed)
    store.put(key, context, TRACE, example.id, asdict(traced))
    tally.run += 1
    return traced


def in_turn(groups: list[list[T]]) -> list[T]:
    """The groups' items taken one from each in turn (a, b, a, b, a ...), so a cut-off keeps every group."""
    return [item for row in zip_longest(*groups) for item in row if item is not None]


def distill_policy(request: DistillRequest, config: Config, reporter: Reporter = QUIET) -> LearnedPolicy:
    """Trace, label, fit and save; returns the policy written into the artifact."""
    import dspy

    from dspy_rag import artifacts
    from dspy_rag.evals.research_metric import ResearchMetric
    from dspy_rag.models import build_lm, usage_since
    from dspy_rag.optimizers.pool import Pool
    from dspy_rag.pipelines.policy_features import embed_texts
    from dspy_rag.pipelines.programs import build_program

    folder = artifacts.chosen(request.artifact or config.artifacts.default, config.artifacts.path, config.lm.model)
    if folder is None:
        raise UserError("distill-policy saves the policy into an artifact and runs its prompts; pass --artifact NAME "
                        "(compile one with `dspy-rag compile`)")
    pool = Pool.load(request.trainset)
    examples = in_turn([[e for e in pool.examples("train", request.train_limit)
                         if e.trainset == member.name] for member in pool.sets])
    started = time.perf_counter()
    programs, contexts = {}, {}
    for member in pool.sets:
        web = member.web(config)
        programs[member.name] = build_program("deep", config, member.index(config), web, "plan")
        manifest = artifacts.load(folder, programs[member.name])
        contexts[member.name] = run_context(programs[member.name], config, member.name, member.content_hash,
                                            f"deep+{manifest.name}/plan (traced)", web)
    metric = ResearchMetric(manifest.weights)  # the artifact's own: the policy serves what its prompts were tuned for
    target = f", until {request.decisions} decision points" if request.decisions else ""
    reporter.say(f"loading {config.lm.model}; {len(examples)} train questions of {pool.name}{target}, prompts of "
                 f"{manifest.name}, metric {metric.name}")
    lm = build_lm(config.lm)
    dspy.configure(lm=lm, adapter=dspy.JSONAdapter())
    start, traces, traced_sets = len(lm.history), [], []
    tally = Tally()
    with RunStore.of(config) as store, reporter.bars() as bars:
        bars.start("train questions, researched to the end of their plans", len(examples))
        for example in examples:
            if request.decisions and sum(len(t.decisions) for t in traces) >= request.decisions:
                break
            traces.append(stored_trace(store, contexts[example.trainset], programs[example.trainset], example,
                                       metric, embed_texts, tally))
            traced_sets.append(example.trainset)
            bars.advance(f"{example.id}: {len(traces[-1].decisions)} decision point(s), scores "
                         + ", ".join(f"{s:.2f}" for s in traces[-1].scores))
    usage = usage_since(lm, start)
    per_set = {member.name: {"questions": traced_sets.count(member.name),
                             "decision_points": sum(len(t.decisions) for t, name in zip(traces, traced_sets,
                                                                                     strict=True) if name == member.name)}
               for member in pool.sets}
    policy = fit_policy(traces, request.step_cost, {
        "trainset": pool.name, "trainset_hash": pool.content_hash, "trainsets": pool.record(), "per_set": per_set,
        "decision_target": request.decisions, "artifact": manifest.name,
        "model": config.lm.model, "metric": metric.name, "lm_calls": usage["lm_calls"], "reused": tally.reused,
        "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        "seconds": round(time.perf_counter() - started, 1), "created": datetime.now(UTC).isoformat(timespec="seconds")})
    reporter.say(f"{report(policy)}; traced runs: {tally.text()}; saved {policy.save(folder)}")
    return policy
