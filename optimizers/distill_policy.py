"""`dspy-rag distill-policy`: learn when to stop researching and when to re-plan, as logistic regressions that
replace the policy LM call.

    dspy-rag distill-policy --trainset nvidia-10k --artifact tenk-bootstrap
    dspy-rag distill-policy --trainset hotpotqa --trainset musique --decisions 150

The artifact's program researches train questions to the end of their plans (several sets' in turn, each on its
own set's index and web, until `--decisions` decision points are traced, or all of them), and with `revise` once
more re-planning at the plan's end; each decision point gets its features, the policy LM's own decision and a
label (`policy_labels`). Per decision (FINISH while the plan has steps left, REVISE at its end) a standardised,
class-balanced logistic regression is cross-validated by question; its threshold is the one whose out-of-fold
decisions earn the most reward (score minus a cost per step) over the traced questions. A decision whose labels
are too few to cross-validate, or whose held-out decisions (model and threshold chosen without the question)
earn no more reward than never taking it, is not learned (the policy follows the plan there, and finishes at
its end). The search strategy is
learned from every traced documents step searched every way: per strategy a ridge regression of the evidence
recall its passages give, over the query's features, cross-validated by question against the supervisor LM's
choices. The final models, fit on every decision point and step, are written into the artifact as `policy.json`.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

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
    from dspy_rag.pipelines.learned_policy import Classifier, LearnedPolicy
    from dspy_rag.pipelines.policy_features import Embed
    from dspy_rag.pipelines.strategy_chooser import StrategyChooser

DEFAULT_STEP_COST = 0.02  # a step must raise the score by 2 points (of 100) to be worth its ~5 LM calls
MAX_FOLDS = 5
MIN_STRATEGY_QUESTIONS = 4  # traced questions with searched steps needed to cross-validate the strategy chooser
# Strong shrinkage: the chooser departs from the best strategy on the mean only where a query feature tells the
# strategies apart clearly, as a few hundred traced steps allow.
STRATEGY_RIDGE = 10.0
TIE_ORDER = ("hybrid", "vector", "keyword")  # strategies of equal mean recall: the supervisor's own fallback first
TRACE = "trace"  # the kind of run in the run store: a question researched to the end of its plan, taken apart


@dataclass
class DistillRequest:
    trainset: str | list[str]  # one name or path, or several whose train questions are traced in turn
    artifact: str | None = None
    step_cost: float = DEFAULT_STEP_COST
    train_limit: int | None = None  # per set
    decisions: int | None = None  # stop tracing once this many decision points are traced
    revise: bool = True  # also run each question re-planned once at its plan's end, to learn REVISE


@dataclass
class Dataset:
    """The labelled decision points of one decision (FINISH while the plan has steps left, REVISE at its end):
    features, labels (1: take the decision), whether the policy LM took it, the question each belongs to."""

    yes: str
    no: str
    x: np.ndarray
    label: np.ndarray
    lm: np.ndarray
    groups: np.ndarray
    lm_decisions: dict[str, int]


def finish_data(traces: list[TracedQuestion], cost: float) -> Dataset:
    from dspy_rag.pipelines.policy_features import FEATURES, vector

    decisions = [d for t in traces for d in t.decisions]
    return Dataset("FINISH", "CONTINUE", np.array([vector(d.features) for d in decisions]).reshape(-1, len(FEATURES)),
                   np.array([label for t in traces for label in t.labels(cost)], dtype=int),
                   np.array([d.lm_decision == "FINISH" for d in decisions], dtype=int),
                   np.array([n for n, t in enumerate(traces) for _ in t.decisions], dtype=int),
                   dict(Counter(d.lm_decision for d in decisions)))


def revise_data(traces: list[TracedQuestion], cost: float) -> Dataset:
    from dspy_rag.pipelines.policy_features import FEATURES, vector

    ends = [(n, t.revision, t.revise_label(cost)) for n, t in enumerate(traces) if t.revision is not None]
    return Dataset("REVISE", "FINISH", np.array([vector(r.features) for _, r, _ in ends]).reshape(-1, len(FEATURES)),
                   np.array([label for _, _, label in ends], dtype=int),
                   np.array([r.lm_decision == "REVISE" for _, r, _ in ends], dtype=int),
                   np.array([n for n, _, _ in ends], dtype=int), dict(Counter(r.lm_decision for _, r, _ in ends)))


def fit_classifier(x: np.ndarray, label: np.ndarray) -> Pipeline:
    """Standardised features, a logistic regression whose classes weigh alike however rare one is."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    model = Pipeline([("scale", StandardScaler()),
                      ("classify", LogisticRegression(class_weight="balanced", max_iter=1000))])
    return model.fit(x, label)


def classifier_of(model: Pipeline, threshold: float) -> Classifier:
    """The fitted model as the JSON classifier the program runs."""
    from dspy_rag.pipelines.learned_policy import Classifier

    scaler, classify = model.named_steps["scale"], model.named_steps["classify"]
    return Classifier(scaler.mean_.tolist(), scaler.scale_.tolist(), classify.coef_[0].tolist(),
                      float(classify.intercept_[0]), threshold)


def questions_per_label(data: Dataset) -> int:
    """How many questions the rarer label occurs in."""
    return min(len(set(data.groups[data.label == label].tolist())) for label in (0, 1))


def folds_of(data: Dataset) -> list[tuple[np.ndarray, np.ndarray]]:
    """Train and test rows of each cross-validation fold, by question, each label in every fold's train rows."""
    from sklearn.model_selection import StratifiedGroupKFold

    folds = min(MAX_FOLDS, questions_per_label(data))
    splits = list(StratifiedGroupKFold(n_splits=folds).split(data.x, data.label, data.groups))
    if any(len(set(data.label[train].tolist())) < 2 for train, _ in splits):
        raise UserError(f"a cross-validation fold holds only one label; use more train questions ({folds} "
                        "questions carry the rarer label)")
    return splits


def out_of_fold(data: Dataset) -> np.ndarray:
    """Each decision point's probability of the decision from a model fit without its question."""
    probabilities = np.zeros(len(data.label))
    for train, test in folds_of(data):
        probabilities[test] = fit_classifier(data.x[train], data.label[train]).predict_proba(data.x[test])[:, 1]
    return probabilities


def threshold_within(data: Dataset, rows: np.ndarray, reward: Callable[[list[bool]], float]) -> float:
    """The threshold `choose_threshold` picks from the out-of-fold probabilities of `rows` alone, the other points
    left undecided (the same for every threshold); never deciding (inf) where `rows` are too few to cross-validate."""
    inner = replace(data, x=data.x[rows], label=data.label[rows], lm=data.lm[rows], groups=data.groups[rows])
    if questions_per_label(inner) < 2:
        return np.inf
    try:
        probabilities = out_of_fold(inner)
    except UserError:
        return np.inf

    def spread(yes: list[bool]) -> float:
        decided = [False] * len(data.label)
        for row, decided_here in zip(rows.tolist(), yes, strict=True):
            decided[row] = decided_here
        return reward(decided)

    return choose_threshold(probabilities, spread)


def held_out_decisions(data: Dataset, reward: Callable[[list[bool]], float]) -> np.ndarray:
    """Each decision point decided by a model and a threshold both chosen without its question. Its reward is an
    honest estimate of the policy's, which the threshold chosen on all out-of-fold probabilities is not."""
    decided = np.zeros(len(data.label), dtype=bool)
    for train, test in folds_of(data):
        model = fit_classifier(data.x[train], data.label[train])
        decided[test] = model.predict_proba(data.x[test])[:, 1] >= threshold_within(data, train, reward)
    return decided


def per_question(traces: list[TracedQuestion], flat: Sequence[Any]) -> list[list[Any]]:
    """Values of the flat decision-point order, grouped by question."""
    grouped, start = [], 0
    for trace in traces:
        grouped.append(list(flat[start:start + len(trace.decisions)]))
        start += len(trace.decisions)
    return grouped


@dataclass
class Choices:
    """A policy's decisions on the traced questions: where it stops (per question, per decision point) and
    whether it re-plans at the plan's end (per question)."""

    stops: list[list[bool]]
    revises: list[bool]


def simulate(trace: TracedQuestion, stops: list[bool], revise: bool, cost: float) -> tuple[float, int, float]:
    """Reward, steps and score of a policy that stops at its first yes, else re-plans at the plan's end when it
    says so and the re-planned run was traced, else answers after the last step."""
    stop = next((i for i, yes in enumerate(stops) if yes), len(trace.scores) - 1)
    score, steps = trace.scores[stop], stop + 1
    if stop == len(trace.scores) - 1 and revise and trace.revision is not None:
        score, steps = trace.revision.score, steps + trace.revision.added_steps
    return score - cost * steps, steps, score


def outcome(traces: list[TracedQuestion], choices: Choices, cost: float) -> dict[str, float]:
    """Mean reward, steps and score over the questions."""
    runs = [simulate(t, s, r, cost) for t, s, r in zip(traces, choices.stops, choices.revises, strict=True)]
    return {name: round(statistics.fmean(r[n] for r in runs), 4) for n, name in enumerate(("reward", "steps", "score"))}


def choose_threshold(probabilities: np.ndarray, reward: Callable[[list[bool]], float]) -> float:
    """The threshold whose decisions earn the most mean reward; of equals, the highest (it decides only when
    surer)."""
    candidates = sorted(set(probabilities.tolist()) | {1.0}, reverse=True)
    return max(candidates, key=lambda t: reward([p >= t for p in probabilities.tolist()]))


def fit_chooser(x: np.ndarray, recall: dict[str, np.ndarray]) -> StrategyChooser:
    """Per strategy a ridge regression of its recall over the standardised features; strategies ordered by mean
    recall, best first, so a tie goes to the better one on the mean."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    from dspy_rag.pipelines.strategy_chooser import QUERY_FEATURES, StrategyChooser

    order = sorted(recall, key=lambda name: (-float(recall[name].mean()), TIE_ORDER.index(name)))
    scaler = StandardScaler().fit(x)  # as the stop classifiers standardise: a constant feature gets scale 1
    means, scales, standard = scaler.mean_, scaler.scale_, scaler.transform(x)
    models = [Ridge(alpha=STRATEGY_RIDGE).fit(standard, recall[name]) for name in order]
    return StrategyChooser(order, list(QUERY_FEATURES), means.tolist(), scales.tolist(),
                           [m.coef_.tolist() for m in models], [float(m.intercept_) for m in models])


def cross_validated_chooser(traces: list[TracedQuestion]) -> tuple[StrategyChooser | None, dict[str, Any]]:
    """The search strategy chooser from every traced step searched every way, and its summary: mean recall per
    strategy, the supervisor LM's choices', the chooser's out of fold, and the best per step's (oracle). None
    (and why) where too few questions were searched, or where out of fold it finds less than the LM's choices."""
    from sklearn.model_selection import GroupKFold

    from dspy_rag.pipelines.strategy_chooser import STRATEGIES, query_features

    searched = [(n, s) for n, t in enumerate(traces) for s in t.searches]
    questions = len({n for n, _ in searched})
    summary: dict[str, Any] = {"steps": len(searched), "questions": questions}
    if questions < MIN_STRATEGY_QUESTIONS:
        return None, summary | {"why": f"{questions} traced question(s) have a documents step and gold evidence; "
                                       f"it takes {MIN_STRATEGY_QUESTIONS} to cross-validate"}
    x = np.array([query_features(s.query, s.section) for _, s in searched])
    recall = {name: np.array([s.recall[name] for _, s in searched]) for name in STRATEGIES}
    groups = np.array([n for n, _ in searched])
    folds = min(MAX_FOLDS, questions)
    chosen: list[str] = [""] * len(searched)
    for train, test in GroupKFold(n_splits=folds).split(x, groups=groups):
        chooser = fit_chooser(x[train], {name: r[train] for name, r in recall.items()})
        for i in test:
            chosen[i] = chooser.best(x[i].tolist())

    def mean_recall(picks: Sequence[str]) -> float:
        return round(statistics.fmean(recall[p][i] for i, p in enumerate(picks)), 4)

    lm = [s.lm_strategy if s.lm_strategy in recall else "hybrid" for _, s in searched]
    summary |= {"folds": folds, "mean_recall": {name: round(float(r.mean()), 4) for name, r in recall.items()},
                "lm_recall": mean_recall(lm), "learned_recall": mean_recall(chosen),
                "oracle_recall": round(float(np.max(np.vstack(list(recall.values())), axis=0).mean()), 4),
                "lm_choices": dict(Counter(lm)), "learned_choices": dict(Counter(chosen)),
                "ties": int(sum(len({float(r[i]) for r in recall.values()}) == 1 for i in range(len(searched))))}
    if summary["learned_recall"] < summary["lm_recall"]:
        return None, summary | {"why": f"out of fold it finds less evidence ({summary['learned_recall']:.2f}) than "
                                       f"the supervisor LM's choices ({summary['lm_recall']:.2f})"}
    return fit_chooser(x, recall), summary


@dataclass
class Part:
    """One decision's classifier (None: not learned, and why), its out-of-fold decisions and its summary."""

    classifier: Classifier | None
    chosen: list[bool] | None
    summary: dict[str, Any]


def fit_part(data: Dataset, reward: Callable[[list[bool]], float], unlearnable: str) -> Part:
    """Cross-validate, choose the threshold, fit on everything; or say why the decision cannot be learned."""
    counts = {data.yes: int(data.label.sum()), data.no: int(len(data.label) - data.label.sum())}
    summary: dict[str, Any] = {"decision_points": len(data.label), "labels": counts, "lm_decisions": data.lm_decisions}
    if not len(data.label):
        return Part(None, None, summary | {"why": unlearnable})
    if questions_per_label(data) < 2:
        return Part(None, None, summary | {"why": f"the labels need both {data.yes} and {data.no} in at least two "
                                                  f"questions each to cross-validate ({data.yes} {counts[data.yes]}, "
                                                  f"{data.no} {counts[data.no]} decision points)"})
    try:
        threshold = choose_threshold(out_of_fold(data), reward)
        held_out = held_out_decisions(data, reward)
    except UserError as exc:
        return Part(None, None, summary | {"why": str(exc)})
    never = [False] * len(data.label)
    summary |= {"folds": min(MAX_FOLDS, questions_per_label(data)), "threshold": threshold,
                "cv_accuracy": round(float(np.mean(held_out == data.label)), 4),
                "lm_agreement": round(float(np.mean(held_out == data.lm)), 4),
                "lm_label_accuracy": round(float(np.mean(data.lm == data.label)), 4),
                "reward": round(reward(held_out.tolist()), 4), "reward_without": round(reward(never), 4)}
    if summary["reward"] <= summary["reward_without"]:
        return Part(None, None, summary | {"why": f"out of fold its decisions earn {summary['reward']:.4f} a question, "
                                                  f"no more than never {data.yes} ({summary['reward_without']:.4f}), "
                                                  "as the policy does without it"})
    return Part(classifier_of(fit_classifier(data.x, data.label), threshold), held_out.tolist(), summary)


def fit_policy(traces: list[TracedQuestion], cost: float, context: dict[str, Any]) -> LearnedPolicy:
    """Learn each decision the traces can teach; the summary says how well, on what, and the traced runs
    replayed under the learned, LM, plan and oracle decisions."""
    from dspy_rag.pipelines.learned_policy import LearnedPolicy
    from dspy_rag.pipelines.policy_features import FEATURES

    learned_from = [t for t in traces if t.points]
    finishing, revising = finish_data(learned_from, cost), revise_data(learned_from, cost)
    ended = [t for t in learned_from if t.revision is not None]
    plan_stops = [[False] * len(t.decisions) for t in learned_from]
    finish = fit_part(finishing, lambda yes: outcome(learned_from, Choices(per_question(learned_from, yes),
                                                                            [False] * len(learned_from)), cost)["reward"],
                      "every traced run finished its plan after one step, so no step had a continuation to "
                      "compare with")
    revise = fit_part(revising, lambda yes: outcome(ended, Choices([[False] * len(t.decisions) for t in ended], yes),
                                                    cost)["reward"],
                      "no traced run was re-planned at its plan's end (traced with --no-revise, or every run "
                      "stopped on a budget)")
    strategy, strategy_summary = cross_validated_chooser(traces)
    if finish.classifier is None and revise.classifier is None and strategy is None:
        raise UserError(f"nothing to learn from {len(traces)} traced questions: FINISH: {finish.summary['why']}; "
                        f"REVISE: {revise.summary['why']}; strategy: {strategy_summary['why']}; use more train "
                        "questions or another trainset")

    def at_ends(values: Sequence[bool]) -> list[bool]:  # the per-question revise choices, False where not traced
        by_question = dict(zip(revising.groups.tolist(), values, strict=True))
        return [bool(by_question.get(n, False)) for n in range(len(learned_from))]

    policies = {"learned": Choices(plan_stops if finish.chosen is None else per_question(learned_from, finish.chosen),
                                   [False] * len(learned_from) if revise.chosen is None else at_ends(revise.chosen)),
                # the LM's REVISE while the plan has steps left replays as going on: that re-planned run was not traced
                "llm": Choices(per_question(learned_from, finishing.lm.astype(bool).tolist()),
                               at_ends(revising.lm.astype(bool).tolist())),
                "plan": Choices(plan_stops, [False] * len(learned_from)),
                "oracle": Choices([t.labels(cost) for t in learned_from],  # the labels' own: the best they allow
                                  [t.revise_label(cost) for t in learned_from])}
    summary = {**context, "step_cost": cost, "questions": len(traces), "questions_with_decisions": len(learned_from),
               "decision_points": sum(t.points for t in learned_from), "finish": finish.summary,
               "revise": revise.summary, "strategy": strategy_summary,
               "replayed": {name: outcome(learned_from, choices, cost) for name, choices in policies.items()}
               if learned_from else {}}
    return LearnedPolicy(list(FEATURES), finish.classifier, revise.classifier, strategy, summary)


def part_report(name: str, s: dict[str, Any]) -> str:
    if "why" in s:
        return f"{name}: not learned ({s['why']})"
    labels = ", ".join(f"{label} {n}" for label, n in s["labels"].items())
    return (f"{name}: {s['decision_points']} decision points ({labels}); {s['folds']}-fold accuracy "
            f"{s['cv_accuracy']:.2f} against the labels, agreement with the LM policy {s['lm_agreement']:.2f} (the "
            f"LM policy's own accuracy {s['lm_label_accuracy']:.2f}), reward {s['reward']:.4f} a question against "
            f"{s['reward_without']:.4f} never deciding; threshold {s['threshold']:.3f}")


def strategy_report(s: dict[str, Any]) -> str:
    if "why" in s:
        return f"strategy: not learned ({s['why']})"
    means = ", ".join(f"{name} {r:.2f}" for name, r in s["mean_recall"].items())
    return (f"strategy: {s['steps']} searched steps of {s['questions']} questions ({s['ties']} tied every way); "
            f"mean evidence recall {means}; the supervisor LM's choices {s['lm_recall']:.2f}, the chooser's "
            f"{s['folds']}-fold {s['learned_recall']:.2f}, the best per step {s['oracle_recall']:.2f}")


def report(policy: LearnedPolicy) -> str:
    s = policy.summary
    target = s.get("decision_target")
    short = f" (short of the {target} asked for: the train questions ran out)" if target and s["decision_points"] < target else ""
    sets = s.get("per_set") or {}
    by_set = (" [" + ", ".join(f"{name}: {n['questions']} questions, {n['decision_points']} points"
                               for name, n in sets.items()) + "]") if len(sets) > 1 else ""
    policies = "; ".join(f"{name} {r['steps']:.2f} steps, score {r['score']:.3f}, reward {r['reward']:.3f}"
                         for name, r in s["replayed"].items()) or "none had a decision point"
    return (f"{s['decision_points']} decision points{short} from {s['questions_with_decisions']} of {s['questions']} "
            f"questions{by_set}; {part_report('FINISH', s['finish'])}; {part_report('REVISE', s['revise'])}; "
            f"{strategy_report(s['strategy'])}; the traced runs replayed per policy (learned: out of fold), per "
            f"question: {policies}")


def stored_trace(store: RunStore, context: RunContext, program: DeepResearch, example: dspy.Example,
                 metric: ResearchMetric, embed: Embed, tally: Tally, revise: bool) -> TracedQuestion:
    """The question traced to the end of its plan, from the run store when the same trace was made before (its
    decision points are scored with the metric, so the metric is keyed too)."""
    from dspy_rag.optimizers.policy_labels import Decision, Revision, SearchedStep, TracedQuestion, trace_question

    key = context.key(TRACE, example.question, [metric.name, example.short_answer, example.aliases,
                                                 example.gold_passages, example.gold_sections, revise])
    if (found := store.get(key)) is not None:
        tally.reused += 1
        return TracedQuestion(example.id, [Decision(**d) for d in found["decisions"]], found["final_score"],
                              Revision(**found["revision"]) if found.get("revision") else None,
                              [SearchedStep(**s) for s in found["searches"]])
    traced = trace_question(program, example, metric, embed, revise)
    store.put(key, context, TRACE, example.id, asdict(traced))
    tally.run += 1
    return traced


def distill_policy(request: DistillRequest, config: Config, reporter: Reporter = QUIET) -> LearnedPolicy:
    """Trace, label, fit and save; returns the policy written into the artifact."""
    import dspy

    from dspy_rag import artifacts
    from dspy_rag.evals.research_metric import ResearchMetric
    from dspy_rag.models import build_lm, usage_since
    from dspy_rag.optimizers.pool import Pool, in_turn
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
    # The re-planned run asks the first plan's calls again; decoding is greedy, so the LM cache answers them.
    lm = build_lm(config.lm.model_copy(update={"cache": True}))
    dspy.configure(lm=lm, adapter=dspy.JSONAdapter())
    start, traces, traced_sets = len(lm.history), [], []
    tally = Tally()
    with RunStore.of(config) as store, reporter.bars() as bars:
        bars.start("train questions, researched to the end of their plans", len(examples))
        for example in examples:
            if request.decisions and sum(t.points for t in traces) >= request.decisions:
                break
            traces.append(stored_trace(store, contexts[example.trainset], programs[example.trainset], example,
                                       metric, embed_texts, tally, request.revise))
            traced_sets.append(example.trainset)
            traced = traces[-1]
            revised = (f", re-planned {traced.revision.score:.2f} (+{traced.revision.added_steps} steps)"
                       if traced.revision else "")
            bars.advance(f"{example.id}: {traced.points} decision point(s), scores "
                         + ", ".join(f"{s:.2f}" for s in traced.scores) + revised)
    usage = usage_since(lm, start)
    per_set = {member.name: {"questions": traced_sets.count(member.name),
                             "decision_points": sum(t.points for t, name in zip(traces, traced_sets, strict=True)
                                                    if name == member.name)}
               for member in pool.sets}
    policy = fit_policy(traces, request.step_cost, {
        "trainset": pool.name, "trainset_hash": pool.content_hash, "trainsets": pool.record(), "per_set": per_set,
        "decision_target": request.decisions, "artifact": manifest.name,
        "model": config.lm.model, "metric": metric.name, "lm_calls": usage["lm_calls"], "reused": tally.reused,
        "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        "seconds": round(time.perf_counter() - started, 1), "created": datetime.now(UTC).isoformat(timespec="seconds")})
    reporter.say(f"{report(policy)}; traced runs: {tally.text()}; saved {policy.save(folder)}")
    return policy
