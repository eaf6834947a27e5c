"""kazoo's threads log no traceback for a callback a lost session cut short."""

from __future__ import annotations

import logging

import annal.zk.client  # noqa: F401  (installs the filter)
import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.retry import RetryFailedError


@pytest.mark.parametrize("exc", [SessionExpiredError(), ConnectionLoss(), RetryFailedError("x")])
def test_a_session_loss_in_kazoos_threads_is_one_debug_line(
    caplog: pytest.LogCaptureFixture, exc: Exception
) -> None:
    for name in ("kazoo.handlers.threading", "kazoo.recipe.watchers"):
        caplog.clear()
        # the logger's own level too: a command run in this process may have
        # quieted kazoo (annal's CLI does, to report ZooKeeper in one line)
        with caplog.at_level(logging.INFO, logger=name):
            try:
                raise exc
            except Exception:
                logging.getLogger(name).exception("Exception in worker queue thread")
        assert caplog.records == []
        with caplog.at_level(logging.DEBUG, logger=name):
            try:
                raise exc
            except Exception:
                logging.getLogger(name).exception("Exception in worker queue thread")
        assert [r.levelname for r in caplog.records] == ["DEBUG"]
        assert caplog.records[0].exc_info is None
        assert type(exc).__name__ in caplog.text


def test_other_failures_keep_their_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        try:
            raise ValueError("a bug")
        except ValueError:
            logging.getLogger("kazoo.handlers.threading").exception("Exception in worker")
    assert caplog.records[0].levelname == "ERROR" and caplog.records[0].exc_info is not None
