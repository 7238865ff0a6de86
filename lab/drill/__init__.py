"""Failover drills: a live Kafka cluster (real brokers), a rate producer, the pipeline as
its own OS process, a schedule of injected faults, then an exactly-once verification
(``ingest drill``).

model.py            named types: scenario spec, fault events, timeline samples, results
brokers.py          the drill's Kafka cluster (started per drill, or an external one)
producer.py         the rate producer: what it acknowledged is what the tables must hold
driver.py           one ``ingest run`` as its own process group
pipeline_config.py  the pipeline config a drill runs
rig.py              the live rig: ties those together, samples the committed offsets
services.py         the services a drill may start beside Kafka (registry, S3, REST catalog)
verdict.py          the final count: our own against the producer, and ``ingest verify``
count.py            the tables' records counted against the acknowledged offsets (a
                    routed set: once over its tables, each in its route's table)
scenarios/          one function per scenario, a module per kind of fault
report.py           rich table, JSON report, PNG timeline
runner.py           matrix selection and the live progress display
compactions.py      the kill/zombie drills' background compaction and its commits seen
files.py            the file-economy run (``ingest drill --files``): compaction on vs off
soak.py             the soak (``ingest drill --soak``): random faults on a warm-standby pair
soak_schedule.py    the soak's fault schedule (pure)
soak_summary.py     the soak's record and report summary (pure)
"""
