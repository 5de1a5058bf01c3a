"""``package_logger_kept`` undoes what ``configure()`` does to the package logger, so a test
calling the action in-process leaves ``caplog`` working for the files after it."""

from __future__ import annotations

import logging

from observer_ci.core.logs import configure, logger
from tests.support.logging_state import package_logger_kept


def test_configure_inside_is_undone_and_caplog_sees_records_after(caplog):
    with package_logger_kept():  # the outer one leaves this process's logger as found
        # as a fresh process has it: an earlier test in this worker may have configured it
        logger.handlers[:] = [h for h in logger.handlers if not getattr(h, "_observer_ci", False)]
        logger.propagate = True
        before = (list(logger.handlers), logger.propagate, logger.level)
        with package_logger_kept():
            configure()
            assert logger.propagate is False and len(logger.handlers) == len(before[0]) + 1
        assert (list(logger.handlers), logger.propagate, logger.level) == before
        caplog.set_level(logging.INFO, logger="observer_ci")
        logger.info("seen by caplog")
        assert "seen by caplog" in caplog.messages
