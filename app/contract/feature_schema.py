"""Feature schema: names, kinds, defaults and order of the player features a version expects.

This is the one place where a stored player record (a DynamoDB item, or a plain dict during
training and seeding) becomes the numeric row the members score. Missing or malformed values
fall back to the schema default instead of failing the request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

FeatureValue = float | int | str


class FeatureSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    kind: Literal["numeric", "category"]
    default: float | str
    # For categories: the encoded value is the index into this list.
    categories: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _default_fits_kind(self) -> FeatureSpec:
        if self.kind == "category":
            if not self.categories or self.default not in self.categories:
                raise ValueError(f"{self.name}: category default must be one of its categories")
        elif isinstance(self.default, str):
            raise ValueError(f"{self.name}: numeric default must be a number")
        return self

    def encode(self, value: Any) -> float:
        """Encode one raw value; anything missing or unusable becomes the default."""
        if self.kind == "category":
            label = value if isinstance(value, str) and value in self.categories else self.default
            return float(self.categories.index(label))
        try:
            number = float(value)
        except (TypeError, ValueError):
            return float(self.default)
        return number if math.isfinite(number) else float(self.default)


class FeatureSchema(BaseModel):
    """Player features (from the feature store) followed by offer features (from the catalog)."""

    model_config = ConfigDict(frozen=True)

    version: str
    player_features: tuple[FeatureSpec, ...] = Field(min_length=1)
    offer_features: tuple[str, ...] = Field(min_length=1)

    @property
    def player_width(self) -> int:
        return len(self.player_features)

    @property
    def row_width(self) -> int:
        return len(self.player_features) + len(self.offer_features)

    @property
    def column_names(self) -> list[str]:
        return [f.name for f in self.player_features] + list(self.offer_features)

    def candidate_rows(self, player_rows: np.ndarray, offer_features: np.ndarray) -> np.ndarray:
        """The matrix members score: every player paired with every offer, player-major.

        Row i*K + k is player i's encoded features followed by offer k's features: the column
        order members are trained on and served with.
        """
        players = np.atleast_2d(player_rows).astype(np.float32, copy=False)
        offers = np.atleast_2d(offer_features).astype(np.float32, copy=False)
        if players.shape[1] != self.player_width or offers.shape[1] != len(self.offer_features):
            raise ValueError(
                f"expected ({self.player_width},) player and ({len(self.offer_features)},) "
                f"offer features, got {players.shape} and {offers.shape}"
            )
        n, k = players.shape[0], offers.shape[0]
        out = np.empty((n, k, self.row_width), dtype=np.float32)
        out[:, :, : self.player_width] = players[:, None, :]
        out[:, :, self.player_width :] = offers[None, :, :]
        return out.reshape(n * k, self.row_width)

    def encode_record(self, record: Mapping[str, Any]) -> np.ndarray:
        """Encode a plain {name: value} player record into a float32 row."""
        return np.array([f.encode(record.get(f.name)) for f in self.player_features], np.float32)

    def encode_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        out = np.empty((len(records), self.player_width), np.float32)
        for i, record in enumerate(records):
            out[i] = self.encode_record(record)
        return out

    def decode_item(
        self,
        item: Mapping[str, Mapping[str, Any]],
        overrides: Mapping[str, FeatureValue] | None = None,
    ) -> np.ndarray:
        """Decode a low-level DynamoDB item ({"level": {"N": "12"}, ...}) into a float32 row.

        `overrides` are fresher values from the request itself (e.g. this session's platform).
        """
        record = {f.name: _attribute_value(item.get(f.name)) for f in self.player_features}
        if overrides:
            record.update(overrides)
        return self.encode_record(record)

    def to_item_attributes(self, record: Mapping[str, FeatureValue]) -> dict[str, dict[str, str]]:
        """Low-level DynamoDB attributes for a player record (the inverse of decode_item)."""
        attributes: dict[str, dict[str, str]] = {}
        for spec in self.player_features:
            if spec.name not in record:
                continue  # absent attributes are legal: decoding fills the default
            value = record[spec.name]
            attributes[spec.name] = (
                {"S": value} if isinstance(value, str) else {"N": repr(float(value))}
            )
        return attributes


def _attribute_value(attribute: Mapping[str, Any] | None) -> Any:
    """Plain value of a low-level attribute; None for absent, NULL or unsupported types."""
    if not attribute:
        return None
    if "N" in attribute:
        return attribute["N"]
    if "S" in attribute:
        return attribute["S"]
    if "BOOL" in attribute:
        return 1.0 if attribute["BOOL"] else 0.0
    return None
