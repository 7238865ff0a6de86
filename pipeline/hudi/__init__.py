"""Native Hudi copy-on-write sink (``sink.format: hudi``), no JVM involved.

Table version 6, timeline layout 1, JSON commit metadata, metadata table off (see
docs/hudi.md for why). Modules:

* :mod:`~pipeline.hudi.schema`  -- table spec: Arrow types written, Avro schema committed,
  key generator, record keys and hive-style partition paths.
* :mod:`~pipeline.hudi.layout`  -- ``hoodie.properties``, instant/base-file names, atomic
  files, the table lock.
* :mod:`~pipeline.hudi.writer`  -- worker side: base files with the five meta columns.
* :mod:`~pipeline.hudi.table`   -- driver side: timeline reads, creation, commit, rollback,
  and :class:`~pipeline.hudi.table.HudiCommitter` (the coordinator's ``TableCommitter``).
* :mod:`~pipeline.hudi.journal` -- the instant journal kept inside ``.hoodie/.ingest/``.
* :mod:`~pipeline.hudi.sinks`   -- :class:`~pipeline.hudi.sinks.HudiSinks`, built from the
  pipeline config like ``IcebergSinks``.
"""
