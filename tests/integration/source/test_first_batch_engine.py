"""A new pipeline's first batch decodes on the configured (arrow) engine: the driver pins
where a new checkpoint starts (``earliest``/``latest``) to explicit offsets before the
query starts, so it knows the first batch's start and the tasks read its ranges
themselves, instead of Spark decoding the batch's rows with ``from_json`` (a first batch
costing many times a steady one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.drivers import coords, iceberg_config, produced
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline


def _sql_plans(spark: Any) -> list[str]:
    """Physical plans of the SQL executions the session ran (its status store)."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return [str(executions.apply(i).physicalPlanDescription()) for i in range(executions.size())]


def test_first_batch_of_a_new_pipeline_is_not_decoded_by_spark(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("first", 3)
    sent = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=600, seed=5))
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic)  # table → earliest
    seen = len(_sql_plans(spark))
    p = Pipeline(cfg, spark)
    assert p.run().batches == 1
    assert coords(p) == produced(sent)
    plans = _sql_plans(spark)[seen:]
    assert plans, "no SQL execution seen: the probe no longer observes the session"
    assert not [plan for plan in plans if "from_json" in plan], plans


def _marker_job(spark: Any, group: str) -> int:
    """Run one trivial job under ``group`` (on a thread of its own: a job group is a
    thread's property) and return its id."""
    import threading

    sc = spark.sparkContext

    def run() -> None:
        sc.setJobGroup(group, "test marker")
        sc.parallelize([0], 1).count()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    (job,) = sc.statusTracker().getJobIdsForGroup(group)
    return int(job)


@pytest.mark.parametrize("ha_mode", ["off", "auto"])
def test_a_plain_run_starts_its_python_workers_before_its_first_batch(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, ha_mode: str
) -> None:
    """The first batch's tasks would wait for the worker daemon to start and import the
    task path (~1.2 CPU-s, before any worker forks): a run that did not stand by (a standby
    warms up while it waits) starts its workers while Spark starts the query and plans;
    with ``ha.mode: auto`` too, when it takes a free lease at once."""
    from pipeline.spark.session import WARM_UP_GROUP

    topic = kafka_broker.new_topic("warm", 2)
    sent = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=6))
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic)
    cfg = cfg.model_copy(update={"ha": cfg.ha.model_copy(update={"mode": ha_mode})})
    tracker = spark.sparkContext.statusTracker()
    warmed_before = set(tracker.getJobIdsForGroup(WARM_UP_GROUP))
    first = _marker_job(spark, f"before-{topic}")
    p = Pipeline(cfg, spark)
    assert p.run().batches == 1
    last = _marker_job(spark, f"after-{topic}")
    assert coords(p) == produced(sent)
    warm = set(tracker.getJobIdsForGroup(WARM_UP_GROUP)) - warmed_before
    assert warm, "the run started no warm-up job"
    assert all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in warm)
    batch_jobs = set(range(first + 1, last)) - warm
    assert batch_jobs, "no job of the batch seen between the markers"
    assert max(warm) < min(batch_jobs), (sorted(warm), sorted(batch_jobs))
