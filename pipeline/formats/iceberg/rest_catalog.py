"""pyiceberg's REST catalog with a deadline on every request.

pyiceberg's ``RestCatalog`` sends its requests without one, so a commit could wait for
ever on a catalog that took the request and never answered. This subclass, chosen by
``load_catalog`` through pyiceberg's ``py-catalog-impl`` hook, gives each request a
(connect, read) deadline: ``sink.catalog.requestTimeoutSeconds``, passed as the catalog
property ``request-timeout``. A commit past it is an *unknown outcome*: the error is an
``OSError`` (``retry.is_unavailable``), and the retry decides on a fresh read of the table
whether the batch is already there before it appends (``IcebergTable._commit_once``):
never a blind second append.

The rest of the REST protocol's answers need nothing here. A ``409``
(``CommitFailedException``) and a ``5xx`` (``CommitStateUnknownException``) are decided
again on a fresh read by ``retry.py``. A ``401``/``419`` on a token the catalog no longer
honours (it restarted, revoked or expired it) makes pyiceberg fetch a new one with the
configured ``credential`` and send the request once more: the server refused it, so
nothing was applied.
"""

from __future__ import annotations

from requests import PreparedRequest, Response, Session
from requests.adapters import HTTPAdapter

from pipeline.config.sink import DEFAULT_REQUEST_TIMEOUT_S, REST_REQUEST_TIMEOUT
from pipeline.formats.iceberg.pyiceberg_internals import SessionHookRestCatalog

__all__ = ["PIPELINE_REST_CATALOG", "PipelineRestCatalog"]

PIPELINE_REST_CATALOG = f"{__name__}.PipelineRestCatalog"
_Timeout = float | tuple[float | None, float | None] | None


class _DeadlineAdapter(HTTPAdapter):
    """Sends every request with a (connect, read) deadline unless it names its own."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self._timeout_s = timeout_s

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: _Timeout = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> Response:
        return super().send(request, stream, timeout or self._timeout_s, verify, cert, proxies)


class PipelineRestCatalog(SessionHookRestCatalog):
    """``RestCatalog`` whose requests all have a deadline."""

    def session_ready(self, session: Session) -> None:
        timeout_s = self.properties.get(REST_REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT_S)
        adapter = _DeadlineAdapter(float(timeout_s))
        session.mount("http://", adapter)
        session.mount("https://", adapter)
