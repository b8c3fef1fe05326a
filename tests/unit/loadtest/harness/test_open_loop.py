"""The open-loop driver's bookkeeping: every login counted once, schedules as asked."""

import itertools
import threading

import pytest

from loadtest.harness.open_loop import (
    Caller,
    Shot,
    burst,
    constant_rate,
    constant_rate_until,
    run_client,
    summarize,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def shot(t, ms, status, personalized=True, reason=None, retry_after=None):
    return Shot(t, ms, status, personalized, reason, retry_after)


def test_summary_separates_refusals_errors_and_lost_logins():
    shots = [
        shot(0.0, 40, 200),
        shot(0.1, 60, 200, False, "quorum"),
        shot(0.2, 900, 200),
        shot(0.3, 5, 503, retry_after="1"),
        shot(0.4, 8, 503),  # a refusal without Retry-After is counted as such
        shot(0.5, 30, 500),
        shot(0.6, 10_000, None),
    ]
    s = summarize(shots)
    assert (s["sent"], s["answered"], s["no_answer"]) == (7, 6, 1)
    assert s["status_counts"] == {"200": 3, "500": 1, "503": 2, "no_answer": 1}
    assert s["http_5xx_non503"] == 1
    assert s["refused_without_retry_after"] == 1
    # Latency percentiles cover accepted (non-503) answers only; refusals have their own.
    assert s["client_max_ms"] == 900
    assert s["refusal_p99_ms"] == 8
    assert s["fallback_share_by_reason"] == {"quorum": pytest.approx(1 / 3, abs=1e-4)}


class ClosesFirst:
    """A server that closes the first connection it gets without answering (as HAProxy
    does when every replica of a version died under a login) and answers `503` after."""

    def __init__(self):
        self.connections = 0

    async def serve(self, reader, writer):
        self.connections += 1
        await reader.readuntil(b"\r\n\r\n")
        if self.connections > 1:
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
        writer.close()


async def one_login(server: ClosesFirst):
    import asyncio

    import aiohttp

    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with listener, aiohttp.ClientSession() as session:
        return await Caller(f"http://127.0.0.1:{port}/g", "g").login(session, "p0000001")


def test_a_login_closed_unanswered_stays_unanswered_and_is_resent_once():
    server = ClosesFirst()

    login = run_client(one_login(server))

    assert login.status is None
    assert login.error.startswith("ServerDisconnectedError")
    assert (login.resend_status, server.connections) == (503, 2)
    assert login.resend_ms is not None
    s = summarize([login, shot(0.1, 10, 200)])
    assert s["no_answer"] == 1
    assert s["resent_after_close"]["status_counts"] == {"503": 1}


class NeverAnswers:
    def __init__(self):
        self.connections = 0

    async def serve(self, reader, writer):
        import asyncio

        self.connections += 1
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(5)  # past the client's timeout
        writer.close()


async def one_login_with_timeout(server: NeverAnswers):
    import asyncio

    import aiohttp

    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession() as session:
        caller = Caller(f"http://127.0.0.1:{port}/g", "g", timeout_s=0.2)
        login = await caller.login(session, "p0000001")
    listener.close()
    return login


def test_a_login_that_times_out_is_a_hang_and_is_not_resent():
    server = NeverAnswers()

    login = run_client(one_login_with_timeout(server))

    assert login.status is None and login.error.startswith("TimeoutError")
    assert (login.resend_status, login.resend_ms, server.connections) == (None, None, 1)
    assert summarize([login])["resent_after_close"]["resent"] == 0


def test_schedules():
    assert constant_rate(4, 1.5) == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert burst(3) == [0.0, 0.0, 0.0]


def test_a_rate_until_stopped_keeps_its_pace_and_ends_at_the_next_send():
    stop = threading.Event()
    schedule = constant_rate_until(4, stop)
    assert list(itertools.islice(schedule, 3)) == [0.0, 0.25, 0.5]
    stop.set()  # read at each send: nothing more after it
    assert list(itertools.islice(schedule, 5)) == []


@pytest.mark.parametrize(("loop", "kind"), [("uvloop", "uvloop.Loop"), ("asyncio", "asyncio")])
def test_the_client_runs_on_the_loop_it_is_given(loop, kind):
    import asyncio

    async def main() -> str:
        running = type(asyncio.get_running_loop())
        return f"{running.__module__}.{running.__qualname__}"

    assert run_client(main(), loop).startswith(kind)


def test_the_collector_is_paused_while_the_client_runs_and_back_after():
    import gc

    async def main() -> bool:
        return gc.isenabled()

    assert gc.isenabled()
    assert run_client(main()) is False
    assert gc.isenabled()


def test_an_unknown_client_loop_is_refused():
    async def main() -> None:
        return None

    with pytest.raises(ValueError, match="unknown client loop 'trio'"):
        run_client(main(), "trio")


class RefusesAtOnce:
    async def serve(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()


def test_a_send_the_client_itself_held_up_is_counted_late():
    """The client's own stall (here its player picker blocks the loop for 0.3 s at the second
    login) shows in how late the logins after it were sent, not only in their latency."""
    import asyncio
    import time

    from loadtest.harness.open_loop import open_loop

    def players(i: int) -> str:
        if i == 1:
            time.sleep(0.3)
        return f"p{i:07d}"

    async def main() -> list[Shot]:
        listener = await asyncio.start_server(RefusesAtOnce().serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            caller = Caller(f"http://127.0.0.1:{port}/g", "g")
            return await open_loop(caller, [0.0, 0.05, 0.10, 0.15], players)

    shots = sorted(run_client(main()), key=lambda s: s.sent_s)
    assert [s.status for s in shots] == [503] * 4
    assert all(s.late_ms is not None for s in shots)
    # Due at 0.10 and 0.15 s, sent after the 0.3 s block that began at 0.05 s at the earliest.
    assert shots[2].late_ms >= 250 - 1 and shots[3].late_ms >= 200 - 1
    assert summarize(shots)["client_late_max_ms"] >= 250 - 1
