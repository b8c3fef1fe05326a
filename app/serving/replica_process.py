"""What every replica of the service does first, in its own process."""

from __future__ import annotations

import logging

from app.adapters.cpu_priority import give_way
from app.config.settings import get_settings
from app.serving.logs import route_service_logs_to_serve

logger = logging.getLogger(__name__)


def prepare_replica_process() -> None:
    """Log where Serve's own lines go, then give way to the edge on the CPU (cpu_priority)."""
    route_service_logs_to_serve()
    niceness = get_settings().replica_niceness
    raised = give_way(niceness)
    logger.info("%d threads raised to niceness %d", raised, niceness)
