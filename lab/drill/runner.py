"""Matrix selection and the run loop of ``ingest drill``, with a live progress display.

``fast`` matrix: one SIGKILL drill (2 kills) and the checkpoint-deleted drill (Iceberg
unless ``--format`` says otherwise).
``full`` matrix: every scenario on Iceberg and on Hudi (the SIGKILL drill with ``kills``
kills each, ≥ 20 for acceptance; the warm-standby drill with ``standby_kills``, ending
with a paused active; ``standby-pause`` alone is not in it; the executor-loss drill, on
a standalone cluster started for it, with ``executor_kills``), except the catalog outage,
which needs a catalog (Iceberg only), and the routed-set drills (``routed-*``, Iceberg
only); then the SIGKILL drill on the ``both`` format (one
instant, two tables, one more fault point between their commits). ``cluster``: every
drill's pipeline on its own standalone cluster (reported as ``<scenario>@cluster``). A
drill that cannot run here is reported as skipped with its reason; a drill that throws is
reported FAILED with the error.

Every drill starts its own Kafka cluster (``brokers.DrillBroker``: three KRaft nodes,
replication factor 3) unless ``--bootstrap`` names one; ``report.json`` (``broker``) and
the printed table state which (``brokers.broker_info``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from lab.drill.brokers import broker_info
from lab.drill.model import (
    CLUSTER_ONLY,
    ROUTED_SCENARIOS,
    DrillResult,
    DrillSpec,
    SkipDrill,
    Storage,
    TableFormat,
)
from lab.drill.report import summary_table, write_json, write_timeline
from lab.drill.rig import Rig
from lab.drill.scenarios import SCENARIOS, private_pg_cluster
from pipeline.errors import ConfigError

ORDER = (
    "kill",
    "task-failure",
    "executor-loss",
    "broker-outage",
    "zombie",
    "standby",
    "checkpoint-deleted",
    "retention",
    "catalog-outage",
    "schema-change",
    "avro-schema-change",
    "routed-kill",
    "routed-route-change",
    "routed-new-topic",
    "routed-checkpoint-deleted",
    "routed-zombie",
)
CATALOG_ONLY = {"catalog-outage"}  # Hudi tables have no catalog to lose
# The full matrix runs these on S3 (SeaweedFS): Hudi's commit slots take the place of its
# flock there, so the SIGKILL chain and the zombie prove them; local Hudi commits keep
# their kill-at-every-fault-point test (tests/integration/formats/hudi/test_hudi_pipeline.py, slow).
FULL_ON_S3 = frozenset({("kill", "hudi"), ("zombie", "hudi")})
FORMATS: tuple[TableFormat, ...] = ("iceberg", "hudi", "both")
# the formats whose routed sets the routed drills run on (Hudi's is not in yet)
ROUTED_FORMATS: tuple[TableFormat, ...] = ("iceberg",)


@dataclass(frozen=True)
class DrillOptions:
    out: Path
    kills: int = 20
    rate: float = 100.0
    bootstrap: str | None = None
    keep_work: bool = False
    work: Path | None = None  # drivers' work dirs; default <out>/work


def select(
    matrix: str,
    scenarios: Sequence[str],
    formats: Sequence[str],
    kills: int,
    rate: float,
    standby_kills: int | None = None,
    executor_kills: int | None = None,
    cluster: bool = False,
    storage: Storage = "local",
) -> list[DrillSpec]:
    """The drills to run; ``standby_kills`` / ``executor_kills`` (default ``kills``): kills
    of the standby / executor-loss drill; ``cluster``: every drill's pipeline on a
    standalone cluster (executor-loss always is); ``storage``: where every drill's tables
    live (the full matrix puts :data:`FULL_ON_S3` on S3 anyway)."""
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ConfigError(f"unknown drill scenario(s) {unknown}; allowed: {', '.join(ORDER)}")
    if scenarios:
        names = list(scenarios)
    elif matrix == "fast":
        names = ["kill", "checkpoint-deleted"]
        kills = min(kills, 2)
    else:
        names = list(ORDER)
    chosen: list[TableFormat] = []
    default_formats = ("iceberg",) if matrix == "fast" and not scenarios else ("iceberg", "hudi")
    for f in formats or default_formats:
        fmt = next((x for x in FORMATS if x == f), None)
        if fmt is None:
            raise ConfigError(f"--format {f!r}: allowed: {', '.join(FORMATS)}")
        chosen.append(fmt)
    specs = []
    matrix_on_s3 = matrix == "full" and not scenarios and not formats
    for name in names:
        fmts = [f for f in chosen if f != "hudi"] if name in CATALOG_ONLY else chosen
        if name in ROUTED_SCENARIOS:
            fmts = [f for f in chosen if f in ROUTED_FORMATS]
        if not fmts and scenarios:
            need = "a routed Iceberg set" if name in ROUTED_SCENARIOS else "an Iceberg catalog"
            raise ConfigError(f"drill {name!r} needs {need}: use --format iceberg")
        n = {"standby": standby_kills, "executor-loss": executor_kills}.get(name)
        n = kills if n is None else n
        on_cluster = cluster or name in CLUSTER_ONLY
        for fmt in fmts:
            where: Storage = "s3" if matrix_on_s3 and (name, fmt) in FULL_ON_S3 else storage
            specs.append(
                DrillSpec(name, fmt, kills=n, rate=rate, cluster=on_cluster, storage=where)
            )
    if matrix_on_s3:
        specs.append(
            DrillSpec("kill", "both", kills=kills, rate=rate, cluster=cluster, storage=storage)
        )
    return specs


def run_one(
    spec: DrillSpec,
    opts: DrillOptions,
    status: list[str],
    body: Callable[[Rig], None] | None = None,
) -> DrillResult:
    """One drill on its own rig; ``body`` replaces the registered scenario function (the
    soak drill, lab/drill/soak.py, brings its own)."""
    work = (opts.work or opts.out / "work") / f"{spec.label}-{spec.table_format}"
    shutil.rmtree(work, ignore_errors=True)
    pg = None
    catalog = None
    pg_skip = ""
    if spec.scenario in CATALOG_ONLY or spec.on_rest:
        pg, pg_skip = private_pg_cluster()
        if pg is not None and not spec.on_rest:  # a REST catalog keeps its tables there
            catalog = {
                "name": "drill",
                "uri": pg.sqlalchemy_uri,
                "warehouse": str(work / "warehouse"),
            }

    def say(msg: str) -> None:
        status[0] = f"{spec.label}/{spec.table_format}: {msg}"

    rig: Rig | None = None
    try:
        rig = Rig(
            spec,
            work,
            opts.bootstrap,
            catalog,
            on_status=say,
            catalog_postgres=pg.uri if pg is not None else None,
        )
        rig.extra.update({"pg": pg, "pg_skip": pg_skip})
        with rig:
            stop = threading.Event()

            def ticker() -> None:
                while not stop.wait(1.0):
                    assert rig is not None
                    status[1] = (
                        f"t={rig.now():5.0f}s produced {rig.producer.produced:>7} "
                        f"committed {rig.committed:>7} restarts {rig.result.restarts:>3} "
                        f"faults {rig.result.faults:>3}"
                    )

            threading.Thread(target=ticker, daemon=True).start()
            try:
                (body or SCENARIOS[spec.scenario])(rig)
            finally:
                stop.set()
        result = rig.result
    except SkipDrill as e:
        result = rig.result if rig is not None else DrillResult(spec.label, spec.table_format)
        result.skipped = str(e)
    except Exception as e:  # a drill that breaks is a failed drill, reported, not a crash
        result = rig.result if rig is not None else DrillResult(spec.label, spec.table_format)
        result.problems.append(f"{type(e).__name__}: {e}")
        if rig is not None:
            for d in rig.drivers[-2:]:
                result.notes.append(f"driver {d.n} stderr tail: {d.stderr()[-600:]}")
    finally:
        if pg is not None:
            pg.drop()
    if not opts.keep_work and result.ok:
        shutil.rmtree(work, ignore_errors=True)
    return result


@contextlib.contextmanager
def live_display(console: Console, render: Callable[[], Group]) -> Iterator[None]:
    """A transient live display refreshed twice a second from ``render`` while inside."""
    with Live(render(), console=console, refresh_per_second=2, transient=True) as live:
        stop = threading.Event()

        def refresh() -> None:
            while not stop.wait(0.5):
                live.update(render())

        threading.Thread(target=refresh, daemon=True).start()
        try:
            yield
        finally:
            stop.set()


def run_drills(
    specs: Sequence[DrillSpec], opts: DrillOptions, console: Console
) -> list[DrillResult]:
    # the sampler polls the catalog too: its retry warnings during an outage are expected
    logging.getLogger("pipeline.formats.iceberg").setLevel(logging.ERROR)
    results: list[DrillResult] = []
    status = ["", ""]
    started = time.monotonic()
    broker = broker_info(opts.bootstrap)
    console.print(f"broker: {broker['description']}")

    def render() -> Group:
        done = " ".join(f"{r.scenario}/{r.table_format}:{r.verdict}" for r in results) or "-"
        return Group(
            Text(
                f"drill {len(results) + 1}/{len(specs)}  elapsed {time.monotonic() - started:.0f}s",
                style="bold",
            ),
            Text(status[0]),
            Text(status[1]),
            Text(f"done: {done}", style="dim"),
        )

    with live_display(console, render):
        for spec in specs:
            status[0], status[1] = f"{spec.label}/{spec.table_format}: starting", ""
            r = run_one(spec, opts, status)
            results.append(r)
            console.print(
                f"{r.scenario}/{r.table_format}: {r.verdict} ({r.duration_s:.0f}s, "
                f"{r.restarts} restarts, {r.missing} missing, {r.duplicated} duplicated)"
                + (f" — {r.skipped}" if r.skipped else "")
                + (f" — {'; '.join(r.problems)[:300]}" if r.problems else "")
            )
    meta = {
        "kills": opts.kills,
        "rate": opts.rate,
        "broker": broker,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    write_json(results, meta, opts.out / "report.json")
    write_timeline(results, opts.out / "timeline.png")
    wide = console if console.is_terminal else Console(file=console.file, width=160)
    wide.print(summary_table(results, broker["description"]))
    console.print(f"report: {opts.out / 'report.json'}, timeline: {opts.out / 'timeline.png'}")
    return results
