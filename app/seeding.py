"""Create the feature table and load the synthetic player population into it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from app.feature_store import PARTITION_KEY, player_key, table_definition

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


def player_item(game: str, record: dict[str, Any], schema_version: str, updated_at: str) -> dict:
    """Low-level DynamoDB item for one player record from the population generator."""
    item: dict[str, dict[str, str]] = {
        PARTITION_KEY: {"S": player_key(game, record["player_id"])},
        "game": {"S": game},
        "player_id": {"S": record["player_id"]},
        "schema_version": {"S": schema_version},
        "updated_at": {"S": updated_at},
    }
    for name, value in record.items():
        if name == "player_id" or value is None:
            continue
        item[name] = {"S": value} if isinstance(value, str) else {"N": repr(float(value))}
    return item


def batch_write(client: Any, table: str, items: Iterable[dict]) -> int:
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


def _chunks(items: Iterable[dict], size: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
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
    return response.get("Item")


def seed_game(
    client: Any, table: str, game: str, players: int, *, seed: int, force: bool = False
) -> int:
    """Load `players` synthetic players of `game`; skipped if the table already holds them.

    Returns the number of players written (0 when the existing seed already matches).
    """
    from models.population import feature_schema, generate_players

    marker = seed_marker(client, table, game)
    if marker and not force:
        same_seed = marker.get("population_seed", {}).get("N") == str(seed)
        if same_seed and int(marker.get("players", {}).get("N", "0")) >= players:
            return 0
    schema_version = feature_schema().version
    updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    records = generate_players(game, players, seed=seed)
    written = batch_write(
        client, table, (player_item(game, r, schema_version, updated_at) for r in records)
    )
    # The marker goes last: an interrupted seed is redone on the next run.
    client.put_item(
        TableName=table,
        Item={
            PARTITION_KEY: {"S": f"{SEED_MARKER_PREFIX}#{game}"},
            "players": {"N": str(players)},
            "population_seed": {"N": str(seed)},
            "schema_version": {"S": schema_version},
            "updated_at": {"S": updated_at},
        },
    )
    return written
