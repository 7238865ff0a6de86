"""``catalog-outage``: the PostgreSQL catalog stopped for a while and restarted, on a
private cluster the drill may stop (``private_pg_cluster``)."""

from __future__ import annotations

import uuid
from typing import Any

from lab.drill.model import SkipDrill
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    finish,
    first_commit,
    supervise,
    wait_recovered,
)


def catalog_outage(rig: Rig) -> None:
    """PostgreSQL catalog stopped for a while and restarted: wait or fail clearly, resume."""
    cluster = rig.extra.get("pg")
    if cluster is None:
        raise SkipDrill(rig.extra.get("pg_skip", "no private PostgreSQL cluster"))
    first_commit(rig)
    cluster.stop()
    rig.event("catalog-down", "PostgreSQL stopped 15 s")
    supervise(rig, 15)
    rig.recovery_from_now()  # the clock starts when the server is asked to start
    rig.event("catalog-up", "PostgreSQL starting")
    cluster.start()
    wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the catalog came back")
    for d in rig.drivers:
        line = d.error_line()
        if d.poll() not in (None, -9, 0) and not line:
            rig.result.problems.append(f"driver {d.n} exited {d.poll()} without a one-line error")
    finish(rig)


def private_pg_cluster() -> tuple[Any, str]:
    """A private PostgreSQL cluster (lab/pgcluster.py) the drill may stop and
    start, or None and the reason it cannot exist here."""
    from lab.pgcluster import PgCluster, PgClusterUnavailable

    try:
        return PgCluster.create(name=f"drill_{uuid.uuid4().hex[:8]}"), ""
    except PgClusterUnavailable as e:
        return None, str(e)
