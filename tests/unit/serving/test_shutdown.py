"""On graceful shutdown Serve calls the deployments' __del__: they must release their work."""

from __future__ import annotations

import asyncio

import pytest

from app.serving.member_group import MemberGroupDeployment
from app.serving.supervisor import Supervisor

pytestmark = [
    pytest.mark.unit,
    pytest.mark.untimed,
    # Serve's ingress wrapper makes __del__ async; when the garbage collector later calls it
    # on these test objects, Python warns that the coroutine was never awaited.
    pytest.mark.filterwarnings("ignore:coroutine .*__del__' was never awaited:RuntimeWarning"),
]


class Closable:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_supervisor_shutdown_closes_the_store_coalescer_and_inline_members_once():
    # The class Serve runs: @serve.ingress wraps ours, and its async __del__ (what Serve
    # awaits on shutdown) must reach our own.
    cls = Supervisor.func_or_class
    replica = cls.__new__(cls)  # the state __init__ leaves behind, without Ray
    replica._store, replica._coalescing, replica._closed = Closable(), Closable(), False
    replica._inline = Closable()  # the inline members' predict thread
    replica._service = Closable()  # writes its pending fallback tally
    asyncio.run(replica.__del__())
    asyncio.run(replica.__del__())  # a second call (the garbage collector) does nothing
    parts = (replica._store, replica._coalescing, replica._inline, replica._service)
    assert [p.closed for p in parts] == [1, 1, 1, 1]


def test_supervisor_that_never_finished_starting_shuts_down_quietly():
    cls = Supervisor.func_or_class
    asyncio.run(cls.__new__(cls).__del__())  # no store yet: nothing to close, no error


def test_member_group_shutdown_stops_its_predict_thread():
    cls = MemberGroupDeployment.func_or_class
    replica = cls.__new__(cls)
    replica._group = Closable()
    replica.__del__()
    assert replica._group.closed == 1
