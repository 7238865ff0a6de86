"""``ingest status``: is the pipeline running, why did it stop, what the table says was
ingested, and where each partition stands in Kafka (log start, high watermark, lag, and
records already deleted below the log start)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from pipeline.commit.faults import FaultPoints
from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.formats import registry
from pipeline.formats.base import LastBatch, PipelineTables, TableStatus
from pipeline.observe.runstate import RunState, read_run_state

PROBE_TIMEOUT_S = 2.0


def print_status(cfg: PipelineConfig, console: Console) -> None:
    """Run state, the instant journal (where the table format keeps it), each main
    table's last batch, and the committed offsets against Kafka (with two main tables:
    the offsets both have committed, the smaller of the two)."""
    print_run_status(cfg, console)
    fmt = registry.table_format(cfg)
    tables = fmt.open_tables(cfg, FaultPoints(""))
    _print_journal(cfg, tables, console)
    statuses = fmt.status(tables, cfg.id)
    routed = cfg.sink.routes is not None
    if routed:
        last = print_set_status(statuses, cfg.id, console)
    else:
        last = [b for st in statuses if (b := print_table_status(st, cfg.id, console))]
    print_file_stats(tables, console)
    if not last:
        return
    if len(statuses) == 1:
        print_offsets_and_lag(cfg, last[0].committed_offsets, console)
        return
    committed = tables.commit_tables().committed_offsets(cfg.id)
    title = f"all {len(statuses)} tables" if routed else "both tables"
    if committed:
        print_offsets_and_lag(cfg, committed, console, title=f"committed offsets ({title})")


def print_file_stats(tables: PipelineTables, console: Console) -> None:
    """Live data files and their average size per table (small files slow readers down:
    ``ingest compact``, ``maintenance.compaction``)."""
    for m in tables.maintenance():
        try:
            st = m.file_stats()
        except Exception as e:  # status reports what it can
            console.print(f"{m.name}: data files unknown ({e})", markup=False, highlight=False)
            continue
        if st.files:
            console.print(
                f"{st.table}: {st.files:,} live data files, average "
                f"{st.average_bytes / 2**20:,.2f} MiB ({st.bytes / 2**20:,.1f} MiB in all)",
                markup=False,
                highlight=False,
            )


def print_table_status(st: TableStatus, pipeline_id: str, console: Console) -> LastBatch | None:
    """One table's commits and ``pipeline_id``'s last batch there (None: none committed)."""
    if not st.exists:
        where = f" at {st.location}" if st.location else ""
        console.print(f"{st.table}{where} does not exist yet (nothing committed)")
        return None
    console.print(f"{st.table}: {st.commits} at {st.location}")
    cp = st.last_batch
    if cp is None:
        console.print(f"no commit of pipeline {pipeline_id!r} in the table's {st.history}")
        return None
    when = _when_committed(cp)
    instant = f", instant {cp.instant}" if cp.instant else ""
    console.print(
        f"pipeline {cp.pipeline_id}: last batch {cp.batch_id} (incarnation {cp.incarnation}, "
        f"writer epoch {cp.epoch}){instant}, committed at {when}"
    )
    return cp


def _when_committed(cp: LastBatch) -> str:
    if not cp.committed_at:
        return "-"
    return datetime.fromtimestamp(cp.committed_at, tz=UTC).isoformat(timespec="seconds")


def table_line(st: TableStatus, pipeline_id: str) -> str:
    """One table of a routed set in one line: its name, the pipeline's last batch there."""
    if not st.exists:
        return f"{st.table}: does not exist yet (nothing committed)"
    cp = st.last_batch
    if cp is None:
        return f"{st.table}: {st.commits}, no commit of pipeline {pipeline_id!r}"
    return f"{st.table}: batch {cp.batch_id}, {st.commits}, committed at {_when_committed(cp)}"


def set_summary(statuses: list[TableStatus]) -> str:
    """A routed set in one line: how many tables, the batch every table holds, and the
    tables behind it by name (a crash between table commits: the next run rolls forward)."""
    n = len(statuses)
    tables = f"{n} table{'s' if n != 1 else ''}"
    batches = [st.last_batch.batch_id if st.last_batch else None for st in statuses]
    known = [b for b in batches if b is not None]
    if not known:
        return f"routed set: {tables}, no batch committed yet"
    newest = max(known)
    behind = [
        f"{st.table} ({'nothing committed' if b is None else f'batch {b}'})"
        for st, b in zip(statuses, batches, strict=True)
        if b is None or b < newest
    ]
    if not behind:
        return f"routed set: {tables}, every table holds batch {newest}"
    return (
        f"routed set: {tables}, batch {newest} in {n - len(behind)} of them; behind: "
        f"{', '.join(behind)} (the next run rolls the set forward)"
    )


def print_set_status(
    statuses: list[TableStatus], pipeline_id: str, console: Console
) -> list[LastBatch]:
    """A routed set: one line per table, then the set's line; the last batches found."""
    cp = next((st.last_batch for st in statuses if st.last_batch), None)
    if cp is not None:
        console.print(
            f"pipeline {cp.pipeline_id}: incarnation {cp.incarnation}, writer epoch {cp.epoch}",
            markup=False,
            highlight=False,
        )
    for st in statuses:
        console.print(f"  {table_line(st, pipeline_id)}", markup=False, highlight=False)
    console.print(set_summary(statuses), markup=False, highlight=False)
    return [st.last_batch for st in statuses if st.last_batch]


# -- running or stopped ----------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What the metrics endpoint at ``url`` said (``reachable`` False: nothing answered,
    or it serves another pipeline: ``note``)."""

    url: str
    reachable: bool
    ready: bool = False
    reason: str = ""
    note: str = ""


def endpoint_urls(cfg: PipelineConfig, state: RunState) -> list[str]:
    """Where the driver's endpoint may be: the URL the running driver recorded (it knows
    the port it bound, also for ``metrics.port: 0``), then ``metrics.host:port``."""
    urls: list[str] = []
    if state.state == "running" and state.metrics_url:
        urls.append(state.metrics_url)
    m = cfg.metrics
    if m.enabled and m.port:
        host = m.host if m.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        url = f"http://{f'[{host}]' if ':' in host else host}:{m.port}"
        if url not in urls:
            urls.append(url)
    return urls


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:  # 503 from /readyz is an answer
        return int(e.code), e.read().decode("utf-8", "replace")


def probe_endpoint(url: str, pipeline_id: str, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """Ask ``url`` for ``/metrics`` (is it this pipeline?) and ``/readyz``."""
    try:
        code, text = _get(f"{url}/metrics", timeout)
        if code != 200:
            return Probe(url, False, note=f"{url}/metrics answered {code}")
        if f'pipeline_id="{pipeline_id}"' not in text:
            return Probe(url, False, note=f"{url} serves another pipeline, not {pipeline_id!r}")
        code, body = _get(f"{url}/readyz", timeout)
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        return Probe(url, False, note=f"{url} not reachable ({reason})")
    body = body.strip()
    if code == 200:
        return Probe(url, True, ready=True)
    return Probe(url, True, reason=body.removeprefix("not ready:").strip() or f"HTTP {code}")


def _when(ts: float | None) -> str:
    if ts is None:
        return "at an unknown time"
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def run_status(cfg: PipelineConfig) -> tuple[str, list[str]]:
    """``(state, detail lines)``; state is ``running``, ``stopped`` or ``unknown``."""
    rs = read_run_state(cfg)
    if rs.pipeline_id not in (None, cfg.id):  # a checkpoint shared with another pipeline
        rs = RunState(None, note=f"run state in {rs.path} belongs to pipeline {rs.pipeline_id!r}")
    probes = [probe_endpoint(u, cfg.id) for u in endpoint_urls(cfg, rs)]
    live = next((p for p in probes if p.reachable), None)
    notes = [p.note for p in probes if p.note and not p.reachable]
    if live is not None:
        lines = [
            f"metrics endpoint {live.url}: "
            + ("ready" if live.ready else f"NOT READY: {live.reason}")
        ]
        if rs.state == "running":
            lines.append(f"running since {_when(rs.time)} (pid {rs.pid} on {rs.host})")
        return "running", lines
    where = f"pid {rs.pid} on host {rs.host}"
    if not cfg.metrics.enabled:
        notes.append("metrics endpoint disabled (metrics.enabled: false)")
    elif not probes:
        notes.append("metrics.port is 0 and no running driver recorded its port")
    if rs.state == "stopped":
        lines = [f"stopped {_when(rs.time)} ({where})"]
        lines.append(f"last error: {rs.error}" if rs.error else "stopped cleanly (no error)")
        return "stopped", lines + notes
    if rs.state == "running":
        alive = rs.process_alive()
        if alive:
            return "running", [f"running since {_when(rs.time)} ({where})", *notes]
        if alive is False:
            return "stopped", [
                f"the driver ({where}, running since {_when(rs.time)}) ended without "
                "recording a stop: killed (SIGKILL, OOM) or crashed",
                *notes,
            ]
        return "unknown", [
            f"recorded running since {_when(rs.time)} ({where}); "
            "cannot check that process from this host",
            *notes,
        ]
    return "unknown", [*([rs.note] if rs.note else []), *notes]


def unknown_fields_line(cfg: PipelineConfig) -> str | None:
    """How many records of the last run carried fields ``decode.schema`` lacks, and which."""
    rs = read_run_state(cfg)
    if not rs.unknown_field_records:
        return None
    what = "dead-lettered" if cfg.decode.unknown_fields == "dead-letter" else "ignored"
    names = ", ".join(rs.unknown_fields)
    return (
        f"records with fields decode.schema lacks (this run, {what}): "
        f"{rs.unknown_field_records:,} ({names})"
    )


def print_run_status(cfg: PipelineConfig, console: Console) -> None:
    state, lines = run_status(cfg)
    unknown = unknown_fields_line(cfg)
    if unknown is not None:
        lines = [*lines, unknown]
    colour = {"running": "green", "stopped": "red"}.get(state, "yellow")
    console.print(f"pipeline {escape(cfg.id)}: [bold {colour}]{state.upper()}[/]")
    for line in lines:
        console.print(f"  {line}", markup=False, highlight=False)


# -- offsets -----------------------------------------------------------------------------


def print_offsets_and_lag(
    cfg: PipelineConfig,
    committed: Mapping[TopicPartition, int],
    console: Console,
    title: str = "committed offsets",
) -> None:
    """Per partition: Kafka's log start and high watermark (the last stable offset under
    ``read_committed``), the table's committed next offset, the lag, and the records
    between the committed offset and a log start above it: deleted by retention before
    the pipeline read them (lost on resume)."""
    from pipeline.kafka.client import KafkaMetadata, consumer_config

    s = cfg.source
    broker: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        md = KafkaMetadata(
            consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level),
            timeout_s=10,
        )
        tps = [TopicPartition(t, p) for (t, p) in committed]
        broker = {(tp.topic, tp.partition): (b.low, b.high) for tp, b in md.offsets(tps).items()}
    except PipelineError as e:
        console.print(f"lag unknown: {e.message}", markup=False, highlight=False)
    rt = RichTable(title=title)
    for col in (
        "topic",
        "partition",
        "log start",
        "high watermark",
        "committed",
        "lag",
        "below log start",
    ):
        rt.add_column(col, justify="left" if col == "topic" else "right", no_wrap=True)
    lost_total, lost_parts, beyond = 0, 0, []
    for (topic, part), off in sorted(committed.items()):
        low, high = broker.get((topic, part), (None, None))
        below = max(0, low - off) if low is not None else None
        if below:
            lost_total += below
            lost_parts += 1
        if high is not None and off > high:
            beyond.append(f"{topic}/{part}")
        rt.add_row(
            escape(topic),
            str(part),
            "-" if low is None else str(low),
            "-" if high is None else str(high),
            str(off),
            "-" if high is None else str(max(0, high - off)),
            "-" if below is None else (f"[bold red]{below}[/]" if below else "0"),
        )
    console.print(rt)
    if lost_total:
        then = (
            "the pipeline stops on them with a data-loss error (source.failOnDataLoss: true); "
            "with failOnDataLoss: false the next run skips them and records the loss"
            if s.fail_on_data_loss
            else "the next run skips them and records the loss in its commit"
        )
        console.print(
            f"{lost_total} records in {lost_parts} partition(s) were deleted by retention "
            f"before the pipeline read them (committed offset below the log start): they "
            f"are lost; {then}",
            style="bold red",
            markup=False,
            highlight=False,
        )
    if beyond:
        console.print(
            f"committed offsets beyond the high watermark on {', '.join(beyond)} "
            "(topic recreated or truncated?)",
            style="bold red",
            markup=False,
            highlight=False,
        )


def _print_journal(cfg: PipelineConfig, tables: Any, console: Console) -> None:
    if cfg.commit.mode != "exactly-once":
        console.print("commit mode at-least-once: no instant journal, no fencing")
        return
    timeline = tables.timeline(cfg.id)
    epochs = timeline.epochs()
    console.print(f"writer epoch: {epochs[-1] if epochs else 'none acquired yet'}")
    console.print(f"standby lease: {_lease_line(timeline.store)}")
    pending = timeline.pending()
    if not pending:
        console.print("pending instants: none")
        return
    rt = RichTable(title="pending instants (finished by the next run's recovery)")
    rt.add_column("instant", no_wrap=True, min_width=17)
    rt.add_column("state", no_wrap=True)
    rt.add_column("batch")
    rt.add_column("incarnation", overflow="fold")
    rt.add_column("epoch")
    rt.add_column("staged files")
    for inst in pending:
        b = inst.batch
        files = len(inst.inflight.files) if inst.inflight else "-"
        rt.add_row(
            inst.time,
            inst.state.value,
            str(b.batch_id) if b else "?",
            b.incarnation if b else "?",
            str(inst.epoch),
            str(files),
        )
    console.print(rt)


def _lease_line(store: Any) -> str:
    """Who holds the warm-standby lease (``ha.mode``), as its newest entries say."""
    from pipeline.commit.lease import LeaseStore, MarkKind

    lease = LeaseStore(store)
    latest = lease.latest()
    if latest is None:
        return "none (ha.mode off, or no replica took it yet)"
    claim = lease.claim(latest.generation)
    who = claim.owner or "?"
    if latest.kind is MarkKind.RELEASED:
        return f"generation {latest.generation} released by {who} (free)"
    link = f", liveness port {claim.endpoint}" if claim.endpoint else ""
    return f"generation {latest.generation} held by {who}{link}"
