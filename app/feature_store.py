"""Player features from DynamoDB: one GetItem per login, decoded through the version's schema.

Key design: the partition key `pk` is "<game>#<player_id>", so the hot path is a single
GetItem and one table serves every game. Offline jobs read it with parallel Scan segments.
The same code talks to AWS and to the local dynalite server; only the endpoint differs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import numpy as np
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from app.feature_schema import FeatureSchema, FeatureValue
from app.settings import Settings

PARTITION_KEY = "pk"


def player_key(game: str, player_id: str) -> str:
    return f"{game}#{player_id}"


def make_client(settings: Settings) -> Any:
    """A DynamoDB client whose timeouts and retries are botocore's, configured from settings."""
    config = Config(
        connect_timeout=settings.dynamodb_connect_timeout_s,
        read_timeout=settings.dynamodb_read_timeout_s,
        retries={"max_attempts": settings.dynamodb_max_attempts, "mode": "standard"},
        max_pool_connections=settings.dynamodb_max_pool_connections,
    )
    endpoint = str(settings.dynamodb_endpoint_url) if settings.dynamodb_endpoint_url else None
    return boto3.session.Session().client(
        "dynamodb", region_name=settings.aws_region, endpoint_url=endpoint, config=config
    )


def table_definition(table: str) -> dict[str, Any]:
    """CreateTable arguments for the feature table (used locally; production uses IaC)."""
    return {
        "TableName": table,
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


class FeatureStoreUnavailable(RuntimeError):
    """DynamoDB could not answer (error, throttling or timeout after botocore's retries)."""


class FeatureStore:
    """Reads one game's player rows without blocking the caller's event loop."""

    def __init__(
        self,
        settings: Settings,
        schema: FeatureSchema,
        game: str,
        *,
        client: Any = None,
    ) -> None:
        self._schema = schema
        self._game = game
        self._table = settings.dynamodb_table
        self._client = client if client is not None else make_client(settings)
        # boto3 is synchronous; a bounded pool sized like the HTTP connection pool keeps
        # reads off the event loop without queueing more calls than there are connections.
        self._executor = ThreadPoolExecutor(
            max_workers=settings.dynamodb_max_pool_connections, thread_name_prefix="features"
        )
        # Only fetch the attributes the schema decodes (plus the key, so a player whose item
        # holds none of them still reads as known); "#fN" placeholders sidestep DynamoDB's
        # reserved words (e.g. LEVEL).
        names = [PARTITION_KEY] + [f.name for f in schema.player_features]
        self._projection = ", ".join(f"#f{i}" for i in range(len(names)))
        self._attribute_names = {f"#f{i}": name for i, name in enumerate(names)}

    def _get_item(self, player_id: str) -> Mapping[str, Any] | None:
        try:
            response = self._client.get_item(
                TableName=self._table,
                Key={PARTITION_KEY: {"S": player_key(self._game, player_id)}},
                ProjectionExpression=self._projection,
                ExpressionAttributeNames=self._attribute_names,
            )
        except (BotoCoreError, ClientError) as exc:
            raise FeatureStoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return response.get("Item")

    async def player_row(
        self, player_id: str, overrides: Mapping[str, FeatureValue] | None = None
    ) -> np.ndarray | None:
        """The player's encoded feature row, or None if the player is unknown.

        Raises:
            FeatureStoreUnavailable: DynamoDB failed after botocore's retries.
        """
        loop = asyncio.get_running_loop()
        item = await loop.run_in_executor(self._executor, self._get_item, player_id)
        if item is None:
            return None
        return self._schema.decode_item(item, overrides)
