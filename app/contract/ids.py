"""Identifier formats shared by training, serving config and the API.

Ids travel into DynamoDB keys, deployment names, file paths and logs: their length and
alphabet are bounded everywhere they enter.
"""

from __future__ import annotations

GAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"
PROFILE_PATTERN = r"^[a-z0-9_-]{1,32}$"
MEMBER_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,47}$"
PLAYER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
