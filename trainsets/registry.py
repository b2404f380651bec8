"""Named trainsets: questions, the corpus they are asked against, an optional web snapshot and a train/dev
split, declared in YAML beside this module (or anywhere else, by path):

    name: musique
    description: MuSiQue-Ans questions of two to four hops over Wikipedia paragraphs.
    questions: musique/questions.json   # beside the definition, else in the shared data folder
    corpus: musique/corpus.json         # or `documents: [files]`, ingested as `dspy-rag ingest` would
    hub:                                # optional: fetched when the local files are missing
      questions: hf://datasets/osunlp/HippoRAG_2/musique.json
      corpus: hf://datasets/osunlp/HippoRAG_2/musique_corpus.json
    web: web-snapshot                   # optional: a snapshot searched as the web tool
    split: {held_out_share: 0.3}        # or {field: split}: each question's own `split`

    dspy-rag trainsets [--json]
"""

import hashlib
from collections.abc import Sequence
from contextlib import suppress
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dspy_rag import paths
from dspy_rag.config import Config
from dspy_rag.errors import UserError
from dspy_rag.index import Index
from dspy_rag.trainsets.corpus_index import build_index, default_work_dir, is_held_out, sha256_of
from dspy_rag.trainsets.formats import SEPARATOR, CorpusPassage, Format, Question, load_corpus, load_questions
from dspy_rag.trainsets.locations import shared_data
from dspy_rag.web import SnapshotSearch, WebSearch

DEFINITIONS = Path(__file__).parent
HUB_FILE = r"^hf://datasets/[^/]+/[^/]+/.+"
Part = Literal["train", "dev"]
Split = Literal["train", "dev", "all"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HeldOutSplit(_Strict):
    """dev is the share of questions the reranker holds out (by a hash of the id), so it never trained on them."""

    held_out_share: float = Field(gt=0, lt=1)

    def of(self, question: Question) -> Part:
        return "dev" if is_held_out(question, self.held_out_share) else "train"


class FieldSplit(_Strict):
    """Each question names its own split, as the hand-made sets do."""

    field: Literal["split"]

    def of(self, question: Question) -> Part:
        if question.split not in ("train", "dev"):
            raise UserError(f"question {question.id} has split '{question.split}'; give each question train or dev")
        return "dev" if question.split == "dev" else "train"


class Hub(_Strict):
    questions: str = Field(pattern=HUB_FILE)
    corpus: str | None = Field(None, pattern=HUB_FILE)


class Definition(_Strict):
    name: str = Field(pattern=r"^[\w-]+$")
    description: str
    questions: str
    corpus: str | None = None
    documents: tuple[str, ...] = ()
    hub: Hub | None = None
    web: str | None = None
    split: HeldOutSplit | FieldSplit

    @model_validator(mode="after")
    def _one_corpus(self) -> "Definition":
        if (self.corpus is None) == (not self.documents):
            raise ValueError("give either corpus (a passage file) or documents (files to ingest)")
        return self


def fetch(hub_file: str) -> Path:
    """hf://datasets/OWNER/NAME/FILE, downloaded once into the Hugging Face cache."""
    from huggingface_hub import hf_hub_download

    owner, name, file = hub_file.removeprefix("hf://datasets/").split("/", 2)
    return Path(hf_hub_download(f"{owner}/{name}", file, repo_type="dataset"))


class Trainset:
    """A definition and the data it names; files are found and read on first use, and read once."""

    def __init__(self, definition: Definition, definition_path: Path) -> None:
        self.definition = definition
        self.definition_path = definition_path

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def format(self) -> Format:
        return self._loaded[0]

    def questions(self, split: Split = "all") -> list[Question]:
        """The questions of a split in file order; train and dev are disjoint and together make all."""
        return list(self._splits[split])

    @cached_property
    def passages(self) -> list[CorpusPassage]:
        """The corpus passages; none for a set of documents."""
        return load_corpus(self._corpus_files[0]) if self.definition.corpus else []

    @cached_property
    def content_hash(self) -> str:
        """Short sha256 of the question and corpus bytes and the split rule: what a compiled program was fit on."""
        files = [self._questions_file, *self._corpus_files]
        return hashlib.sha256((sha256_of(files) + self.definition.split.model_dump_json()).encode()).hexdigest()[:16]

    @cached_property
    def index_folder(self) -> Path:
        """The scratch index of the corpus, keyed by its bytes."""
        return default_work_dir(*self._corpus_files)

    def index(self, config: Config) -> Index:
        """The corpus ingested once into its scratch index, then reused."""
        scratch = config.model_copy(update={"index": config.index.model_copy(update={"path": self.index_folder})})
        if self.definition.corpus:
            return build_index(scratch, self.passages, lambda *_: None)
        index = Index(scratch)
        # The same bytes at another path (a moved trainset, a test's tmp folder) would otherwise be indexed twice;
        # two compiles may build it at once: the second waits for the first, then finds every file unchanged.
        index.mirror([str(file) for file in self._corpus_files])
        return index

    def web(self, config: Config) -> WebSearch | None:
        return SnapshotSearch(self._data_file(self.definition.web), config) if self.definition.web else None

    def summary(self) -> dict[str, Any]:
        """Sizes and sources, for listing; the corpus is read but nothing is ingested or embedded."""
        return {
            "name": self.name, "format": self.format,
            **{split: len(self._splits[split]) for split in ("train", "dev", "all")},
            "passages": len(self.passages) if self.definition.corpus else None,
            "documents": len(self.definition.documents) or None,
            "web": self.definition.web, "description": self.definition.description,
            "definition": str(self.definition_path), "content_hash": self.content_hash,
        }

    @cached_property
    def _loaded(self) -> tuple[Format, list[Question]]:
        return load_questions(self._questions_file)

    @cached_property
    def _splits(self) -> dict[Split, list[Question]]:
        questions = self._loaded[1]
        splits: dict[Split, list[Question]] = {"train": [], "dev": [], "all": questions}
        for question in questions:
            splits[self.definition.split.of(question)].append(question)
        return splits

    @cached_property
    def _questions_file(self) -> Path:
        hub = self.definition.hub
        return self._data_file(self.definition.questions, hub.questions if hub else None)

    @cached_property
    def _corpus_files(self) -> list[Path]:
        if self.definition.corpus:
            hub = self.definition.hub
            return [self._data_file(self.definition.corpus, hub.corpus if hub else None)]
        return [self._data_file(document) for document in self.definition.documents]

    def _data_file(self, relative: str, hub_file: str | None = None) -> Path:
        """The file beside the definition or in the shared data folder, else fetched from the Hub if named there."""
        folders = [self.definition_path.parent]
        with suppress(FileNotFoundError):  # no shared data folder: the hint below says how to point at one
            folders.append(shared_data())
        places = list(dict.fromkeys(folder / relative for folder in folders))  # one place for an absolute path
        if found := next((place for place in places if place.exists()), None):
            return found
        looked = ", ".join(str(place) for place in places)
        if hub_file is None:
            raise UserError(f"trainset {self.name}: {relative} not found (looked in {looked}); set SHARED_DATA "
                            "to the shared data folder that holds it")
        try:
            return fetch(hub_file)
        except OSError as exc:  # offline, or no such dataset or file: huggingface_hub's errors are OSErrors
            raise UserError(f"trainset {self.name}: {relative} not found (looked in {looked}) and {hub_file} could "
                            f"not be fetched ({type(exc).__name__}); set SHARED_DATA to the shared data folder, "
                            "or go online") from exc


def available() -> list[str]:
    """The names of the definitions shipped beside this module."""
    return sorted(path.stem for path in DEFINITIONS.glob("*.yaml"))


def load_trainset(name_or_path: str) -> Trainset:
    """A shipped trainset by name, or any YAML definition of the same shape by path."""
    path = DEFINITIONS / f"{name_or_path}.yaml" if name_or_path in available() else Path(name_or_path)
    if not paths.named(path, "trainset").is_file():
        if path.suffix in (".yaml", ".yml"):
            raise UserError(f"trainset definition {path} does not exist; check the path")
        raise UserError(f"unknown trainset '{name_or_path}'; choose {', '.join(available())} "
                        "or pass the path of a YAML definition")
    try:
        definition = Definition.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML ({type(exc).__name__}); check its syntax") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text, so no trainset definition; pass a YAML definition") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise UserError(f"invalid trainset definition {path} at '{where}': {first['msg']}; see the shipped ones in "
                        f"{DEFINITIONS} for the fields") from exc
    return Trainset(definition, path.resolve())


def trainset_names(given: str | Sequence[str]) -> list[str]:
    """The names or paths a repeatable option gives: repeated, or comma-separated in one value."""
    values = [given] if isinstance(given, str) else list(given)
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    if not names:
        raise UserError("no trainset is named; name one or more, e.g. hotpotqa,musique")
    return names


def pooled_hash(sets: Sequence["Trainset"]) -> str:
    """The one set's hash, or a hash of every set's name and hash: what a program is fit or measured on."""
    if len(sets) == 1:
        return sets[0].content_hash
    return hashlib.sha256(" ".join(f"{s.name}:{s.content_hash}" for s in sets).encode()).hexdigest()[:16]


def load_trainsets(given: str | Sequence[str]) -> list[Trainset]:
    """The named trainsets, each once."""
    sets = [load_trainset(name) for name in trainset_names(given)]
    names = [s.name for s in sets]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
        raise UserError(f"trainset {', '.join(repeated)} is given twice; name each trainset once")
    return sets
