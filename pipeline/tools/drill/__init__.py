"""Failover drills: a live Kafka cluster (real brokers), a rate producer, the pipeline as
its own OS process, a schedule of injected faults, then an exactly-once verification
(``ingest drill``).

model.py        named types: scenario spec, fault events, timeline samples, results
harness.py      the live rig (Kafka cluster, producer thread, driver subprocess, sampler)
scenarios.py    one function per scenario
report.py       rich table, JSON report, PNG timeline
runner.py       matrix selection and the live progress display
compactions.py  the kill/zombie drills' background compaction and its commits seen
files.py        the file-economy run (``ingest drill --files``): compaction on vs off
"""
