"""Create the feature table and load the synthetic player population into it (no Ray)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from app.adapters.dynamodb import PARTITION_KEY, player_key, table_definition
from app.contract.feature_schema import FeatureSchema
from models.features import feature_schema
from models.population import POPULATION_SEED, generate_players

# A low-level DynamoDB item: attribute name -> {"S": ...} / {"N": ...}.
Item = dict[str, dict[str, str]]

BATCH_WRITE_LIMIT = 25  # DynamoDB's maximum items per BatchWriteItem
SEED_MARKER_PREFIX = "__seed__"


def ensure_table(client: Any, table: str) -> bool:
    """Create the feature table if it is absent; True if it was created."""
    try:
        client.describe_table(TableName=table)
        return False
    except client.exceptions.ResourceNotFoundException:
        pass
    try:
        client.create_table(**table_definition(table))
    except client.exceptions.ResourceInUseException:
        return False  # created concurrently by another process
    client.get_waiter("table_exists").wait(
        TableName=table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100}
    )
    return True


def player_item(
    game: str, schema: FeatureSchema, record: dict[str, Any], updated_at: str
) -> dict[str, dict[str, str]]:
    """Low-level DynamoDB item for one player record from the population generator."""
    return {
        PARTITION_KEY: {"S": player_key(game, record["player_id"])},
        "game": {"S": game},
        "player_id": {"S": record["player_id"]},
        "schema_version": {"S": schema.version},
        "updated_at": {"S": updated_at},
        # The one encoding of features into attributes, shared with decoding (None = absent).
        **schema.to_item_attributes({k: v for k, v in record.items() if v is not None}),
    }


def batch_write(client: Any, table: str, items: Iterable[Item]) -> int:
    """Write items in BatchWriteItem chunks, resubmitting what DynamoDB leaves unprocessed."""
    written = 0
    for chunk in _chunks(items, BATCH_WRITE_LIMIT):
        pending = {table: [{"PutRequest": {"Item": item}} for item in chunk]}
        # UnprocessedItems is part of the BatchWriteItem protocol (partial success under
        # throttling), not an error; botocore retries only whole failed calls.
        for attempt in range(10):
            response = client.batch_write_item(RequestItems=pending)
            pending = response.get("UnprocessedItems") or {}
            if not pending:
                break
            time.sleep(min(0.05 * 2**attempt, 1.0))
        else:
            raise RuntimeError(f"{table}: items still unprocessed after 10 rounds")
        written += len(chunk)
    return written


def _chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    chunk: list[Item] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def seed_marker(client: Any, table: str, game: str) -> dict[str, Any] | None:
    response = client.get_item(
        TableName=table, Key={PARTITION_KEY: {"S": f"{SEED_MARKER_PREFIX}#{game}"}}
    )
    marker: dict[str, Any] | None = response.get("Item")
    return marker


def seed_game(
    client: Any,
    table: str,
    game: str,
    players: int,
    *,
    seed: int = POPULATION_SEED,
    force: bool = False,
) -> int:
    """Load `players` synthetic players of `game`; skipped if the table already holds them.

    Returns the number of players written (0 when the existing seed already matches).
    """
    marker = seed_marker(client, table, game)
    if marker and not force:
        same_seed = marker.get("population_seed", {}).get("N") == str(seed)
        if same_seed and int(marker.get("players", {}).get("N", "0")) >= players:
            return 0
    schema = feature_schema()
    updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    records = generate_players(game, players, seed=seed)
    items = (player_item(game, schema, r, updated_at) for r in records)
    written = batch_write(client, table, items)
    # The marker goes last: an interrupted seed is redone on the next run.
    client.put_item(
        TableName=table,
        Item={
            PARTITION_KEY: {"S": f"{SEED_MARKER_PREFIX}#{game}"},
            "players": {"N": str(players)},
            "population_seed": {"N": str(seed)},
            "schema_version": {"S": schema.version},
            "updated_at": {"S": updated_at},
        },
    )
    return written
