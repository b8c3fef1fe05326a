"""The service's log lines reach the replica's file at once, even where Serve buffers its own."""

from __future__ import annotations

import logging
import logging.handlers

import pytest

from app.serving.logs import service_handlers

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_warning_is_written_at_once_where_serve_buffers_1000_records() -> None:
    file = Collect()
    buffered = logging.handlers.MemoryHandler(1000, flushLevel=logging.ERROR, target=file)
    buffered.addFilter(lambda record: "secret" not in record.getMessage())
    logger = logging.getLogger("test-service-logs")
    logger.propagate = False
    logger.handlers = service_handlers([buffered])
    logger.warning("model store down: serving the node cache's copy")
    logger.warning("a secret line")  # Serve's filters still apply
    assert file.lines == ["model store down: serving the node cache's copy"]
    # Serve's own buffered handler is left as it was.
    assert buffered.buffer == []


def test_handlers_without_a_buffer_are_handed_over_as_they_are() -> None:
    plain = logging.StreamHandler()
    assert service_handlers([plain]) == [plain]
