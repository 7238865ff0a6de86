"""A checkpoint location Spark cannot use is refused before the run has any side effect.

``pipeline.preflight`` checks local paths with ``os.access``, which root passes almost
everywhere: ``/proc/no/such/ck`` looked writable to it, so the run took a writer epoch,
created the warehouse and only then failed inside Spark (``Py4JJavaError ... o78.start``,
exit 1). The start path now proves the location usable first (a probe created and
deleted where Spark will write), and ``ingest run`` prints one line naming it, exit 2.
"""

from __future__ import annotations

from pathlib import Path

from support.drivers import pipeline_config, run_driver, write_config
from support.kafka_fixtures import KafkaTestBroker

BAD = "/proc/no/such/ck"


def test_unusable_checkpoint_location_is_one_line_exit_2_before_anything_is_created(
    tmp_path: Path, kafka_broker: KafkaTestBroker
) -> None:
    topic = kafka_broker.new_topic("ck-probe", 1)
    warehouse = tmp_path / "warehouse"
    sink = {"catalog": {"warehouse": str(warehouse)}, "table": "db.events"}
    cfg = pipeline_config(tmp_path, kafka_broker.bootstrap_servers, topic, sink)
    cfg["checkpointLocation"] = BAD
    r = run_driver(write_config(tmp_path, cfg))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert 1 <= len(err) <= 2, r.stderr
    assert BAD in err[0] and "checkpointLocation" in err[0], err
    # nothing created: no warehouse (catalog, table, journal with its writer epochs)
    assert not warehouse.exists(), sorted(str(p) for p in warehouse.rglob("*"))


def test_probe_leaves_a_usable_location_as_it_found_it(tmp_path: Path) -> None:
    from pipeline.runtime.checkpoint_probe import probe_checkpoint_location

    existing = tmp_path / "ck"
    existing.mkdir()
    probe_checkpoint_location(str(existing))
    assert list(existing.iterdir()) == []  # the probe file is gone
    fresh = tmp_path / "new" / "ck"
    probe_checkpoint_location(f"file://{fresh}")
    assert not (tmp_path / "new").exists()  # Spark creates it; the probe left nothing


def test_probe_names_the_location_it_cannot_use(tmp_path: Path) -> None:
    from pipeline.runtime.checkpoint_probe import CheckpointLocationError, probe_checkpoint_location

    blocker = tmp_path / "file"
    blocker.write_text("x")
    for bad in (BAD, str(blocker / "ck")):
        try:
            probe_checkpoint_location(bad)
        except CheckpointLocationError as e:
            assert bad in str(e) and "checkpointLocation" in str(e)
            assert "\n" not in str(e)
        else:
            raise AssertionError(f"{bad}: no error")
