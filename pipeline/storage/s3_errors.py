"""How the instant journal on S3 reads an object store's errors: which are retried, which
mean "refused, not applied", and the one line an operator sees.

botocore's ``ClientError`` is read by its ``response`` (code and HTTP status), so this
module needs no botocore import but for the connection errors.
"""

from __future__ import annotations

from pipeline.errors import CommitError

__all__ = [
    "JournalStoreError",
    "client_error_parts",
    "describe",
    "is_conflict",
    "is_connection_error",
    "is_precondition_failed",
    "retryable",
]

_RETRYABLE_CODES = frozenset(
    {
        "ConditionalRequestConflict",
        "OperationAborted",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
    }
)


class JournalStoreError(CommitError):
    """The object store refused or kept failing a journal operation."""

    code = "journal-store"


def client_error_parts(exc: BaseException) -> tuple[str, int] | None:
    """``(error code, HTTP status)`` of a botocore ClientError, else None."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def is_connection_error(exc: BaseException) -> bool:
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    return isinstance(exc, BotoConnectionError | HTTPClientError)


def is_conflict(exc: BaseException) -> bool:
    parts = client_error_parts(exc)
    return parts is not None and parts[1] == 409


def is_precondition_failed(exc: BaseException) -> bool:
    parts = client_error_parts(exc)
    return parts is not None and (parts[1] == 412 or parts[0] == "PreconditionFailed")


def retryable(exc: BaseException) -> bool:
    if is_connection_error(exc):
        return True
    parts = client_error_parts(exc)
    if parts is None:
        return False
    code, status = parts
    if code in _RETRYABLE_CODES or status in (409, 429):
        return True
    return status >= 500 and status != 501


def describe(exc: BaseException) -> str:
    parts = client_error_parts(exc)
    if parts is not None:
        code, status = parts
        message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", "")).strip()
        head = f"{code or 'HTTP error'} ({status})"
        return f"{head}: {message}" if message else head
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
