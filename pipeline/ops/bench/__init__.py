"""``ingest bench``: the benchmark harness (docs/bench.md).

* :mod:`~pipeline.ops.bench.dataset` — broker and the pre-produced data set
* :mod:`~pipeline.ops.bench.raw` — the raw single-process ceiling
* :mod:`~pipeline.ops.bench.driver` — a pipeline driver process, sampled with psutil
* :mod:`~pipeline.ops.bench.runs` / :mod:`~pipeline.ops.bench.presets` — what runs
* :mod:`~pipeline.ops.bench.sections` — each report section
* :mod:`~pipeline.ops.bench.commits` — commit-cost growth through the real protocol
* :mod:`~pipeline.ops.bench.freshness` — steady-rate freshness and recovery time
* :mod:`~pipeline.ops.bench.stats` — percentiles, windows, steady throughput (pure)
* :mod:`~pipeline.ops.bench.report` — report.json, console table, PNG charts
* :mod:`~pipeline.ops.bench.runner` — orchestration
"""
