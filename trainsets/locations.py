"""Where the real data for tests, benchmarks and the trainsets lives: ../shared/data, never copied in."""

import os
from pathlib import Path

from dspy_rag.errors import UserError
from dspy_rag.files import checkout

MARKER = "nvidia-10k-fy2023"  # a folder every copy of the shared data holds


def shared_data() -> Path:
    """$SHARED_DATA, else ../shared/data beside the checkout (when the code runs from one), else beside the working
    folder; a UserError where SHARED_DATA names a folder without the data, FileNotFoundError where none is found."""
    if named := os.environ.get("SHARED_DATA"):  # named, it is the one: never a silent fallback to another
        if not Path(named, MARKER).is_dir():
            raise UserError(f"SHARED_DATA={named} holds no {MARKER}/; set it to the shared data folder, or unset it")
        return Path(named)
    source = checkout()
    for candidate in (source.parent / "shared" / "data" if source else None, Path.cwd().parent / "shared" / "data"):
        if candidate and (candidate / MARKER).is_dir():
            return candidate
    raise FileNotFoundError(f"../shared/data not found; set SHARED_DATA to the folder holding {MARKER}/")


def tenk_filing() -> Path:
    return shared_data() / MARKER / "nvda-20230129.htm"
