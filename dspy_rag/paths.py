"""The paths a user names, checked where they enter, before anything is looked up, read or written.

A name longer than the file system holds makes every lookup fail with ENAMETOOLONG, which `Path.exists()` and
its kin raise rather than answer; and a folder setting that names a file, or a place under one, fails only at
the first write, which may come after hours of work."""

import os
from pathlib import Path

from dspy_rag.errors import UserError

NAME_MAX = 255  # bytes in one part of a path, on the file systems of Linux and macOS
PATH_MAX = 4096  # bytes in a whole path
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


def shown(path: Path) -> str:
    """The path as an error line can hold it: a hostile one of thousands of characters is cut in the middle."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:60]}…{text[-40:]}"


def name_problem(path: Path) -> str | None:
    """Why no file system can hold `path`'s name, or None when one can."""
    if "\x00" in str(path):
        return f"{shown(path)!r} holds a NUL character, which no file name may; remove it"
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        return (f"{shown(path)}: a part of it is {longest} bytes long, over the {NAME_MAX} a file name may have; "
                "use a shorter name")
    if len(os.fsencode(path.absolute())) >= PATH_MAX:
        return f"{shown(path)} is over the {PATH_MAX} bytes a path may have; use a shorter one"
    return None


def in_system_folder(path: Path) -> bool:
    """`path` is /proc, /sys or /dev, or lies in one: the system's own, never a user's documents or data."""
    absolute = path.absolute()
    return any(absolute == folder or folder in absolute.parents for folder in SYSTEM_FOLDERS)


def folder_problem(path: Path, purpose: str) -> str | None:
    """Why `path` cannot be a folder `purpose` is kept in (a name too long, a system folder, a file or a place
    under one), or None when it can."""
    if problem := name_problem(path):
        return problem
    if in_system_folder(path):
        return f"{shown(path)} is in a system folder; name a folder of your own for {purpose}"
    absolute = path.absolute()
    for place in (absolute, *absolute.parents):
        if place.exists() and not place.is_dir():
            where = "is" if place == absolute else f"lies under {shown(place)}, which is"
            return f"{shown(path)} {where} a file, not a folder; name a folder for {purpose}"
    return None


def output_file(path: Path, what: str) -> Path:
    """`path`, or a UserError naming `what` when no file can be written there (a name too long, a folder, in a
    folder that cannot be one): checked before the work whose result it will hold, not after."""
    if problem := name_problem(path):
        raise UserError(f"{what} {problem}")
    if problem := folder_problem(path.parent, f"the file of {what}"):
        raise UserError(f"{what}: {problem}")
    if path.is_dir():
        raise UserError(f"{what} {shown(path)} is a folder; name a file in it")
    return path


def named(path: Path, what: str) -> Path:
    """`path`, or a UserError naming `what` (the option, setting or variable it came from) when no file system
    can hold its name."""
    if problem := name_problem(path):
        raise UserError(f"{what} {problem}")
    return path


def folder(path: Path, what: str, purpose: str) -> Path:
    """`path`, or a UserError naming `what` when it cannot be a folder for `purpose`."""
    if problem := folder_problem(path, purpose):
        raise UserError(f"{what}: {problem}")
    return path
