"""What a compile costs with each optimizer on this machine: LM calls, tokens and wall time.

    .venv/bin/python -m dspy_rag.evals.bench_compile [--train 4] [--dev 2] [--out evals/results/compile-costs.json]

Every optimizer compiles the deep program on the same small slice of the 10-K set on the local model, as a fresh
`dspy-rag compile` process writing into a scratch artifacts folder (the project's artifacts and ledger are not
touched). The figures come from each artifact's manifest. Dev scores are cached by program state, so after the
first compile (labeled: the dev runs before and after, nothing else) the uncompiled program's dev run is not paid
again: each later figure is the optimizer's own runs plus the dev run after.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dspy_rag.files import write_json_atomic

CLI = str(Path(sys.executable).parent / "dspy-rag")
TRAINSET = "nvidia-10k"
# Small enough that the searching optimizers finish in minutes: MIPROv2 scores minibatches of the one validation
# question, GEPA gets a dozen metric calls.
SETTINGS: dict[str, list[str]] = {
    "labeled": [],
    "bootstrap": [],
    "random-search": ["candidates=1"],
    "mipro": ["candidates=2", "trials=2", "minibatch=1"],
    "gepa": ["max_metric_calls=12", "minibatch=1"],
}


def compile_once(optimizer: str, train: int, dev: int, artifacts: Path, model: str) -> dict[str, Any]:
    name = f"cost-{optimizer}"
    command = [CLI, "compile", "--trainset", TRAINSET, "--optimizer", optimizer, "--model", model, "--name", name,
               "--train-limit", str(train), "--dev-limit", str(dev), "--replace",
               *(arg for setting in SETTINGS[optimizer] for arg in ("--set", setting))]
    env = {**os.environ, "DSPY_RAG_ARTIFACTS_PATH": str(artifacts)}
    subprocess.run(command, env=env, check=True)
    manifest = json.loads((artifacts / name / "manifest.json").read_text(encoding="utf-8"))
    return {
        "optimizer": optimizer, "settings": manifest["optimizer_settings"], "lm_calls": manifest["lm_calls"],
        "tokens": manifest["tokens"], "seconds": manifest["seconds"], "dev_questions": manifest["dev_questions"],
        "dev_before": manifest["dev_before"], "dev_after": manifest["dev_after"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=4, help="first N train questions")
    parser.add_argument("--dev", type=int, default=2, help="first N dev questions")
    parser.add_argument("--model", default="local/qwen2.5-coder-0.5b")
    parser.add_argument("--optimizer", action="append", choices=list(SETTINGS), help="repeat; default all")
    parser.add_argument("--out", type=Path, default=Path("evals/results/compile-costs.json"))
    args = parser.parse_args()
    header = {"trainset": TRAINSET, "model": args.model, "train": args.train, "dev": args.dev,
              "threads": os.environ.get("DSPY_RAG_LM_THREADS", "configured")}
    # Rows of other optimizers measured alike stay: `--optimizer gepa` re-measures one without losing the rest.
    earlier = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    chosen = args.optimizer or list(SETTINGS)
    rows = [row for row in earlier.get("rows", []) if row["optimizer"] not in chosen
            and {k: earlier.get(k) for k in header} == header]
    with tempfile.TemporaryDirectory(prefix="dspy-rag-compile-costs-") as scratch:
        for optimizer in chosen:
            row = compile_once(optimizer, args.train, args.dev, Path(scratch), args.model)
            rows = [r for r in rows if r["optimizer"] != optimizer] + [row]
            rows.sort(key=lambda r: list(SETTINGS).index(r["optimizer"]))
            # Written after every optimizer: a later one failing or being stopped keeps the figures already paid for.
            write_json_atomic(args.out, {**header, "rows": rows})
            print(f"{optimizer}: {row['lm_calls']} LM calls, "
                  f"{row['tokens']:,} tokens, {row['seconds'] / 60:.1f} min; dev {row['dev_before']:.3f} → "
                  f"{row['dev_after']:.3f}", flush=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
