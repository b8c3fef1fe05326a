"""Whether an HTTP endpoint answers: the waits that start a system, a cluster or a test's
application, and the checks before a run."""

from __future__ import annotations

import time
from collections.abc import Callable

import requests


def is_ok(status: int) -> bool:
    return status == 200


def answers(url: str, timeout_s: float = 2.0, accept: Callable[[int], bool] = is_ok) -> bool:
    """GET `url`: whether it answered within `timeout_s` with a status `accept` takes (by
    default 200). No answer (refused, reset, timed out) is False, not an error."""
    try:
        return accept(requests.get(url, timeout=timeout_s).status_code)
    except requests.RequestException:
        return False


def wait_answers(url: str, timeout_s: float, poll_s: float = 0.5) -> None:
    """Poll `url` until it answers 200; TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not answers(url):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 within {timeout_s:.0f} s")
        time.sleep(poll_s)
