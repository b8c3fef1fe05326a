"""One logger naming scheme: every module logs to `logging.getLogger(__name__)` ("app....").

Inside a Serve replica, Serve configures only its own "ray.serve" logger (its handlers write
the replica's log file in Serve's format, and it does not propagate). Replicas hand the same
handlers to the "app" logger, so the service's lines land in the same file, in the same format,
as Serve's own; outside Serve (tests, the legacy server) "app" logs like any library.
"""

from __future__ import annotations

import logging

SERVICE_LOGGER = "app"
SERVE_LOGGER = "ray.serve"


def route_service_logs_to_serve() -> None:
    serve_logger = logging.getLogger(SERVE_LOGGER)
    if not serve_logger.handlers:  # not inside a configured replica: leave logging alone
        return
    service_logger = logging.getLogger(SERVICE_LOGGER)
    service_logger.handlers = list(serve_logger.handlers)
    service_logger.setLevel(serve_logger.level)
    service_logger.propagate = False
