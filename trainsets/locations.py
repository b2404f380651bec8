"""Where the real data for tests, benchmarks and the trainsets lives: ../shared/data, never copied in."""

import os
from pathlib import Path

from dspy_rag.files import checkout


def shared_data() -> Path:
    """$SHARED_DATA, else ../shared/data beside the checkout (when the code runs from one), else beside the working
    folder."""
    source = checkout()
    beside_checkout = source.parent / "shared" / "data" if source else None
    for candidate in (os.environ.get("SHARED_DATA"), beside_checkout, Path.cwd().parent / "shared" / "data"):
        if candidate and Path(candidate, "nvidia-10k-fy2023").is_dir():
            return Path(candidate)
    raise FileNotFoundError("../shared/data not found; set SHARED_DATA to the folder holding nvidia-10k-fy2023/")


def tenk_filing() -> Path:
    return shared_data() / "nvidia-10k-fy2023" / "nvda-20230129.htm"
