"""The one base of every config table, for every module of the core's schema."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """The one base of every config table: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
