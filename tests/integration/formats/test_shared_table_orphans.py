"""Orphan cleanup on a table two pipelines write (docs/design.md invariant
11): one pipeline's cleanup, with no safety interval at all, keeps the files of
the OTHER pipeline's pending instant, and that pipeline's next run recommits it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

HOUR = 3600.0


def _age_all(root: Path, seconds: float) -> None:
    past = time.time() - seconds
    for p in root.rglob("*.parquet"):
        os.utime(p, (past, past))


@pytest.mark.parametrize("fmt", ["iceberg", "hudi"])
def test_cleanup_keeps_another_pipelines_pending_files(
    fmt: str, spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    from support.drivers import coords, iceberg_config, produced

    from integration.formats.hudi.test_hudi_pipeline import coords as hudi_coords
    from integration.formats.hudi.test_hudi_pipeline import hudi_config
    from lab.generator import GeneratorSpec, produce
    from pipeline.app import Pipeline
    from pipeline.commit.instant import InstantState
    from pipeline.config import parse_config
    from pipeline.maintenance_scheduler import Maintenance

    topic = kafka_broker.new_topic(f"shared-{fmt}", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=600, seed=29))
    if fmt == "iceberg":
        ours = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic)
        data_root = tmp_path / "warehouse"
    else:
        ours = parse_config(hudi_config(tmp_path, kafka_broker.bootstrap_servers, topic))
        data_root = tmp_path / "lake" / "events"
    other = ours.model_copy(
        update={
            "id": "other",
            "checkpoint_location": str(tmp_path / "other-checkpoint"),
            "source": ours.source.model_copy(update={"max_records_per_trigger": 300}),
        }
    )
    Pipeline(ours, spark).run(timeout_s=120)
    cut_off = other.model_copy(
        update={"commit": other.commit.model_copy(update={"faults": "after-precommit:raise@1"})}
    )
    with pytest.raises(Exception) as failed:
        Pipeline(cut_off, spark).run(timeout_s=120)
    assert "fault injected at after-precommit" in str(failed.value)
    theirs = Pipeline(other, spark)
    assert theirs.timeline is not None
    (pending,) = theirs.timeline.pending()
    assert pending.state is InstantState.INFLIGHT and pending.inflight is not None
    staged = {f.path.removeprefix("file://") for f in pending.inflight.files}
    assert staged and all(Path(p).exists() for p in staged)
    _age_all(data_root, 2 * HOUR)

    Maintenance(ours, Pipeline(ours, spark).tables).remove_orphans(older_than_s=0)
    lost = sorted(p for p in staged if not Path(p).exists())
    assert not lost, f"cleanup of pipeline {ours.id} deleted pending files of 'other': {lost}"
    theirs.run(timeout_s=120)  # recovery recommits the cut-off batch, then drains
    rows = coords(theirs) if fmt == "iceberg" else hudi_coords(tmp_path)
    assert rows == produced(r) + produced(r)  # each pipeline: every record once
