"""Fixtures shared by the single-process tests (run inside pytest)."""
import pytest

import mxhorovod as hvd


@pytest.fixture
def hvd_single():
    """mxhorovod started in this process (size 1) for one test, shut down after it."""
    hvd.init()
    try:
        yield
    finally:
        hvd.shutdown()
