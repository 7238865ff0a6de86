"""A new pipeline's first batch decodes on the configured (arrow) engine: the driver pins
where a new checkpoint starts (``earliest``/``latest``) to explicit offsets before the
query starts, so it knows the first batch's start and the tasks read its ranges
themselves, instead of Spark decoding the batch's rows with ``from_json`` (a first batch
costing many times a steady one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.drivers import coords, iceberg_config, produced
from support.kafka_fixtures import KafkaTestBroker

from pipeline.app import Pipeline
from pipeline.tools.generator import GeneratorSpec, produce


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
