"""Foundation benchmark: set-up time, 10-K ingest, local model speed, baseline `ask` latency and memory.

    .venv/bin/python -m dspy_rag.evals.bench_foundation [--runs 3] [--setup] [--out evals/results/foundation.json]

Each command runs as a fresh process, as a user would run it; figures are medians over runs because
these machines are noisy. `--setup` also times scripts/setup in a fresh clone of the checkout the code runs
from (minutes; it builds a venv), so it needs a checkout: an editable install, not a wheel.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dspy_rag.evals.rows import RESULTS
from dspy_rag.files import checkout, write_json_atomic
from dspy_rag.trainsets.locations import tenk_filing

CLI = str(Path(sys.executable).parent / "dspy-rag")
# Distinct questions, so no run is served by the prompt cache of an identical earlier prompt.
# Each maps to the strings that count as a correct answer (the tables give revenue in millions).
QUESTIONS = {
    "What was NVIDIA's Data Center revenue in fiscal year 2023?": ("15.01", "15,005"),
    "What was NVIDIA's Gaming revenue in fiscal year 2023?": ("9.07", "9,067"),
    "How many employees did NVIDIA have at the end of fiscal year 2023?": ("26,196",),
    "In which city is NVIDIA's headquarters?": ("Santa Clara",),
    "What was NVIDIA's total revenue in fiscal year 2023?": ("26.97", "26,974"),
}


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall seconds, CPU seconds, peak RSS (MB) and output of one child process."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, stdout=stdout, stderr=stderr, text=True,
                                 env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        stdout.seek(0)
        stderr.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {stderr.read()[-500:]}")
        return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
                "stdout": stdout.read()}


def bench_ingest(tenk: Path, runs: int, work: Path) -> dict[str, Any]:
    results = []
    for run in range(runs):
        folder = work / f"ingest-{run}"
        folder.mkdir()
        results.append(timed([CLI, "ingest", str(tenk), "--json"], folder))
    report = json.loads(results[-1]["stdout"])
    index = work / f"ingest-{runs - 1}" / ".dspy-rag" / "index"
    return {
        "runs": runs,
        "seconds_median": statistics.median(r["seconds"] for r in results),
        "seconds_all": [round(r["seconds"], 2) for r in results],
        "chunks": report["chunks_total"],
        "sections": len(report["sections"][str(tenk.resolve())]),
        "index_mb": sum(f.stat().st_size for f in index.rglob("*") if f.is_file()) / 1e6,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "index_folder": index.parent.parent,
    }


def bench_ask(folder: Path, model: str, prompt_cache: bool) -> dict[str, Any]:
    env = {"DSPY_RAG_LM_PROMPT_CACHE": str(prompt_cache).lower()}
    results = [timed([CLI, "ask", "--pipeline", "baseline", "--model", model, "--json", question], folder, env)
               for question in QUESTIONS]
    answers = [json.loads(r["stdout"]) for r in results]
    return {
        "model": model,
        "prompt_cache": prompt_cache,
        "questions": len(QUESTIONS),
        "wall_seconds_median": statistics.median(r["seconds"] for r in results),
        "wall_seconds_all": [round(r["seconds"], 2) for r in results],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "prompt_tokens_median": statistics.median(a["prompt_tokens"] for a in answers),
        "completion_tokens_median": statistics.median(a["completion_tokens"] for a in answers),
        "correct": sum(any(e in a["answer"] for e in expected)
                       for a, expected in zip(answers, QUESTIONS.values(), strict=True)),
        "answers": [a["answer"] for a in answers],
    }


def bench_tokens_per_second(model: str, tenk_text: str, runs: int) -> dict[str, Any]:
    """Prompt and generation speed on a ~1,460-token prompt with 150 generated tokens (the field-notes setup)."""
    from dspy_rag.llama_engine import LlamaEngine
    from dspy_rag.models import ensure_local_model, lookup

    engine = LlamaEngine(ensure_local_model(lookup(model)), context_window=4096, threads=os.cpu_count() or 1)
    llama = engine.llama
    prompt_tokens = llama.tokenize(tenk_text.encode())[:1460]
    prompt = llama.detokenize(prompt_tokens).decode(errors="ignore") + "\n\nSummarise the text above in detail:"
    prompt_rates, generation_rates = [], []
    for _ in range(runs):
        llama.reset()  # no prompt-cache reuse between runs
        started = time.perf_counter()
        first = None
        produced = 0
        for _chunk in llama.create_completion(prompt, max_tokens=150, temperature=0.0, stream=True):
            first = first or time.perf_counter()
            produced += 1
        finished = time.perf_counter()
        prompt_rates.append(len(llama.tokenize(prompt.encode())) / (first - started))
        generation_rates.append((produced - 1) / (finished - first))
    engine.close()
    return {"model": model, "prompt_tokens_per_s": statistics.median(prompt_rates),
            "generation_tokens_per_s": statistics.median(generation_rates), "runs": runs}


def bench_setup(work: Path, source: Path) -> dict[str, Any]:
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(source), str(clone)], check=True)
    result = timed([str(clone / "scripts" / "setup")], clone)
    return {"seconds": result["seconds"], "note": "fresh clone and venv; pip's wheel cache warm (llama-cpp-python built once before)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="ingest and tokens/s repetitions")
    parser.add_argument("--setup", action="store_true", help="also time scripts/setup in a fresh clone")
    parser.add_argument("--out", type=Path, default=RESULTS / "foundation.json")
    args = parser.parse_args()
    source = checkout() if args.setup else None
    if args.setup and source is None:
        parser.error("--setup clones the checkout the code runs from, and this is an installed wheel; run it from a "
                     "git checkout's editable install")
    from dspy_rag.documents import read_html
    from dspy_rag.models import LOCAL_MODELS

    tenk = tenk_filing()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        if source is not None:
            results["setup"] = bench_setup(work, source)
            print(f"setup: {results['setup']['seconds']:.0f} s", file=sys.stderr)
        ingest = bench_ingest(tenk, args.runs, work)
        folder = ingest.pop("index_folder")
        results["ingest_10k"] = ingest
        print(f"ingest: {ingest['seconds_median']:.1f} s median, {ingest['chunks']} chunks", file=sys.stderr)
        results["ask_baseline"] = [bench_ask(folder, m.model_string, cached)
                                   for m in LOCAL_MODELS.values() if m.installed() for cached in (True, False)]
        for row in results["ask_baseline"]:
            print(f"ask {row['model']} prompt cache {row['prompt_cache']}: {row['wall_seconds_median']:.1f} s median, "
                  f"{row['correct']}/{row['questions']} correct", file=sys.stderr)
    text = read_html(tenk.read_bytes(), str(tenk)).text
    results["tokens_per_second"] = [bench_tokens_per_second(m.model_string, text[160_000:], args.runs)
                                    for m in LOCAL_MODELS.values() if m.installed()]
    write_json_atomic(args.out, results)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
