"""What ``ingest verify`` reports: per-partition verdicts, range issues, one report per table.

Pure data (no I/O). Every count is about Kafka coordinates ``(topic, partition, offset)``:

* ``expected``: records Kafka returns inside the committed ranges (log start and beyond);
* ``present``: rows in the main + dead-letter tables for that partition (every copy);
* ``missing``: expected offsets with no row; ``duplicated``: copies beyond the first;
* ``unexpected``: offsets in a table that Kafka's committed ranges do not hold (rows
  outside every committed range count once per row);
* ``mismatched``: present offsets whose row differs from the Kafka record;
* ``unverifiable``: committed offsets below the partition's log start (deleted by
  retention after they were committed): never counted as missing;
* ``lost``: offsets the commits record as skipped data loss (expected 0 rows there).

A report is ``ok`` when nothing is missing, duplicated, unexpected or mismatched and the
committed ranges have no gap or overlap; it is ``complete`` when nothing is unverifiable.
Its coverage: ``checked`` (= expected) of ``checked + unverifiable`` committed records,
and why the rest could not be checked (:data:`BELOW_LOG_START`, :data:`TOPIC_GONE`). The
verdict line never says EXACTLY ONCE without saying how many records that covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.commit.offsets import TopicPartition

SAMPLE_LIMIT = 10  # sample offsets kept per kind and partition

# why committed offsets could not be checked (VerifyReport.unverifiable_reasons keys)
BELOW_LOG_START = "below the log start: deleted by retention after commit, before verify"
TOPIC_GONE = "topic no longer exists"

COUNT_FIELDS = (
    "expected",
    "present",
    "missing",
    "duplicated",
    "mismatched",
    "unexpected",
    "unverifiable",
    "lost",
)


def _add_samples(into: list[int], offsets: Any) -> None:
    """Keep the first SAMPLE_LIMIT offsets (in the order they were found)."""
    room = SAMPLE_LIMIT - len(into)
    if room > 0:
        into.extend(int(o) for o in list(offsets)[:room])


@dataclass
class PartitionVerdict:
    expected: int = 0
    present: int = 0
    missing: int = 0
    duplicated: int = 0
    mismatched: int = 0
    unexpected: int = 0
    unverifiable: int = 0
    lost: int = 0
    missing_offsets: list[int] = field(default_factory=list)
    duplicated_offsets: list[int] = field(default_factory=list)
    mismatched_offsets: list[int] = field(default_factory=list)
    unexpected_offsets: list[int] = field(default_factory=list)
    # field name -> rows whose value differs from the decoded Kafka record
    mismatched_fields: dict[str, int] = field(default_factory=dict)
    # merged committed ranges [start, end) of this partition (for display)
    ranges: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.mismatched or self.unexpected)

    def add(self, other: PartitionVerdict) -> None:
        """Accumulate ``other`` (counts, samples, field counts) into this verdict."""
        for name in COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        _add_samples(self.missing_offsets, other.missing_offsets)
        _add_samples(self.duplicated_offsets, other.duplicated_offsets)
        _add_samples(self.mismatched_offsets, other.mismatched_offsets)
        _add_samples(self.unexpected_offsets, other.unexpected_offsets)
        for name, n in other.mismatched_fields.items():
            self.mismatched_fields[name] = self.mismatched_fields.get(name, 0) + n

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in COUNT_FIELDS}
        out["samples"] = {
            "missing": self.missing_offsets,
            "duplicated": self.duplicated_offsets,
            "mismatched": self.mismatched_offsets,
            "unexpected": self.unexpected_offsets,
        }
        out["mismatched_fields"] = dict(sorted(self.mismatched_fields.items()))
        out["ranges"] = [list(r) for r in self.ranges]
        return out


@dataclass(frozen=True)
class RangeIssue:
    """Something wrong with the committed offset ranges of one partition.

    ``kind``: ``gap`` (offsets between two commits that no commit covers and no data-loss
    record explains), ``overlap`` (two commits claim the same offsets), ``beyond-log-end``
    (committed offsets Kafka never had: topic recreated or truncated), ``committed-offsets``
    (the cumulative committed offset disagrees with the ranges' end).
    """

    kind: str
    tp: TopicPartition
    start: int
    end: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "start": self.start,
            "end": self.end,
            "detail": self.detail,
        }

    def __str__(self) -> str:
        where = f"{self.tp.topic}/{self.tp.partition} [{self.start}, {self.end})"
        return f"{self.kind} {where}: {self.detail}"


@dataclass
class TableVerdict:
    """One table of a routed set (``sink.routes``): its rows within the committed ranges.

    ``missing``: records the route gives this table that no table of the set holds
    (records whose route could not be told count for the set only); ``duplicated``: rows
    of this table whose record the set holds more than once (in this table or another);
    ``misrouted``: rows whose routing column names another table; ``unexpected``: rows
    Kafka's committed ranges do not hold. The dead-letter table is one entry, counted once.
    """

    table: str
    index: int | None  # the route's index; None: the shared dead-letter table
    records: int = 0
    missing: int = 0
    duplicated: int = 0
    misrouted: int = 0
    unexpected: int = 0
    missing_offsets: list[str] = field(default_factory=list)  # "topic/partition@offset"
    duplicated_offsets: list[str] = field(default_factory=list)
    misrouted_offsets: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.misrouted or self.unexpected)

    def problems(self) -> str:
        """``2 missing, 1 misrouted`` (empty when ok)."""
        counts = (
            ("missing", self.missing),
            ("duplicated", self.duplicated),
            ("misrouted", self.misrouted),
            ("unexpected", self.unexpected),
        )
        return ", ".join(f"{n} {name}" for name, n in counts if n)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "route_index": self.index,
            "dead_letter": self.index is None,
            "ok": self.ok,
            "records": self.records,
            "missing": self.missing,
            "duplicated": self.duplicated,
            "misrouted": self.misrouted,
            "unexpected": self.unexpected,
            "samples": {
                "missing": self.missing_offsets,
                "duplicated": self.duplicated_offsets,
                "misrouted": self.misrouted_offsets,
            },
        }


@dataclass
class VerifyReport:
    """The verdict for one main table (with its dead-letter table), or for a routed set:
    its main tables together (``tables``: each one's verdict, the dead-letter table last)."""

    table_format: str
    table: str
    partitions: dict[TopicPartition, PartitionVerdict] = field(default_factory=dict)
    range_issues: list[RangeIssue] = field(default_factory=list)
    dead_letter_table: str | None = None
    commits: int = 0  # commits carrying a consumption checkpoint that were walked
    notes: list[str] = field(default_factory=list)
    payload_checked: bool = True
    payload_columns: list[str] = field(default_factory=list)  # the main table's, compared
    window: int = 0
    seconds: float = 0.0
    # why offsets are unverifiable -> how many (sums to totals().unverifiable)
    unverifiable_reasons: dict[str, int] = field(default_factory=dict)
    tables: list[TableVerdict] = field(default_factory=list)  # a routed set's tables

    @property
    def ok(self) -> bool:
        """Nothing wrong found in what could be checked."""
        return (
            not self.range_issues
            and all(v.ok for v in self.partitions.values())
            and all(t.ok for t in self.tables)
        )

    @property
    def complete(self) -> bool:
        """Every committed offset could be checked (nothing unverifiable)."""
        return not any(v.unverifiable for v in self.partitions.values())

    def add_unverifiable(self, reason: str, n: int) -> None:
        if n:
            self.unverifiable_reasons[reason] = self.unverifiable_reasons.get(reason, 0) + n

    def coverage(self) -> dict[str, Any]:
        """Checked / unverifiable / why, as the JSON report carries it."""
        t = self.totals()
        total = t.expected + t.unverifiable
        reasons = dict(self.unverifiable_reasons)
        unexplained = t.unverifiable - sum(reasons.values())
        if unexplained > 0:
            reasons[BELOW_LOG_START] = reasons.get(BELOW_LOG_START, 0) + unexplained
        return {
            "checked": t.expected,
            "unverifiable": t.unverifiable,
            "total": total,
            "complete": t.unverifiable == 0,
            "checked_fraction": round(t.expected / total, 6) if total else 1.0,
            "unverifiable_reasons": dict(sorted(reasons.items())),
        }

    def coverage_text(self) -> str:
        """``all 600 records checked`` or ``15,401 of 50,000 records checked; 34,599
        unverifiable (<why>)``."""
        c = self.coverage()
        if c["complete"]:
            return f"all {c['checked']:,} committed records checked"
        reasons = c["unverifiable_reasons"]
        why = (
            next(iter(reasons))
            if len(reasons) == 1
            else "; ".join(f"{n:,} {r}" for r, n in reasons.items())
        )
        return (
            f"{c['checked']:,} of {c['total']:,} committed records checked; "
            f"{c['unverifiable']:,} unverifiable ({why})"
        )

    def totals(self) -> PartitionVerdict:
        total = PartitionVerdict()
        for tp in sorted(self.partitions):
            total.add(self.partitions[tp])
        return total

    def verdict(self) -> str:
        """One line with the coverage first, then the totals:

        * ``EXACTLY ONCE for all N committed records checked (…)``: clean and complete;
        * ``EXACTLY ONCE for the 15,401 of 50,000 committed records checked; 34,599
          unverifiable (why) (…)``: clean, but only for what could be checked;
        * ``NOTHING VERIFIED: 0 of N …``: every committed record is unverifiable;
        * ``NOT EXACTLY ONCE (…): …; <coverage>``: something is wrong.
        """
        t = self.totals()
        where = f"({self.table_format} {self.table})"
        cov = self.coverage_text()
        if not self.ok:
            head = f"NOT EXACTLY ONCE {where}, {cov}"
        elif self.complete:
            head = f"EXACTLY ONCE for {cov} {where}"
        elif t.expected == 0:
            head = f"NOTHING VERIFIED {where}: {cov}"
        else:
            head = f"EXACTLY ONCE for the {cov} {where}"
        parts = [
            f"{t.expected} expected",
            f"{t.present} present",
            f"{t.missing} missing",
            f"{t.duplicated} duplicated",
            f"{t.unexpected} unexpected",
        ]
        if self.payload_checked:
            parts.append(f"{t.mismatched} mismatched")
        if t.unverifiable:
            parts.append(f"{t.unverifiable} unverifiable")
        if t.lost:
            parts.append(f"{t.lost} lost (recorded data loss)")
        parts.append(f"{len(self.range_issues)} range issues")
        line = f"{head}: " + ", ".join(parts)
        off = [f"{t.table} ({t.problems()})" for t in self.tables if not t.ok]
        if off:
            line += f"; tables off: {'; '.join(off)}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_format": self.table_format,
            "table": self.table,
            "dead_letter_table": self.dead_letter_table,
            "ok": self.ok,
            "complete": self.complete,
            "coverage": self.coverage(),
            "verdict": self.verdict(),
            "commits": self.commits,
            "payload_checked": self.payload_checked,
            "payload_columns": self.payload_columns,
            "window": self.window,
            "seconds": round(self.seconds, 3),
            "totals": self.totals().to_dict(),
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, **v.to_dict()}
                for tp, v in sorted(self.partitions.items())
            ],
            "range_issues": [i.to_dict() for i in self.range_issues],
            "tables": [t.to_dict() for t in self.tables],
            "notes": list(self.notes),
        }
