"""The supervisor's front door: stamp each login's arrival, refuse it at once past the gate.

A raw ASGI middleware rather than a route dependency: a refusal must cost microseconds, so it
is decided before FastAPI reads or validates the body, and the stamp is taken before anything
else this replica does for the request.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.admission import (
    OVERLOADED_DETAIL,
    QUEUE_ROOM_HEADER,
    AdmissionGate,
    EdgeArrival,
    parse_request_start,
)

OFFERS_PATH_SUFFIX = "/v1/offers"
ARRIVAL_STATE_KEY = "edge_arrival"
REQUEST_START_HEADER = b"x-request-start"
_ROOM_HEADER = QUEUE_ROOM_HEADER.lower().encode()


def retry_after_value(retry_after_s: float) -> str:
    # The header takes whole seconds; round up so a caller never comes back too early.
    return str(max(math.ceil(retry_after_s), 0))


def refusal_headers(retry_after_s: float) -> dict[str, str]:
    return {"Retry-After": retry_after_value(retry_after_s)}


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, *, gate: AdmissionGate, retry_after_s: float) -> None:
        self.app = app
        self.gate = gate
        self._refusal_body = json.dumps({"detail": OVERLOADED_DETAIL}).encode()
        self._refusal_headers = [
            (b"content-type", b"application/json"),
            (b"retry-after", retry_after_value(retry_after_s).encode()),
            (b"content-length", str(len(self._refusal_body)).encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].endswith(OFFERS_PATH_SUFFIX)
        ):
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        if not self.gate.try_enter():
            headers = self._refusal_headers + self._room()
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": self._refusal_body})
            return
        held = True
        status = 0

        async def send_and_leave(message: Message) -> None:
            # The slot is given back as the answer's last bytes go out, not after: once
            # HAProxy has the answer it counts the slot free (its maxconn equals this bound)
            # and may forward the next login at once, which must find room here. Leaving
            # later, after the send's awaits, let this loop take that login first and
            # refuse it with a slot about to free.
            # Only a login answered (200: personalized or a flagged fallback) is a service
            # time the adaptive bound may learn from: a 401, 413, 422 or an early 503 is
            # answered in microseconds and would make the replica look faster than it is.
            nonlocal held, status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), *self._room()]}
            if held and message["type"] == "http.response.body" and not message.get("more_body"):
                held = False
                self.gate.leave(time.perf_counter() - arrived if status == 200 else None)
            await send(message)

        try:
            waited = parse_request_start(_header(scope, REQUEST_START_HEADER), time.time())
            state: dict[str, Any] = scope.setdefault("state", {})
            state[ARRIVAL_STATE_KEY] = EdgeArrival(
                started=arrived - (waited or 0.0), waited_before_ms=(waited or 0.0) * 1000.0
            )
            await self.app(scope, receive, send_and_leave)
        finally:
            if held:  # no answer sent (an error, or the client gone)
                self.gate.leave()

    def _room(self) -> list[tuple[bytes, bytes]]:
        room = self.gate.queue_room()
        return [] if room is None else [(_ROOM_HEADER, str(room).encode())]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None
