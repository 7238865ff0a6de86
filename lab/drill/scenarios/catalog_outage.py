"""``catalog-outage``: the PostgreSQL catalog stopped for a while and restarted, on a
private cluster the drill may stop (``private_pg_cluster``). On a REST catalog
(``DrillSpec.on_rest``) the server is first killed mid-commit, once at each moment that
leaves the writer a different outcome to find out (:data:`REST_KILLS`), then made to
answer a commit it applied with a 502, then to forget its tokens; then its PostgreSQL is
stopped as on the SQL catalog."""

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
from lab.rest_catalog import Fault, RestCatalogServer

# the REST server killed on a commit request: nothing applied; applied but unanswered
# (the unknown outcome); applied and answered, the next request finding no server
REST_KILLS = (Fault.HALT_BEFORE_APPLY, Fault.HALT_AFTER_APPLY, Fault.HALT_AFTER_ANSWER)
# answered wrongly but alive: a 502 for an applied commit; every token forgotten
REST_ANSWERS = (Fault.ANSWER_502_AFTER_APPLY, Fault.EXPIRE_TOKENS)
REST_DOWN_S = 5.0  # the killed server stays down this long before it is restarted


def catalog_outage(rig: Rig) -> None:
    """PostgreSQL catalog stopped for a while and restarted: wait or fail clearly, resume."""
    cluster = rig.extra.get("pg")
    if cluster is None:
        raise SkipDrill(rig.extra.get("pg_skip", "no private PostgreSQL cluster"))
    first_commit(rig)
    if rig.rest is not None:
        _rest_faults(rig, rig.rest)
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


def _rest_faults(rig: Rig, server: RestCatalogServer) -> None:
    """Each of :data:`REST_KILLS`, then each of :data:`REST_ANSWERS`, on the next commit;
    after each the pipeline must commit again (recovering nothing twice, counted at the
    end)."""
    for fault in REST_KILLS:
        server.arm(fault)
        rig.wait_until(lambda: not server.alive(), COMMIT_TIMEOUT_S, f"for {fault.value}")
        killed = rig.now()
        rig.event("catalog-killed", fault.value)
        supervise(rig, REST_DOWN_S)
        rig.event("catalog-up", "REST catalog restarting")
        server.restart()
        # sampled with the server up: a commit answered before the kill is not the recovery
        rig.recovery_from_now(since=killed)
        wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit after {fault.value}")
    for fault in REST_ANSWERS:
        server.arm(fault)
        rig.wait_until(lambda: not server.armed(), COMMIT_TIMEOUT_S, f"for {fault.value}")
        rig.recovery_from_now()
        rig.event("catalog-fault", fault.value)
        wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit after {fault.value}")
