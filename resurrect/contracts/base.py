"""The base of every contract: strict at the edges."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    """Base of every contract: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")
