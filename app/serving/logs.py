"""One logger naming scheme: every module logs to `logging.getLogger(__name__)` ("app....").

Inside a Serve replica, Serve configures only its own "ray.serve" logger (its handlers write
the replica's log file in Serve's format, and it does not propagate). Replicas hand the same
handlers to the "app" logger, so the service's lines land in the same file, in the same format,
as Serve's own; outside Serve (tests, the legacy server) "app" logs like any library.

Without the buffer: with RAY_SERVE_THROUGHPUT_OPTIMIZED (app.config.ray_env), Serve's handler
is a MemoryHandler that holds 1,000 records (request-path logs) and flushes early only on an
ERROR. The service logs little and off the request path (start-up, knobs applied, a model
store that is down, a version added), and a warning held back until 1,000 more lines came is
a warning nobody sees: its lines go straight to the buffer's file, through its filters.
"""

from __future__ import annotations

import logging
import logging.handlers

SERVICE_LOGGER = "app"
SERVE_LOGGER = "ray.serve"


class Unbuffered(logging.Handler):
    """A MemoryHandler's filters and file, without its buffer."""

    def __init__(self, buffered: logging.handlers.MemoryHandler, target: logging.Handler) -> None:
        super().__init__()
        self.filters = list(buffered.filters)
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        self._target.handle(record)


def service_handlers(serve_handlers: list[logging.Handler]) -> list[logging.Handler]:
    """Serve's handlers for the service's lines, each buffered one written through."""
    out: list[logging.Handler] = []
    for handler in serve_handlers:
        if isinstance(handler, logging.handlers.MemoryHandler) and handler.target is not None:
            out.append(Unbuffered(handler, handler.target))
        else:
            out.append(handler)
    return out


def route_service_logs_to_serve() -> None:
    serve_logger = logging.getLogger(SERVE_LOGGER)
    if not serve_logger.handlers:  # not inside a configured replica: leave logging alone
        return
    service_logger = logging.getLogger(SERVICE_LOGGER)
    service_logger.handlers = service_handlers(list(serve_logger.handlers))
    service_logger.setLevel(serve_logger.level)
    service_logger.propagate = False
