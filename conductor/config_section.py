"""The base of every config section: unknown keys fail (with their dotted path), assignments are checked, and
no number is infinite or NaN (a rate limit or a price of .inf would pass every bound and break what uses it)."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)


def shown_env_name(name: str) -> str:
    """An env var's name as messages print it: a conventional upper-case name as is; anything else (a key
    pasted where its variable's name goes, e.g. ``gsk_...`` or ``hf_...``, fits the name pattern too) hidden."""
    return name if name.isupper() else "<not shown: it has lower-case letters, as keys do>"
