"""The base of every typed config: an unknown key is an error, never silently ignored.

A misspelt key in serve_config.yaml, a Serve `user_config` or the k8s profile would
otherwise be dropped and its default used: the deploy must refuse it and name it instead.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FrozenModel(StrictModel):
    """Also immutable: live knobs and the production profile are swapped whole, never edited."""

    model_config = ConfigDict(extra="forbid", frozen=True)
