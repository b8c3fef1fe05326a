"""boto3 sessions that share one botocore data loader per process.

A new boto3 session parses the service's JSON models again when it makes its first client
(DynamoDB's and S3's, ~0.2 s of CPU a client on this 2-core host: 45 clients were 8.5 s of
the integration tests' process). Sharing the loader parses them once per process. The
sessions stay separate (boto3's are not thread-safe); what they share is only ever read, as
every client of one session already shares it.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

_SESSIONS = threading.Lock()


@functools.cache
def _data_loader() -> Any:
    from botocore.loaders import create_loader

    # What a botocore session would make for itself: AWS_DATA_PATH is its `data_path`.
    return create_loader(os.environ.get("AWS_DATA_PATH"))


def new_session() -> Any:
    """A boto3 session of its own, with this process's shared data loader."""
    import boto3
    import botocore.session

    loader = _data_loader()
    core = botocore.session.get_session()
    core.register_component("data_loader", loader)
    with _SESSIONS:
        session = boto3.session.Session(botocore_session=core)
        # boto3 appends its own data folder to the loader of every session it makes: once
        # is enough for a shared one, whose list would otherwise grow a path a session.
        paths = loader.search_paths
        paths[:] = list(dict.fromkeys(paths))
    return session
