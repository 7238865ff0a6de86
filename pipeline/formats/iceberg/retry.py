"""Retrying catalog operations: which catalog and storage errors are retried (conflicts a
bounded number of times, an unreachable catalog until the catalog deadline,
``commit.catalogRetrySeconds``; the rest never), and the retry loop itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ServerError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    TooManyRequestsError,
)
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from pipeline.errors import CatalogUnavailableError, CommitError, PipelineError, one_line

__all__ = ["is_conflict", "is_retryable", "is_unavailable", "with_retries"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Storage errors that waiting does not heal: a few attempts, never the catalog deadline.
_PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def is_conflict(exc: BaseException) -> bool:
    """Retried a bounded number of times (``max_commit_attempts``)."""
    return isinstance(
        exc,
        (
            CommitFailedException,  # lost the optimistic-concurrency race
            TableAlreadyExistsError,  # someone created the table first
            *_PERMANENT_OS_ERRORS,
        ),
    )


def is_unavailable(exc: BaseException) -> bool:
    """The catalog (or storage) did not answer: retried until the catalog deadline."""
    if isinstance(exc, _PERMANENT_OS_ERRORS):
        return False
    if isinstance(
        exc,
        (
            CommitStateUnknownException,  # REST 5xx during commit: ancestry is checked first
            ServiceUnavailableError,
            ServerError,
            TooManyRequestsError,
            OSError,  # network (requests' errors are OSErrors too) or storage hiccups
        ),
    ):
        return True
    # SQL catalog: database down, locked or connection dropped (sqlalchemy is optional).
    return type(exc).__module__.startswith("sqlalchemy") and type(exc).__name__ in (
        "OperationalError",
        "InterfaceError",
    )


def is_retryable(exc: BaseException) -> bool:
    return is_conflict(exc) or is_unavailable(exc)


def with_retries(
    what: str,
    attempt_once: Callable[[], _T],
    *,
    table: str,
    catalog: str,
    catalog_retry_s: float,
    max_commit_attempts: int,
) -> _T:
    """Run ``attempt_once`` (``what`` of ``table``) until it succeeds: conflicts are
    retried ``max_commit_attempts`` times, an unreachable ``catalog`` (its description)
    for ``catalog_retry_s`` seconds; then a one-line CatalogUnavailableError/CommitError."""
    started = time.monotonic()
    conflicts = 0

    def stop(state: RetryCallState) -> bool:
        nonlocal conflicts
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is not None and is_unavailable(exc):
            return time.monotonic() - started >= catalog_retry_s
        conflicts += 1
        return conflicts >= max_commit_attempts

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is not None and is_unavailable(exc):
            waited = time.monotonic() - started
            log.warning(
                "%s unreachable during %s of %s (%s); waited %.0fs of %.0fs, retrying",
                catalog,
                what,
                table,
                one_line(exc),
                waited,
                catalog_retry_s,
            )
            return
        # one lost race is routine (a compaction or another commit moved main): INFO;
        # a run of them says something is wrong
        log.log(
            logging.INFO if state.attempt_number < 3 else logging.WARNING,
            "%s to %s: attempt %d failed (%s); retrying",
            what,
            table,
            state.attempt_number,
            one_line(exc) if exc is not None else "?",
        )

    retrying = Retrying(
        stop=stop,
        wait=wait_exponential(multiplier=0.05, max=2.0) + wait_random(0, 0.1),
        retry=retry_if_exception(is_retryable),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                return attempt_once()
    except PipelineError:
        raise
    except Exception as e:
        if is_unavailable(e):
            raise CatalogUnavailableError(
                f"{catalog} unreachable for "
                f"{time.monotonic() - started:.0f}s (limit commit.catalogRetrySeconds="
                f"{catalog_retry_s:g}) during {what} of {table}: {one_line(e)}"
            ) from e
        raise CommitError(f"{what} to {table} failed: {one_line(e)}") from e
    raise AssertionError("unreachable: tenacity either returns or raises")
