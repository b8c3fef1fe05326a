"""Offline scoring of a game's whole player base with Ray Data (`offers-batch`, `make batch`).

DynamoDB parallel Scan (one read task per segment, paced) -> an actor pool holding every
member (one candidate matrix and one predict per member per batch of players) -> Parquet,
then the precomputed-offers snapshot supervisors answer from when the online path fails.
"""
