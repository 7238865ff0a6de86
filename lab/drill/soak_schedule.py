"""The soak drill's fault schedule (pure; the soak itself is lab/drill/soak.py):
which fault comes next (``FaultPicker``, one seed), the pace it keeps (``behind``), when the
checkpoint is deleted (``checkpoint_times``), and the schedule played out on modelled
timings without a cluster (``simulate``)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

StandbyState = Literal["none", "warming", "warm"]
KILLS = ("kill-active", "kill-standby", "kill-solo")
CHECKPOINT = "checkpoint-deleted"
AWAIT_WARM = "await-warm"  # a pick that injects nothing: let the standby get warm

GAP_S = (4.0, 9.0)  # from one fault to the next, then the active's next commit
KILL_DELAY_S = 1.0  # an active is killed 0-1 s after a commit: anywhere in a batch
TARGET_INTERVAL_S = 14.0  # behind this pace a warming standby is killed more often
P_KILL_ACTIVE = 0.7  # a warm standby: kill the active, else the standby
P_KILL_WARMING = (0.4, 0.9)  # a warming standby (on pace, behind): kill it, else let it warm
P_RESPAWN = (0.4, 0.8)  # after kill-standby (on pace, behind): start another, else kill-solo
CHECKPOINT_EVERY_S = 300.0
CHECKPOINT_TAIL_S = 30.0  # no checkpoint deletion this close to the end of the faults


# -- the schedule (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class Pick:
    """The next fault (or :data:`AWAIT_WARM`: let the standby get warm, then kill the
    active); ``respawn``: after a kill-standby, start another standby at once."""

    kind: str
    respawn: bool = True


class FaultPicker:
    """The soak's random choices, from one seed: gaps, kill delays, faults."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def gap(self) -> float:
        return self.rng.uniform(*GAP_S)

    def kill_delay(self) -> float:
        return self.rng.uniform(0.0, KILL_DELAY_S)

    def pick(self, standby: StandbyState, counts: Mapping[str, int], behind: bool) -> Pick:
        """The fault the state allows: kill-solo needs no standby, kill-active a warm one.
        The first kill-active and kill-solo are not left to chance."""
        if standby == "none":
            return Pick("kill-solo")
        if standby == "warm":
            if not counts.get("kill-active") or self.rng.random() < P_KILL_ACTIVE:
                return Pick("kill-active")
            return Pick("kill-standby", self._respawn(counts, behind))
        if not counts.get("kill-active"):
            return Pick(AWAIT_WARM)
        if not counts.get("kill-solo"):
            return Pick("kill-standby", respawn=False)
        if self.rng.random() < P_KILL_WARMING[int(behind)]:
            return Pick("kill-standby", self._respawn(counts, behind))
        return Pick(AWAIT_WARM)

    def _respawn(self, counts: Mapping[str, int], behind: bool) -> bool:
        return bool(counts.get("kill-solo")) and self.rng.random() < P_RESPAWN[int(behind)]


def behind(kills: int, elapsed_s: float) -> bool:
    """Fewer kills than one per :data:`TARGET_INTERVAL_S` so far."""
    return kills < elapsed_s / TARGET_INTERVAL_S


def checkpoint_times(duration_s: float) -> list[float]:
    """Seconds into the faults of each checkpoint deletion: every 5 minutes, halfway in
    a soak under 10 minutes, none in the last :data:`CHECKPOINT_TAIL_S`."""
    every = min(CHECKPOINT_EVERY_S, duration_s / 2)
    times, t = [], every
    while every > 0 and t <= duration_s - CHECKPOINT_TAIL_S:
        times.append(round(t, 1))
        t += every
    return times


@dataclass(frozen=True)
class Timings:
    """Modelled durations (s) of a 2-core host, for :func:`simulate`."""

    warm: float = 15.0  # a standby's start to "standing by, warm"
    takeover: float = 2.5  # kill-active to the standby's first commit
    cold: float = 13.0  # a start to the first commit
    commit: float = 1.0  # the active's next commit
    stop: float = 5.0  # stopping both drivers cleanly


def simulate(minutes: float, seed: int, t: Timings = Timings()) -> Counter[str]:
    """The faults the live soak (:meth:`SoakRun.faults`) injects in ``minutes`` when
    every step takes its modelled time: the schedule's pace, without a cluster."""
    picker = FaultPicker(seed)
    counts: Counter[str] = Counter()
    duration = minutes * 60.0
    ckpts = checkpoint_times(duration)
    now = last = 0.0
    standby_since: float | None = -t.warm  # the clock starts with the pair up
    while True:
        now = max(now, last + picker.gap()) + t.commit
        if now >= duration:
            return counts
        if ckpts and now >= ckpts[0]:
            ckpts.pop(0)
            counts[CHECKPOINT] += 1
            last = now + t.stop
            now, standby_since = last + t.cold, last + t.cold
            continue
        state: StandbyState = (
            "none"
            if standby_since is None
            else ("warm" if now - standby_since >= t.warm else "warming")
        )
        pick = picker.pick(state, counts, behind(sum(counts[k] for k in KILLS), now))
        if pick.kind == AWAIT_WARM:
            assert standby_since is not None
            now = max(now, standby_since + t.warm)
            if now >= duration:
                return counts
            pick = Pick("kill-active")
        if pick.kind in ("kill-active", "kill-solo"):
            now += t.commit + picker.kill_delay()
        last = now
        counts[pick.kind] += 1
        if pick.kind == "kill-active":
            now += t.takeover
            standby_since = now
        elif pick.kind == "kill-standby":
            standby_since = now if pick.respawn else None
        else:
            now += t.cold
            standby_since = now
