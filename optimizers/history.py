"""`dspy-rag history`: every compile and evaluation in the ledger, grouped by artifact lineage.

A lineage is the chain artifact → parent → parent ... up to a root compiled from the uncompiled program.
Each row is measured against its parent's own compile score and against the uncompiled program, but only
where both scores were measured alike: on the same model, trainset, split, metric, number of questions and code.
An eval on another model than its artifact's compile shows the share of the gain it kept there, against a gain
on the compile's model by the same code where there is one (each gain is over the uncompiled program run by the
same code as the artifact, so two gains compare across code, marked so), marked too where that gain is inside
noise.
"""

import io
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspy_rag import paths
from dspy_rag.errors import UserError
from dspy_rag.evals.stats import verdict
from dspy_rag.files import write_atomic
from dspy_rag.ledger import LedgerEntry
from dspy_rag.trainsets.formats import pooled_names

UNCOMPILED = "uncompiled"


@dataclass
class Row:
    entry: LedgerEntry
    generation: int  # compiles from the uncompiled program to this artifact: 0 is the uncompiled program
    parent_score: float | None  # the parent's own compile score, measured alike
    uncompiled_score: float | None  # the uncompiled program's score, measured alike
    kept: float | None = None  # an eval on another model than the compile's: the share of its gain kept there
    kept_against: LedgerEntry | None = None  # the eval on the compile's model whose gain `kept` divides by

    @property
    def delta_parent(self) -> float | None:
        return None if self.parent_score is None else self.entry.score - self.parent_score

    @property
    def delta_uncompiled(self) -> float | None:
        return None if self.uncompiled_score is None else self.entry.score - self.uncompiled_score

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self.entry), "generation": self.generation, "parent_score": self.parent_score,
                "uncompiled_score": self.uncompiled_score, "delta_parent": self.delta_parent,
                "delta_uncompiled": self.delta_uncompiled, "kept": self.kept,
                "kept_against_code": self.kept_against.code_version if self.kept_against else None,
                "kept_against_gain_ci": self.kept_against.gain_ci if self.kept_against else None}

    @property
    def kept_of_noise(self) -> bool:
        """The gain `kept` divides by is inside noise (its interval reaches zero): the share may be anything."""
        interval = self.kept_against.gain_ci if self.kept is not None and self.kept_against is not None else None
        return interval is not None and interval[0] <= 0

    @property
    def kept_by_other_code(self) -> bool:
        """The gain `kept` divides by was measured by other code than this row's."""
        return (self.kept is not None and self.kept_against is not None
                and self.kept_against.code_version != self.entry.code_version)


def measured_alike(a: LedgerEntry, b: LedgerEntry, on_any_model: bool = False, by_any_code: bool = False) -> bool:
    """Same model, data (pooled sets in any order), split, metric, number of questions and code (unless told
    otherwise): a score on 1 question says nothing next to 8, and the same prompts run by other code are another
    program."""
    return ((on_any_model or a.model == b.model) and (by_any_code or a.code_version == b.code_version)
            and pooled_names(a.trainset) == pooled_names(b.trainset)
            and (a.split, a.metric, a.questions) == (b.split, b.metric, b.questions))


def gain(entry: LedgerEntry) -> float | None:
    """An eval's gain over the uncompiled program measured beside it."""
    return None if entry.score_before is None else entry.score - entry.score_before


def home_of(entry: LedgerEntry, so_far: list[LedgerEntry]) -> LedgerEntry | None:
    """Transfer: for an eval with a gain on another model than its artifact was compiled on, the newest eval with
    a gain on that model, measured alike but for the model, by the same code where there is one, else by any. Each
    gain is over the uncompiled program run by the same code as the artifact, so two gains compare across code."""
    at = next((n for n in range(len(so_far) - 1, -1, -1)
               if so_far[n].kind == "compile" and so_far[n].artifact == entry.artifact), None)
    if entry.kind != "eval" or gain(entry) is None or at is None or so_far[at].model == entry.model:
        return None
    homes = [e for e in reversed(so_far[at + 1:]) if e.kind == "eval" and e.artifact == entry.artifact  # this program's
             and e.model == so_far[at].model and gain(e) is not None and measured_alike(e, entry, True, True)]
    return next((e for e in homes if e.code_version == entry.code_version), homes[0] if homes else None)


def share_kept(entry: LedgerEntry, home: LedgerEntry | None) -> float | None:
    """An eval's gain as a share of its home eval's (`home_of`); None where there is none or it is no gain."""
    away, home_gain = gain(entry), gain(home) if home is not None else None
    return away / home_gain if away is not None and home_gain is not None and home_gain > 0 else None


def latest(entries: list[LedgerEntry], like: LedgerEntry, kind: str,
           where: Callable[[LedgerEntry], bool]) -> LedgerEntry | None:
    """The newest entry of this kind that `where` accepts and whose score compares with `like`'s."""
    return next((e for e in reversed(entries) if e.kind == kind and where(e) and measured_alike(e, like)), None)


def ancestry(artifact: str | None, parents: dict[str, str | None]) -> list[str]:
    """The artifact, its parent, its parent's parent ... the root; a reused name cannot make it loop."""
    chain: list[str] = []
    while artifact is not None and artifact not in chain:
        chain.append(artifact)
        artifact = parents.get(artifact)
    return chain


def lineages(entries: list[LedgerEntry]) -> dict[str, list[Row]]:
    """Rows in ledger order, grouped by the root of their chain (`uncompiled` for the uncompiled program). A name
    compiled again is another program from then on: a root compiled under a name it had before starts a lineage of
    its own ("NAME #2"), and a row joins the program its artifact named when the row was written."""
    parents: dict[str, str | None] = {}
    editions: dict[str, int] = {}  # compiles so far under each name
    grouped: dict[str, list[Row]] = {}
    for index, entry in enumerate(entries):
        if entry.kind == "compile" and entry.artifact is not None:
            parents[entry.artifact] = entry.parent
            editions[entry.artifact] = editions.get(entry.artifact, 0) + 1
        chain = ancestry(entry.artifact, parents)
        # A parent or root compile counts only if it came first: a reused name may since mean another program.
        so_far = entries[: index + 1]
        uncompiled = score_of_uncompiled(entry, so_far, entries) if chain else None
        root = chain[-1] if chain else UNCOMPILED
        edition = editions.get(root, 1)
        home = home_of(entry, so_far)
        kept = share_kept(entry, home)
        grouped.setdefault(root if edition == 1 else f"{root} #{edition}", []).append(
            Row(entry, len(chain), score_of_parent(entry, so_far), uncompiled, kept,
                home if kept is not None else None))
    return grouped


def score_of_parent(entry: LedgerEntry, so_far: list[LedgerEntry]) -> float | None:
    """A recompile's parent: its own compile score measured alike, else the score this compile started from
    (the parent's program run on this compile's model and dev questions, e.g. a parent compiled for another
    model)."""
    if entry.kind != "compile" or not entry.parent:
        return None
    parent = latest(so_far, entry, "compile", lambda e: e.artifact == entry.parent)
    return parent.score if parent else entry.score_before


def score_of_uncompiled(entry: LedgerEntry, so_far: list[LedgerEntry], entries: list[LedgerEntry]) -> float | None:
    """An evaluation of the uncompiled program, whenever it ran, else the score the newest compile from the
    uncompiled program (one without a parent, in any lineage) started from."""
    evaluated = latest(entries, entry, "eval", lambda e: e.artifact is None)
    if evaluated:
        return evaluated.score
    root = latest(so_far, entry, "compile", lambda e: e.parent is None)
    return root.score_before if root else None


def score_text(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


TEXT_COLUMNS = ("#", "kind", "artifact", "model", "trainset", "optimizer")
FIGURE_COLUMNS = ("questions", "before", "score", "Δ parent", "Δ uncompiled", "Δ before, 95% CI", "kept")


def cells(row: Row) -> list[str]:
    """A row as the lineage table shows it, under TEXT_COLUMNS then FIGURE_COLUMNS."""
    entry = row.entry
    return [str(row.generation), entry.kind, entry.artifact or UNCOMPILED, entry.model, entry.trainset,
            entry.optimizer or "-", questions_text(entry), score_text(entry.score_before), score_text(entry.score),
            score_text(row.delta_parent, signed=True), score_text(row.delta_uncompiled, signed=True),
            interval_text(entry.gain_ci), kept_text(row)]


# Under a table with a share marked so.
OTHER_CODE_MARK = "*"
OTHER_CODE_NOTE = (f"{OTHER_CODE_MARK} of a gain on the compile's model measured by other code (each gain is over "
                   "the uncompiled program run by the same code as the artifact)")


NOISE_MARK = "?"
NOISE_NOTE = (f"{NOISE_MARK} of a gain on the compile's model inside noise (its 95% interval reaches zero): the share "
              "may be anything")


def kept_text(row: Row) -> str:
    """The share kept, marked where its home gain was measured by other code, and where it is inside noise."""
    if row.kept is None:
        return "-"
    return (f"{row.kept:.0%}{OTHER_CODE_MARK if row.kept_by_other_code else ''}"
            f"{NOISE_MARK if row.kept_of_noise else ''}")


def questions_text(entry: LedgerEntry) -> str:
    """The number of questions, and how many of their runs were reused from the run store rather than made."""
    return f"{entry.questions} ({entry.reused} reused)" if entry.reused else str(entry.questions)


def interval_text(interval: list[float] | None) -> str:
    """The interval of the gain over `before` on the same questions (a compile: the program it started from; an
    eval: the uncompiled program beside it), with what it says."""
    if interval is None:
        return "-"
    low, high = interval
    return f"[{low:+.3f}, {high:+.3f}] {verdict(low, high)}"


def report(ledger: Path, grouped: dict[str, list[Row]]) -> dict[str, Any]:
    """`history --json`'s document (the server's too): each lineage's rows and the points its plot draws."""
    return {"ledger": str(ledger), "lineages": [{"lineage": name, "rows": [row.as_json() for row in rows],
                                                 "points": compile_points(rows)} for name, rows in grouped.items()]}


def plot(grouped: dict[str, list[Row]], path: Path) -> None:
    """The score across recompiles, one line per lineage, written as a PNG in one atomic step."""
    curves = {name: points for name, rows in grouped.items() if (points := compile_points(rows))}
    if path.suffix.lower() != ".png":
        raise UserError(f"--plot writes a PNG; name the file *.png, not {path.name}")
    paths.output_file(path, "--plot")
    if not curves:
        raise UserError("the ledger holds no compiles to plot; run `dspy-rag compile ...` first")
    # Imported here: matplotlib costs CLI start-up ~0.5 s, and only --plot needs it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(10, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, points in curves.items():
        line, = axes.plot(*zip(*points, strict=True), marker="o", label=name)
        if bars := gain_bars(grouped[name]):  # each compile's score as far as its gain's interval reaches
            x, y, below, above = zip(*bars, strict=True)
            axes.errorbar(x, y, yerr=[below, above], fmt="none", ecolor=line.get_color(), capsize=4)
        if bars := gain_bars(grouped[name], "eval"):  # its evals beside the uncompiled program, on their sets
            x, y, below, above = zip(*bars, strict=True)
            axes.errorbar(x, y, yerr=[below, above], fmt="s", color=line.get_color(), capsize=4, alpha=0.6,
                          label=f"{name}: evals beside the uncompiled program")
    axes.set(xlabel="recompile (0 = uncompiled)", ylabel="score (bars: 95% interval of each gain)")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(title="lineage", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")  # beside the data
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=120)
    try:
        write_atomic(path, image.getvalue())
    except OSError as exc:
        raise UserError(f"cannot write the plot to {path}: {exc.strerror}; pick a writable path") from exc


def compile_points(rows: list[Row]) -> list[tuple[int, float]]:
    """(recompile number, score) of a lineage's compiles, led by the uncompiled score at 0 when known."""
    compiles = [row for row in rows if row.entry.kind == "compile"]
    start = [(0, compiles[0].uncompiled_score)] if compiles and compiles[0].uncompiled_score is not None else []
    return start + [(row.generation, row.entry.score) for row in compiles]


def gain_bars(rows: list[Row], kind: str = "compile") -> list[tuple[int, float, float, float]]:
    """(recompile number, score, reach below, reach above) of a lineage's compiles (or evals) whose gain over the
    program they started from (an eval: the uncompiled program beside it) has an interval: the score that interval
    allows, given the starting score."""
    bars = []
    for row in rows:
        entry = row.entry
        if entry.kind == kind and entry.gain_ci and entry.score_before is not None:
            gain = entry.score - entry.score_before
            bars.append((row.generation, entry.score, max(gain - entry.gain_ci[0], 0.0),
                         max(entry.gain_ci[1] - gain, 0.0)))
    return bars
