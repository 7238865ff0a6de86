"""``ingest bench``: the benchmark harness (docs/bench.md).

* :mod:`~lab.bench.dataset` — broker and the pre-produced data set
* :mod:`~lab.bench.raw` — the raw single-process ceiling
* :mod:`~lab.bench.driver` — a pipeline driver process, sampled with psutil
* :mod:`~lab.bench.runs` / :mod:`~lab.bench.presets` — what runs
* :mod:`~lab.bench.raw_ceiling`, :mod:`~lab.bench.throughput`, :mod:`~lab.bench.derived`
  (overhead, commit latency, CPU per record), :mod:`~lab.bench.memory` — report sections
* :mod:`~lab.bench.commits` — commit-cost growth through the real protocol
* :mod:`~lab.bench.freshness` — steady-rate freshness and recovery time (sections)
* :mod:`~lab.bench.stats` — percentiles, windows, steady throughput (pure)
* :mod:`~lab.bench.report` — report.json, console table, PNG charts
* :mod:`~lab.bench.runner` — orchestration
"""
