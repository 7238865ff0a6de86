"""``ingest bench``: the benchmark harness (docs/bench.md).

* :mod:`~pipeline.tools.bench.dataset` — broker and the pre-produced data set
* :mod:`~pipeline.tools.bench.raw` — the raw single-process ceiling
* :mod:`~pipeline.tools.bench.driver` — a pipeline driver process, sampled with psutil
* :mod:`~pipeline.tools.bench.runs` / :mod:`~pipeline.tools.bench.presets` — what runs
* :mod:`~pipeline.tools.bench.sections` — each report section
* :mod:`~pipeline.tools.bench.commits` — commit-cost growth through the real protocol
* :mod:`~pipeline.tools.bench.freshness` — steady-rate freshness and recovery time
* :mod:`~pipeline.tools.bench.stats` — percentiles, windows, steady throughput (pure)
* :mod:`~pipeline.tools.bench.report` — report.json, console table, PNG charts
* :mod:`~pipeline.tools.bench.runner` — orchestration
"""
