"""Where the real data for tests and benchmarks lives: ../shared/data beside the checkout, never copied in."""

import os
from pathlib import Path

from dspy_rag.files import REPO


def shared_data() -> Path:
    """$SHARED_DATA, else ../shared/data beside the checkout, else the workplace's /work/shared/data."""
    for candidate in (os.environ.get("SHARED_DATA"), REPO.parent / "shared" / "data", "/work/shared/data"):
        if candidate and Path(candidate, "nvidia-10k-fy2023").is_dir():
            return Path(candidate)
    raise FileNotFoundError("../shared/data not found; set SHARED_DATA to the folder holding nvidia-10k-fy2023/")


def tenk_filing() -> Path:
    return shared_data() / "nvidia-10k-fy2023" / "nvda-20230129.htm"
