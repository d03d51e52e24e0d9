"""The base of every config section: unknown keys fail (with their dotted path), assignments are checked."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
