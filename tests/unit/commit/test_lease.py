"""The standby lease (``pipeline/commit/lease.py``) on the real local journal store, with
an injected clock: who becomes active, when a standby takes over, and that an owner which
lost the lease stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.commit.journal import JournalStore
from pipeline.commit.lease import Claim, Lease, LeaseMark, MarkKind, Role
from pipeline.errors import ConfigError, FencedError, LeaseLostError
from pipeline.storage.local import LocalJournalStore

LEASE_S = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


@pytest.fixture
def store(tmp_path: Path) -> JournalStore:
    return LocalJournalStore(str(tmp_path / "journal"))


def _replica(store: JournalStore, name: str, clock: Clock) -> Lease:
    return Lease(store, name, lease_s=LEASE_S, clock=clock)


def test_mark_names_round_trip_and_order() -> None:
    marks = [
        LeaseMark(1, MarkKind.CLAIM),
        LeaseMark(1, MarkKind.BEAT, 0),
        LeaseMark(1, MarkKind.BEAT, 11),
        LeaseMark(1, MarkKind.RELEASED),
        LeaseMark(2, MarkKind.CLAIM),
    ]
    assert sorted(reversed(marks)) == marks
    for m in marks:
        assert LeaseMark.parse(m.name) == m
        assert LeaseMark.parse("prefix/of/" + m.name) == m
    foreign = ("ha/1.claim", "ha/000000000001.beat", "ha/x.claim", "ha/000000000001.claim.tmp")
    for name in foreign:
        assert LeaseMark.parse(name) is None


def test_first_replica_takes_a_free_lease_at_once_the_second_stands_by(store: JournalStore) -> None:
    clock = Clock()
    a, b = _replica(store, "a", clock), _replica(store, "b", clock)
    assert a.try_acquire() and a.role is Role.ACTIVE and a.generation == 1
    # the active renews every second: the standby never sees it expire
    for _ in range(20):
        assert not b.try_acquire()
        clock.advance(1.0)
        a.renew()
    assert b.role is Role.STANDBY
    # renewals are trimmed: the store does not grow with time
    assert len(store.list("ha")) <= 3


def test_standby_takes_over_after_the_lease_and_the_old_owner_stops(store: JournalStore) -> None:
    clock = Clock()
    a, b = _replica(store, "a", clock), _replica(store, "b", clock)
    assert a.try_acquire()
    a.renew()
    assert not b.try_acquire()  # first sight of the lease: the clock starts here
    clock.advance(LEASE_S - 0.1)
    assert not b.try_acquire()  # a stopped renewing (paused), but not for long enough yet
    clock.advance(0.2)
    assert b.try_acquire() and b.generation == 2
    # a resumes: its next renewal sees generation 2, raises, and it never renews again
    with pytest.raises(LeaseLostError, match="generation 2 took over") as e:
        a.renew()
    assert isinstance(e.value, FencedError) and e.value.code == "lease-lost"
    assert a.role is Role.STOPPED
    with pytest.raises(LeaseLostError):
        a.renew()
    assert not a.try_acquire()
    b.renew()  # the new owner is unaffected


def test_racing_standbys_exactly_one_becomes_active(store: JournalStore) -> None:
    clock = Clock()
    owner = _replica(store, "owner", clock)
    assert owner.try_acquire()
    standbys = [_replica(store, f"s{i}", clock) for i in range(5)]
    assert not any(s.try_acquire() for s in standbys)
    clock.advance(LEASE_S)
    # every standby sees the expiry; all race for generation 2; one wins
    won = [s for s in standbys if s.try_acquire()]
    assert len(won) == 1 and won[0].generation == 2
    # the losers now watch the winner's lease, which is live while it renews
    for _ in range(5):
        clock.advance(1.0)
        won[0].renew()
        assert not any(s.try_acquire() for s in standbys if s is not won[0])


def test_released_lease_is_taken_without_waiting(store: JournalStore) -> None:
    clock = Clock()
    a, b = _replica(store, "a", clock), _replica(store, "b", clock)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert a.role is Role.STOPPED
    assert b.try_acquire() and b.generation == 2


def test_dead_claimant_is_replaced_after_the_lease(store: JournalStore) -> None:
    """A standby that claimed and died before renewing holds nothing for long."""
    clock = Clock()
    dead, c = _replica(store, "dead", clock), _replica(store, "c", clock)
    assert dead.try_acquire()  # never renews
    assert not c.try_acquire()
    clock.advance(LEASE_S)
    assert c.try_acquire() and c.generation == 2


class _FailingStore:
    """A journal store whose writes start failing (storage unreachable)."""

    def __init__(self, inner: JournalStore) -> None:
        self.inner, self.down = inner, False

    def create(self, name: str, data: bytes) -> None:
        if self.down:
            raise OSError("storage unreachable")
        self.inner.create(name, data)

    def read(self, name: str) -> bytes | None:
        return self.inner.read(name)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        self.inner.delete(name)


def test_owner_that_cannot_renew_for_the_lease_stops(store: JournalStore) -> None:
    clock = Clock()
    flaky = _FailingStore(store)
    a = _replica(flaky, "a", clock)
    assert a.try_acquire()
    flaky.down = True
    clock.advance(1.0)
    a.renew()  # one failed renewal is retried, not fatal
    assert a.role is Role.ACTIVE
    clock.advance(LEASE_S)
    with pytest.raises(LeaseLostError, match="could not renew"):
        a.renew()
    assert a.role is Role.STOPPED


def test_patient_standby_waits_even_for_a_lease_nobody_holds(store: JournalStore) -> None:
    clock = Clock()
    standby = Lease(store, "standby", lease_s=LEASE_S, clock=clock, patient=True)
    assert not standby.try_acquire()
    active = _replica(store, "active", clock)
    assert active.try_acquire()  # the active started a moment later still wins
    for _ in range(6):
        clock.advance(1.0)
        active.renew()
        assert not standby.try_acquire()
    clock.advance(LEASE_S)
    assert standby.try_acquire() and standby.generation == 2


def test_take_claims_the_next_generation_over_a_live_owner(store: JournalStore) -> None:
    clock = Clock()
    old, new = _replica(store, "old", clock), _replica(store, "new", clock)
    assert old.try_acquire()
    old.renew()
    new.take()
    assert new.role is Role.ACTIVE and new.generation == 2
    with pytest.raises(LeaseLostError):
        old.renew()


def test_tick_renews_when_due_and_a_stopped_owner_cannot_tick(store: JournalStore) -> None:
    clock = Clock()
    a = Lease(store, "a", lease_s=LEASE_S, renew_s=1.0, clock=clock)
    assert a.try_acquire()
    a.tick()  # not due: nothing written
    assert [LeaseMark.parse(n) for n in store.list("ha")] == [LeaseMark(1, MarkKind.CLAIM)]
    clock.advance(1.0)
    a.tick()
    assert LeaseMark(1, MarkKind.BEAT, 0) in [LeaseMark.parse(n) for n in store.list("ha")]
    a.release()
    with pytest.raises(LeaseLostError):
        a.tick()


def test_metrics_show_the_role_and_a_warm_standby_is_ready() -> None:
    from pipeline.commit.lease import HaStatus
    from pipeline.observe.metrics import PipelineMetrics

    m = PipelineMetrics("p", host="127.0.0.1", port=0)
    text = m.exposition().decode()
    assert 'ingest_ha_role{role="off"} 1.0' in text and "ingest_ha_active 0.0" in text
    assert m.readiness() == (False, "query not started")
    status = HaStatus("standby", warm=False, lease_age_s=1.5)
    m.watch_standby(lambda: status)
    assert m.readiness() == (False, "standby warming up")
    status = HaStatus("standby", warm=True, lease_age_s=1.5)
    assert m.readiness() == (True, "")
    text = m.exposition().decode()
    assert 'ingest_ha_role{role="standby"} 1.0' in text
    assert 'ingest_ha_role{role="active"} 0.0' in text
    assert "ingest_ha_lease_age_seconds 1.5" in text and "ingest_ha_active 0.0" in text
    status = HaStatus("active", warm=True, lease_age_s=0.2, takeovers=1)
    text = m.exposition().decode()
    assert "ingest_ha_active 1.0" in text and "ingest_ha_takeovers_total 1.0" in text
    assert m.readiness() == (False, "query not started")  # active: the query decides
    assert {"ingest_ha_role", "ingest_ha_takeovers_total"} <= m.exported_names()


def test_a_gone_holder_is_replaced_at_once_and_its_endpoint_is_published(
    store: JournalStore,
) -> None:
    clock = Clock()
    a = Lease(store, "a", lease_s=LEASE_S, clock=clock, endpoint="10.0.0.7:4050")
    assert a.try_acquire()
    for _ in range(4):  # trimming the renewals keeps the owner's claim
        clock.advance(1.0)
        a.renew()
    assert len(store.list("ha")) <= 3
    assert a.store.claim(1).endpoint == "10.0.0.7:4050" and a.store.claim(2) == Claim()
    standbys = [_replica(store, f"s{i}", clock) for i in range(3)]
    latest = standbys[0].peek()
    assert latest == LeaseMark(1, MarkKind.BEAT, 3)
    # no expiry, no gone holder: nothing; gone: all race, exactly one wins, no waiting
    assert not any(s.try_acquire(latest=latest) for s in standbys)
    won = [s for s in standbys if s.try_acquire(holder_gone=True, latest=latest)]
    assert len(won) == 1 and won[0].generation == 2
    with pytest.raises(LeaseLostError):
        a.renew()


def test_liveness_link_tells_a_dead_holder_from_a_live_one() -> None:
    """Real sockets: a killed holder process (its beacon's connections and listener close
    with it) is gone at once; a live one is not, nor is an address nobody can reach."""
    import subprocess
    import sys
    import time

    from pipeline.standby.liveness import HolderLink, LivenessBeacon

    live = LivenessBeacon("127.0.0.1")
    link = HolderLink()
    link.follow(1, live.address)
    assert link.linked and not link.gone(0.2)
    code = (
        "import sys, time; from pipeline.standby.liveness import LivenessBeacon; "
        "b = LivenessBeacon('127.0.0.1'); print(b.address, flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        address = holder.stdout.readline().strip()
        dead = HolderLink()
        dead.follow(2, address)
        assert dead.linked and not dead.gone(0.1)
        holder.kill()
        t0 = time.monotonic()
        assert dead.gone(5.0)
        assert time.monotonic() - t0 < 1.0
        # a claim whose holder died before we looked (or a wrong advertised address):
        # refused without a held connection proves nothing, the lease decides
        late = HolderLink()
        late.follow(2, address)
        assert not late.linked and not late.gone(0.0)
    finally:
        holder.kill()
        holder.wait()
    assert not link.gone(0.0)  # the live one is still linked
    port = int(live.address.rsplit(":", 1)[1])
    with pytest.raises(ConfigError, match=rf"ha.port {port}: cannot listen"):
        LivenessBeacon("127.0.0.1", port)  # taken: one line naming the setting
    unreachable = HolderLink()
    unreachable.follow(3, "not-an-address")
    assert not unreachable.linked and not unreachable.gone(0.0)
    link.close()
    live.close()


def test_status_names_the_lease_holder(store: JournalStore) -> None:
    from pipeline.ops.status import _lease_line

    assert _lease_line(store).startswith("none")
    a = Lease(store, "host-a:41", clock=Clock(), endpoint="10.0.0.7:4050")
    assert a.try_acquire()
    assert _lease_line(store) == "generation 1 held by host-a:41, liveness port 10.0.0.7:4050"
    a.release()
    assert _lease_line(store) == "generation 1 released by host-a:41 (free)"


def test_a_standby_keeps_its_workers_warm_while_it_waits(store: JournalStore) -> None:
    """Spark stops a Python worker idle for a minute: a standby re-runs its warm-up while
    it waits, so a take-over hours later still finds warm workers."""
    import threading
    import time

    from pipeline.config import HaConfig
    from pipeline.standby import Standby

    holder = Lease(store, "a", lease_s=LEASE_S, clock=time.monotonic)
    assert holder.try_acquire()
    ha = HaConfig(mode="auto", lease_seconds=1.0, renew_seconds=0.25)
    standby = Standby(ha, store, "127.0.0.1")
    standby.keep_warm_s = 0.1
    warmed: list[float] = []
    done = threading.Event()
    result: list[bool] = []

    def wait() -> None:
        result.append(standby.acquire(lambda: None, lambda: False, lambda: warmed.append(1)))
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    for _ in range(30):  # the holder renews: the standby waits out a lease, warms, waits
        time.sleep(0.1)
        holder.renew()
    assert not done.is_set()
    assert len(warmed) >= 3
    holder.release()
    assert done.wait(10) and result == [True]
    standby.release()


def test_a_restart_after_a_crash_takes_the_lease_without_warming_up_as_a_standby(
    store: JournalStore,
) -> None:
    """A replica started where its predecessor was just SIGKILLed finds that predecessor's
    lease still unexpired. It waits one lease period for it before warming up as a
    standby (a Spark query rehearsal: ~20 s on a loaded 2-core host), so a solo restart
    does not pay the warm-up; a live holder still gets a warming standby."""
    import time

    from pipeline.config import HaConfig
    from pipeline.standby import Standby

    ha = HaConfig(mode="auto", lease_seconds=1.0, renew_seconds=0.25)
    dead = Lease(store, "crashed", lease_s=1.0, renew_s=0.25, clock=time.monotonic)
    assert dead.try_acquire()  # renewed once, then never again: SIGKILLed
    warmed: list[str] = []
    restart = Standby(ha, store, "127.0.0.1")
    t0 = time.monotonic()
    assert restart.acquire(lambda: warmed.append("warm-up"), lambda: False)
    assert warmed == [] and not restart.warm
    assert time.monotonic() - t0 < 2.5  # one lease period, and a poll or two
    restart.release()


def test_a_restart_on_the_holders_host_takes_a_killed_holders_lease_at_once(
    store: JournalStore,
) -> None:
    """A holder SIGKILLed on this host (same boot, same process namespace) is provably
    gone: its process is no more. The replica started after it takes the lease at once
    instead of waiting out ``ha.leaseSeconds``; while the holder lives it does not."""
    import subprocess
    import sys
    import time

    from pipeline.config import HaConfig
    from pipeline.standby import Standby

    ha = HaConfig(mode="auto", lease_seconds=20.0, renew_seconds=5.0)
    code = (
        "import sys, time; from pipeline.config import HaConfig; "
        "from pipeline.standby import Standby; "
        "from pipeline.storage.local import LocalJournalStore; "
        "s = Standby(HaConfig(mode='auto', lease_seconds=20.0, renew_seconds=5.0), "
        "LocalJournalStore(sys.argv[1]), '127.0.0.1'); "
        "assert s.acquire(lambda: None, lambda: False); print('held', flush=True); "
        "time.sleep(120)"
    )
    assert isinstance(store, LocalJournalStore)
    holder = subprocess.Popen(
        [sys.executable, "-c", code, store.root], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        live = Standby(ha, store, "127.0.0.1")
        until = time.monotonic() + 1.0
        assert not live.acquire(lambda: None, lambda: time.monotonic() > until)
        live.release()
        holder.kill()
        holder.wait()
        restart = Standby(ha, store, "127.0.0.1")
        t0 = time.monotonic()
        assert restart.acquire(lambda: None, lambda: time.monotonic() - t0 > 15)
        assert time.monotonic() - t0 < 1.0  # not the 20 s lease
        assert restart.lease.generation == 2
        restart.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_process_identity_proves_death_only_on_its_own_host() -> None:
    """Gone means: same boot and process namespace, and the pid is absent, reused (another
    start time) or a zombie. Another host's or container's identity proves nothing."""
    import dataclasses
    import os
    import subprocess
    import sys

    from pipeline.standby.process import ProcessIdentity

    me = ProcessIdentity.current()
    assert me is not None and not me.gone()
    assert ProcessIdentity.from_claim(me.to_claim()) == me
    assert ProcessIdentity.from_claim(None) is None
    assert ProcessIdentity.from_claim({"pid": "x"}) is None  # unreadable: proves nothing
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    them = ProcessIdentity.of(child.pid)
    assert them is not None and not them.gone()
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
    assert them.gone()  # a zombie until reaped: its sockets and lease are dead already
    child.wait()
    assert them.gone()
    assert dataclasses.replace(me, start=me.start + 1).gone()  # the pid now names another
    elsewhere = dataclasses.replace(them, boot="another-boot")
    assert not elsewhere.gone()
    container = dataclasses.replace(them, pid_namespace="pid:[1]")
    assert not container.gone()
