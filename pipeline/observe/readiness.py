"""Readiness of one pipeline's driver, and its warm-standby series: :class:`Readiness`
(mixed into :class:`~pipeline.observe.metrics.PipelineMetrics`) and :class:`HaCollector`.

``/readyz`` answers 200 when the streaming query is active, the last batch did not fail
and the writer was not fenced -- or the replica is a warm standby (``ha.mode``), which is
healthy and ready to take over. The query's state is read at each probe and scrape
(``isActive`` / ``exception()`` of a watched ``StreamingQuery``), the lease's through
``pipeline.standby.Standby.status``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.commit.lease import HaStatus
from pipeline.errors import one_line
from pipeline.observe.accounting import MetricsState

__all__ = ["HA_ROLES", "HaCollector", "Readiness"]

HA_ROLES = ("off", "standby", "active", "stopped")


class HaCollector(Collector):
    """The warm-standby series, read from the pipeline's lease at each scrape:
    ``ha_role{role}`` is 1 for this replica's role (off, standby, active, stopped);
    ``ha_active`` 1 while this replica writes (with ``ha.mode`` off: while the query is
    active); ``ha_lease_age_seconds`` a standby's view of the lease (since it last
    changed), an active's time since its last renewal; ``ha_takeovers_total`` the times
    this replica took over after standing by."""

    def __init__(self, metrics: Readiness) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        st = self.metrics.ha_status()
        role = GaugeMetricFamily(
            "ingest_ha_role", "1 for this replica's warm-standby role.", labels=["role"]
        )
        for name in HA_ROLES:
            role.add_metric([name], 1.0 if st.role == name else 0.0)
        yield role
        writes = st.role == "active" or (st.role == "off" and self.metrics.query_active())
        yield GaugeMetricFamily(
            "ingest_ha_active", "1 while this replica writes.", value=1.0 if writes else 0.0
        )
        yield GaugeMetricFamily(
            "ingest_ha_lease_age_seconds",
            "Standby: since the lease last changed; active: since its last renewal.",
            value=st.lease_age_s,
        )
        yield CounterMetricFamily(
            "ingest_ha_takeovers",
            "Times this replica took over the lease after standing by.",
            value=st.takeovers,
        )


class Readiness(MetricsState):
    """The query, lease and failure state behind ``/readyz`` (methods of ``PipelineMetrics``)."""

    _query: Any
    _ha: Callable[[], HaStatus] | None
    _query_active: bool
    _query_reason: str

    def set_query_active(self, active: bool, reason: str = "") -> None:
        """Query state for readiness when no query is watched (see :meth:`watch_query`)."""
        with self._lock:
            self._query_active = active
            self._query_reason = reason or ("" if active else "query not active")

    def watch_query(self, query: Any) -> None:
        """Read ``isActive`` / ``exception()`` of a ``StreamingQuery`` at each probe and
        scrape (overrides :meth:`set_query_active`)."""
        with self._lock:
            self._query = query

    def watch_standby(self, status: Callable[[], HaStatus]) -> None:
        """The replica's lease (``pipeline.standby.Standby.status``), read at each probe."""
        with self._lock:
            self._ha = status

    def ha_status(self) -> HaStatus:
        with self._lock:
            status = self._ha
        if status is None:
            return HaStatus("off")
        try:
            return status()
        except Exception:  # a metrics problem must never fail the pipeline
            return HaStatus("off")

    def query_active(self) -> bool:
        return self._query_state()[0]

    def _query_state(self) -> tuple[bool, str]:
        with self._lock:
            query, active, reason = self._query, self._query_active, self._query_reason
        if query is None:
            return active, reason
        try:
            if query.isActive:
                return True, ""
            exc = query.exception()
        except Exception as e:  # JVM gone (shutdown) or py4j error
            return False, f"query status unavailable ({type(e).__name__})"
        return False, "query terminated" + (f": {one_line(exc)}" if exc is not None else "")

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``: query active, last batch not failed, not fenced."""
        with self._lock:
            fenced, failed = self._fenced, self._failed
        if fenced is not None:
            return False, f"writer fenced: {fenced}"
        if failed is not None:
            return False, failed
        ha = self.ha_status()
        if ha.role == "standby":
            return (True, "") if ha.warm else (False, "standby warming up")
        active, reason = self._query_state()
        if not active:
            return False, reason or "query not active"
        return True, ""
