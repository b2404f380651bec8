"""Ingest benchmark: throughput and peak memory of `Index.ingest` on the 10-K and on a large plain-text file.

    .venv/bin/python -m dspy_rag.evals.bench_ingest [--limit-mb 20] [--only 10k,text] [--json evals/results/ingest.json]

Each input is ingested into a fresh index by a fresh process, as `dspy-rag ingest` would be. The text file is
built in a temp folder from the shared HotpotQA and MuSiQue paragraphs, repeated until it is `--limit-mb` MB; it is
never written into the project. The child reports its own peak RSS (VmHWM: a child's getrusage maximum starts from
its parent's on Linux); its CPU seconds come from wait4, so figures from a loaded machine can still be compared.
"""

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dspy_rag.evals.bench_foundation import timed
from dspy_rag.files import write_json_atomic
from dspy_rag.trainsets.formats import load_corpus
from dspy_rag.trainsets.locations import shared_data, tenk_filing

CORPORA = ("hotpotqa/corpus.json", "musique/corpus.json")
INPUTS = ("10k", "text")

# The child: one ingest into a fresh index, then what it cost.
CHILD = """
import json, sys, time
import dspy_rag
from dspy_rag.config import load_config
from dspy_rag.evals.bench_ingest import status_mb
from dspy_rag.index import Index
started = time.perf_counter()
index = Index(load_config(overrides={"index.path": sys.argv[1]}, environ={}))
report = index.ingest([sys.argv[2]])
print(json.dumps({"seconds": time.perf_counter() - started, "chunks": report.chunks_written,
                  "peak_rss_mb": status_mb("VmHWM"), "code": dspy_rag.__file__}))
"""

# `--commit-only`: the file parsed and chunked as the default configuration chunks it, then its catalog commit
# (postings and all) alone, no embedding; the commit's own peak is read after VmHWM is reset (clear_refs 5) once
# the chunks are in memory.
COMMIT_CHILD = """
import json, sys, time
from pathlib import Path
import dspy_rag
from dspy_rag.catalog import Catalog
from dspy_rag.chunking import chunk_document
from dspy_rag.config import load_config
from dspy_rag.documents import parse, read_bytes
from dspy_rag.evals.bench_ingest import status_mb
config, file = load_config(environ={}), Path(sys.argv[2])
chunks = chunk_document(parse(read_bytes(file), str(file), "text"), config.ingest.chunk_chars,
                        config.ingest.chunk_overlap)
Path("/proc/self/clear_refs").write_text("5")
before, started = status_mb("VmRSS"), time.perf_counter()
catalog = Catalog(Path(sys.argv[1]), config.embedding.model, writer=True)
with catalog.transaction():
    catalog.replace(str(file), "0" * 64, "text", chunks)
print(json.dumps({"seconds": time.perf_counter() - started, "chunks": len(chunks), "peak_rss_mb": status_mb("VmHWM"),
                  "commit_extra_mb": status_mb("VmHWM") - before, "code": dspy_rag.__file__}))
"""


def status_mb(key: str) -> float:
    """This process's memory figure `key` (VmRSS, VmHWM) from /proc, in MB."""
    kilobytes = re.findall(key + r":\s+(\d+)", Path("/proc/self/status").read_text())
    return int(kilobytes[0]) / 1024


def paragraphs() -> Iterator[str]:
    """The shared corpora's passages, each a titled paragraph, over and over (numbered by pass, so no two
    repeats are the same text)."""
    passages = [p for corpus in CORPORA for p in load_corpus(shared_data() / corpus)]
    for round_ in range(1, sys.maxsize):
        for passage in passages:
            yield f"{passage.title} ({round_})\n{passage.text}\n\n"


def build_text(path: Path, megabytes: float) -> int:
    """Write a plain-text file of about `megabytes` MB of paragraphs; returns its size in bytes."""
    wanted, size = int(megabytes * 1e6), 0
    with path.open("w", encoding="utf-8") as handle:
        for paragraph in paragraphs():
            if size >= wanted:
                break
            size += handle.write(paragraph)
    return path.stat().st_size


def ingest_once(file: Path, work: Path, child: str = CHILD) -> dict[str, Any]:
    """A fresh process ingesting `file` into a fresh index under `work`: chunks, seconds, chunks/s, peak MB, CPU s."""
    index = Path(tempfile.mkdtemp(dir=work, prefix="index-"))
    python = [sys.executable, *(["-P"] if sys.flags.safe_path else [])]  # -P: keep a PYTHONPATH-chosen checkout
    run = timed([*python, "-c", child, str(index), str(file)], work)
    figures = json.loads(run["stdout"].strip().splitlines()[-1])
    return figures | {"file_mb": round(file.stat().st_size / 1e6, 2), "chunks_per_s": figures["chunks"] / figures["seconds"],
                      "process_seconds": run["seconds"], "cpu_seconds": run["cpu_seconds"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mb", type=float, default=20.0, help="size of the plain-text file in MB")
    parser.add_argument("--only", default=",".join(INPUTS), help=f"inputs to ingest, of {','.join(INPUTS)}")
    parser.add_argument("--commit-only", action="store_true",
                        help="the text file's catalog commit alone (no embedding): its memory and time")
    parser.add_argument("--label", default="run", help="what this run measures (e.g. before, after)")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="add the figures under --label to this JSON file (other labels' runs are kept)")
    args = parser.parse_args(argv)
    wanted = ["text"] if args.commit_only else [name for name in args.only.split(",") if name]
    if unknown := set(wanted) - set(INPUTS):
        parser.error(f"--only: unknown inputs {sorted(unknown)}; use {','.join(INPUTS)}")
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as temp:
        work = Path(temp)
        files = {"10k": tenk_filing(), "text": work / "paragraphs.txt"}
        if "text" in wanted:
            build_text(files["text"], args.limit_mb)
        results = {}
        for name in wanted:
            results[name] = ingest_once(files[name], work, COMMIT_CHILD if args.commit_only else CHILD)
            row = results[name]
            print(f"{name}: {row['file_mb']} MB, {row['chunks']} chunks in {row['seconds']:.1f} s "
                  f"({row['chunks_per_s']:.1f} chunks/s), {row['cpu_seconds']:.0f} CPU s, {row['peak_rss_mb']:.0f} MB peak",
                  flush=True)
    figures = {"measured": datetime.now(UTC).isoformat(timespec="seconds"), "text_mb": args.limit_mb,
               "mode": "commit only" if args.commit_only else "ingest",
               "machine": {"cpus": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
                           "python": platform.python_version()},
               "results": results}
    if args.json:
        runs = json.loads(args.json.read_text()) if args.json.exists() else {}
        write_json_atomic(args.json, runs | {args.label: figures})


if __name__ == "__main__":
    main()
