"""Errors the pipeline raises on purpose.

Every error here carries a message meant for an operator: it names the bad key, the
partition, the offsets. The CLI prints ``PipelineError`` subclasses as one line and exits
non-zero; anything else is a bug and keeps its stack trace.

Errors raised inside Spark tasks or the Python streaming source's planner reach the driver
wrapped in Spark exceptions; :func:`find_pipeline_error` recovers them by the
``[ingest:<code>]`` tag every message starts with.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_TAG = re.compile(r"\[ingest:(?P<code>[a-z-]+)\] (?P<msg>[^\n]*)")


class PipelineError(Exception):
    """Base class: an error an operator can act on, printed as one line."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(f"[ingest:{self.code}] {message}")
        self.message = message


class ConfigError(PipelineError):
    code = "config"


class SchemaChangeRefused(ConfigError):
    """The configured columns differ from the table's in a way no restart may apply (a
    dropped column, a narrowing, a new required column ...): refused before any side effect,
    exit 2 like every configuration error."""

    code = "schema-change"


class BrokerUnavailableError(PipelineError):
    code = "broker-unavailable"


class SchemaAdvanced(PipelineError):
    """The registry holds a newer version of the table's subject than the table was built
    from: raised on the driver before a batch has any side effect, so the run restarts the
    query on the new version (the table evolves first) and reads the batch again."""

    code = "schema-advanced"


class RegistryUnavailable(PipelineError):
    """The Schema Registry did not answer within ``decode.registry.retrySeconds``, or
    refused the pipeline's requests (authentication, permissions)."""

    code = "registry-unavailable"


class DataLossError(PipelineError):
    """Offsets we must read are gone from Kafka (retention) and failOnDataLoss is true."""

    code = "data-loss"


class PartitionStateError(PipelineError):
    """A partition vanished, or its end moved below our next offset."""

    code = "partition-state"


class TopicRecreatedError(PartitionStateError):
    """A topic's id changed since the checkpoint: it was deleted and created again, so its
    offsets restarted and say nothing about what was read."""

    code = "topic-recreated"


class LogTruncatedError(PartitionStateError):
    """The same topic's log now ends below our next offset: the broker truncated it
    (an unclean leader election), and new records will reuse offsets already ingested."""

    code = "log-truncated"


class CommitError(PipelineError):
    code = "commit"


class CatalogUnavailableError(CommitError):
    """The table catalog did not answer within ``commit.catalogRetrySeconds``."""

    code = "catalog-unavailable"


class FencedError(CommitError):
    """A newer writer epoch owns the table: this writer is a zombie and must stop."""

    code = "fenced"


class LeaseLostError(FencedError):
    """Another replica took the standby lease (or this one could not renew it): stop."""

    code = "lease-lost"


class TableSetChanged(CommitError):
    """A pending instant staged files for a table the configured set no longer holds
    (a route removed or renamed before the instant was recovered)."""

    code = "table-set"


class TableSetGrew(PipelineError):
    """A batch holds a topic of ``source.topicPattern`` that ``sink.routes.template`` gives
    a table the running set lacks: raised before the batch's effects, so the run starts
    again with that table and Spark replays the batch."""

    code = "table-set-grew"


class OverlapError(PipelineError):
    """The batch re-reads offsets the table already holds and ``onOverlap: fail``."""

    code = "overlap"


class GapError(PipelineError):
    """A batch starts above the table's committed offsets (docs/design.md invariant 8):
    the records in between were never committed, and ``commit.onGap: fail``."""

    code = "gap"


class CoverageError(PipelineError):
    """The tasks did not read exactly the batch's ranges (docs/design.md invariant 8)."""

    code = "coverage"


class EnvironmentProblem(PipelineError):
    """The runtime is missing something (Java, a jar)."""

    code = "environment"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__``, else
    ``__context__``), each once: the one walk down an exception's causes."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def exception_texts(exc: BaseException) -> list[str]:
    """The messages of ``exc`` and the exceptions it was raised from, Spark's wrappers
    included (a pyspark ``StreamingQueryException`` keeps its text in ``desc``)."""
    texts: list[str] = []
    for cur in causes(exc):
        texts.append(str(cur))
        desc = getattr(cur, "desc", None)  # not a dataclass: Spark's wrappers, when present
        if isinstance(desc, str):
            texts.append(desc)
    return texts


def is_fencing_error(exc: BaseException) -> bool:
    """A newer writer epoch owns the table (also when Spark wrapped the error)."""
    return any(isinstance(cur, FencedError) for cur in causes(exc)) or any(
        "[ingest:fenced]" in text for text in exception_texts(exc)
    )


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """A short single-line reason for ``exc``: the pipeline error message inside it (also
    when Spark wrapped it), else its type and the first line of its message; whitespace
    collapsed, at most ``limit`` characters."""
    if isinstance(exc, str):
        text = exc
    else:
        found = find_pipeline_error(exc)
        if found is None:
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            found = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        text = found
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def find_pipeline_error(exc: BaseException, *, tagged: bool = False) -> str | None:
    """The first pipeline error message inside ``exc`` (also when Spark wrapped it);
    ``tagged``: with its ``[ingest:<code>]`` tag."""
    for text in exception_texts(exc):
        m = _TAG.search(text)
        if m:
            return m.group(0).strip() if tagged else m.group("msg").strip()
    return None
