"""A root the replay store (and a run's outputs) live under, checked at config load."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def no_glob_characters(path: str) -> str:
    """The replay store finds its files by a glob under its root, so a root holding a glob character would
    match none of them (or another run's): refused at load."""
    if any(char in path for char in "*?[]"):
        raise ValueError(f"{path!r} holds a glob character (* ? [ ]): the replay store under it could not "
                         "find its own files")
    return path


StorePath = Annotated[str, AfterValidator(no_glob_characters)]
