"""What making a boto3 client costs in CPU: a plain session's against one of
app.adapters.aws_session (which shares botocore's parsed service models in a process).

    .venv/bin/python -m loadtest.client_cost --rounds 5

In one process, rounds alternate the two ways; each round makes `--clients` DynamoDB clients
one way, timed with the process's CPU clock. No server is called. Prints each way's median
CPU-ms a client with its min-max over the rounds, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

LOCAL = {
    "endpoint_url": "http://127.0.0.1:1",
    "region_name": "us-east-1",
    "aws_access_key_id": "local",
    "aws_secret_access_key": "local",
}


def _plain() -> Any:
    import boto3

    return boto3.session.Session().client("dynamodb", **LOCAL)


def _shared() -> Any:
    from app.adapters.aws_session import new_session

    return new_session().client("dynamodb", **LOCAL)


WAYS: dict[str, Callable[[], Any]] = {"plain session": _plain, "shared loader": _shared}


def measure(rounds: int, clients: int) -> dict[str, list[float]]:
    """CPU-ms a client, per way and round, the ways interleaved within every round."""
    for make in WAYS.values():
        make()  # imports and the shared loader's first parse, outside the rounds
    results: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way, make in WAYS.items():
            started = time.process_time()
            for _ in range(clients):
                make()
            results[way].append((time.process_time() - started) * 1000 / clients)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10, help="per way and round")
    args = parser.parse_args(argv)
    results = measure(args.rounds, args.clients)
    for way, values in results.items():
        print(
            f"{way}: {statistics.median(values):.1f} CPU-ms a client "
            f"[{min(values):.1f}-{max(values):.1f}] over {len(values)} rounds"
        )
    medians = [statistics.median(v) for v in results.values()]
    print(f"shared / plain: {medians[1] / medians[0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
