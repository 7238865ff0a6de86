"""What every scenario does alike: its bounds, the first commit, supervising a driver
that may exit, waiting for a recovery, and the drain and count it ends with."""

from __future__ import annotations

import time
from collections.abc import Callable

from lab.broker import KafkaCluster
from lab.drill.driver import DriverProcess
from lab.drill.model import SkipDrill
from lab.drill.rig import Rig

# Driver start-up is 15-25 s on an idle 2-core machine and several minutes when other Spark
# jobs share it: generous limits, so a slow machine is not reported as a broken pipeline.
POINT_TIMEOUT_S = 360.0  # start-up + a few batches; a point not reached by then is noted
COMMIT_TIMEOUT_S = 480.0  # a (re)started driver's first commit
HA = ("ha.mode=auto",)  # the standby drills' replicas: active when free, else warm standby


def exited(d: DriverProcess) -> Callable[[], bool]:
    return lambda: not d.alive()


def wait_recovered(rig: Rig, timeout: float, what: str) -> None:
    """Wait for the commit that closes the latest recovery; restart a driver that died."""

    def recovered() -> bool:
        d = rig.driver
        if d is not None and not d.alive():
            d.reap()
            rig.result.notes.append(f"driver {d.n} exited {d.poll()}: {d.error_line()[:160]}")
            rig.start_driver()
        return rig.recoveries[-1].first_commit is not None

    rig.wait_until(recovered, timeout, what)


def first_commit(rig: Rig) -> None:
    rig.start_driver(restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)


def finish(rig: Rig) -> None:
    rig.drain()
    rig.verify()


def need_kafka(rig: Rig) -> KafkaCluster:
    if rig.broker.kafka is None:
        raise SkipDrill(
            "broker faults need the drill's own Kafka cluster (not available with --bootstrap)"
        )
    return rig.broker.kafka


def supervise(rig: Rig, seconds: float) -> None:
    """Keep a driver running for ``seconds``: restart it if it exits (counted)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        d = rig.driver
        if d is not None and not d.alive():
            d.reap()
            rig.result.notes.append(f"driver {d.n} exited {d.poll()}: {d.error_line()[:160]}")
            rig.start_driver()
        time.sleep(0.5)
