"""The operator's case: an Iceberg table rolled back by hand under a running
pipeline's checkpoint (docs/design.md invariant 8).

1,000 records in four batches, the table rolled back to the snapshot holding 500 with
pyiceberg's public API, 200 more produced, ``run`` again. Before the gap check: no error and
700 rows (500 records silently skipped). Now: one ``[ingest:gap]`` line naming the
partitions and offsets, nothing staged; ``ingest verify`` reports the same ranges;
``commit.onGap=rewind`` re-reads them and the table ends with every record once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.drivers import coords, iceberg_config, produced
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.errors import find_pipeline_error
from pipeline.ops.verify import verify_pipeline


def _committed(snapshot: Any, topic: str) -> dict[int, int]:
    props = snapshot.summary.additional_properties
    if "ingest.committed-offsets" not in props:
        return {}
    return {int(p): o for p, o in json.loads(props["ingest.committed-offsets"])[topic].items()}


@pytest.mark.slow  # default suite under 12 minutes: CI's slow stage runs it
def test_rolled_back_table_under_a_checkpoint_is_refused_then_rewound(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("rolled-back", 2)
    cfg = iceberg_config(tmp_path, bootstrap, topic)
    runs = []
    for k in range(4):
        runs.append(produce(bootstrap, topic, GeneratorSpec(count=250, seed=290 + k)))
        Pipeline(cfg, spark).run()
    table = Pipeline(cfg, spark).tables.main.table()
    assert table is not None
    ours = [
        s
        for s in table.snapshots()
        if _committed(s, topic) and s.summary.additional_properties.get("ingest.fence") != "true"
    ]
    assert [sum(_committed(s, topic).values()) for s in ours] == [250, 500, 750, 1000]
    second = ours[1]
    held = _committed(second, topic)
    table.manage_snapshots().rollback_to_snapshot(second.snapshot_id).commit()

    r5 = produce(bootstrap, topic, GeneratorSpec(count=200, seed=299))
    with pytest.raises(Exception) as err:
        Pipeline(cfg, spark).run()
    line = find_pipeline_error(err.value, tagged=True)
    assert line is not None and line.startswith("[ingest:gap] batch "), line
    ahead = {p: b + 1 for (_, p), (_, b) in runs[3].offsets.items()}  # the checkpoint's
    for p, c in held.items():
        if ahead[p] > c:
            assert f"{topic}[{p}] [{c}, {ahead[p]})" in line, line
    p = Pipeline(cfg, spark)
    assert sum(coords(p).values()) == 500  # nothing committed

    # ingest verify on the same table reports the same ranges as gaps
    (report,) = verify_pipeline(cfg, payload=False)
    gaps = {(i.tp.partition, i.start, i.end) for i in report.range_issues if i.kind == "gap"}
    assert gaps == {(p_, c, ahead[p_]) for p_, c in held.items() if ahead[p_] > c}
    assert not report.ok

    rewind = cfg.model_copy(update={"commit": cfg.commit.model_copy(update={"on_gap": "rewind"})})
    p = Pipeline(rewind, spark)
    p.run()
    assert coords(p) == produced(*runs, r5)  # every record once
