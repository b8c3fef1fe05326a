"""The admission middleware gives a login's slot back as its answer's last bytes go out:
HAProxy's maxconn equals the bound, and once HAProxy has the answer it may forward the next
login at once, which must find the slot free. Order is asserted, not time."""

import asyncio

import pytest

from app.api.admission import AdmissionMiddleware
from app.core.admission import AdmissionGate

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

SCOPE = {"type": "http", "method": "POST", "path": "/g/v/v1/offers", "headers": []}


async def receive():
    return {"type": "http.request", "body": b"{}", "more_body": False}


def answer(*bodies: bytes):
    """An app answering 200 with `bodies` as the response's chunks, in order."""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i, body in enumerate(bodies):
            await send(
                {"type": "http.response.body", "body": body, "more_body": i < len(bodies) - 1}
            )

    return app


def run(middleware, scope=SCOPE):
    sent = []

    async def send(message):
        sent.append((message["type"], message.get("status"), middleware.gate.in_flight))

    asyncio.run(middleware(dict(scope), receive, send))
    return sent


def test_the_slot_is_free_when_the_answer_goes_out():
    gate = AdmissionGate(1)
    seen = []

    async def send(message):
        if message["type"] == "http.response.body" and not message.get("more_body"):
            # What HAProxy does on receiving the answer: the next login, at once.
            seen.append(gate.try_enter())
            gate.leave()

    middleware = AdmissionMiddleware(answer(b"{}"), gate=gate, retry_after_s=1)
    asyncio.run(middleware(dict(SCOPE), receive, send))
    assert seen == [True]
    assert gate.in_flight == 0 and gate.admitted == 2 and gate.refused == 0


def test_a_streamed_answer_holds_the_slot_until_its_last_chunk():
    middleware = AdmissionMiddleware(
        answer(b"a", b"b", b"c"), gate=AdmissionGate(4), retry_after_s=1
    )
    sent = run(middleware)
    # (message, status, logins in flight as the message went out)
    assert sent == [
        ("http.response.start", 200, 1),
        ("http.response.body", None, 1),
        ("http.response.body", None, 1),
        ("http.response.body", None, 0),
    ]


def test_a_login_that_fails_before_answering_gives_its_slot_back_once():
    async def broken(scope, receive, send):
        raise RuntimeError("bug")

    gate = AdmissionGate(1)
    with pytest.raises(RuntimeError, match="bug"):
        run(AdmissionMiddleware(broken, gate=gate, retry_after_s=1))
    assert gate.in_flight == 0
    # The next login is admitted (the slot was not given back twice, nor kept).
    assert run(AdmissionMiddleware(answer(b"{}"), gate=gate, retry_after_s=1))[-1][2] == 0
    assert gate.in_flight == 0 and gate.admitted == 2


def test_past_the_bound_the_refusal_goes_out_without_touching_the_slots():
    gate = AdmissionGate(1)
    assert gate.try_enter()
    sent = run(AdmissionMiddleware(answer(b"{}"), gate=gate, retry_after_s=1))
    assert sent == [("http.response.start", 503, 1), ("http.response.body", None, 1)]
    assert (gate.in_flight, gate.refused) == (1, 1)


def test_answers_tell_the_edge_the_least_room_until_the_replica_has_measured():
    from app.core.service_time_limit import MIN_SAMPLES, ServiceTimeLimit

    limit = ServiceTimeLimit(ceiling=1, budget_s=1.0, queue_wait_s=0.5, loop_lag_s=lambda: 0.0)
    gate = AdmissionGate(1, limit=limit)
    headers = []

    async def send(message):
        if message["type"] == "http.response.start":
            headers.append(dict(message["headers"]).get(b"x-offers-queue-room"))

    middleware = AdmissionMiddleware(answer(b"{}"), gate=gate, retry_after_s=1)
    for _ in range(MIN_SAMPLES):
        asyncio.run(middleware(dict(SCOPE), receive, send))
    # Every login answered was timed; until there are enough of them the room is 1.
    assert headers[:MIN_SAMPLES] == [b"1"] * MIN_SAMPLES
    gate.try_enter()  # the slot held: the next login is refused, and says the room too
    asyncio.run(middleware(dict(SCOPE), receive, send))
    assert headers[-1] is not None and int(headers[-1]) > 1  # microsecond logins: deep
    assert gate.refused == 1


def test_only_answered_logins_teach_the_bound_their_service_time():
    """A refusal or a bad request is answered in microseconds: counted as service times,
    they would make the replica look faster than it is and the edge queue more for it."""
    from app.core.service_time_limit import MIN_SAMPLES, ServiceTimeLimit

    limit = ServiceTimeLimit(ceiling=1, budget_s=1.0, queue_wait_s=0.5, loop_lag_s=lambda: 0.0)
    gate = AdmissionGate(1, limit=limit)

    def answering(status: int):
        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"{}", "more_body": False})

        return AdmissionMiddleware(app, gate=gate, retry_after_s=1)

    for status in (401, 413, 422, 503) * MIN_SAMPLES:
        run(answering(status))
    assert limit.queue_room() == 1  # nothing learned from them: the least room
    for _ in range(MIN_SAMPLES):
        run(answering(200))
    assert limit.queue_room() > 1
    assert gate.in_flight == 0
