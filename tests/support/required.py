"""A test short of an outside service: skipped, naming what is missing, or failed when the
test command requires that service (``INGEST_REQUIRE_<SERVICE>=1``: CI, where the project
installs every one of them)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(required_by: str, why: str) -> NoReturn:
    """Skip for ``why``, or fail when the variable ``required_by`` is ``1``."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{why} (required here: {required_by}=1)")
    pytest.skip(why)
