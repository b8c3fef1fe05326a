"""What every replica of the service does first, in its own process."""

from __future__ import annotations

import logging

from app.adapters.cpu_priority import give_way, raylet_gives_way
from app.config.settings import get_settings
from app.serving.logs import route_service_logs_to_serve

logger = logging.getLogger(__name__)


def prepare_replica_process() -> None:
    """Log where Serve's own lines go, then give way to the edge on the CPU (cpu_priority),
    and have the node's raylet start what it starts next at Ray's worker niceness."""
    route_service_logs_to_serve()
    settings = get_settings()
    raised = give_way(settings.replica_niceness)
    logger.info("%d threads raised to niceness %d", raised, settings.replica_niceness)
    raised = raylet_gives_way(settings.raylet_niceness)
    logger.info("%d raylet threads raised to niceness %d", raised, settings.raylet_niceness)
