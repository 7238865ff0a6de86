"""Native Hudi copy-on-write sink (``sink.format: hudi``), no JVM involved.

Table version 6, timeline layout 1, JSON commit metadata, metadata table off (see
docs/hudi.md for why). Modules:

* :mod:`~pipeline.formats.hudi.schema`  -- table spec: Arrow types written, Avro schema committed,
  key generator, record keys and hive-style partition paths.
* :mod:`~pipeline.formats.hudi.layout`  -- ``hoodie.properties``, instant/base-file names, atomic
  files, the table lock.
* :mod:`~pipeline.formats.hudi.writer`  -- worker side: base files with the five meta columns.
* :mod:`~pipeline.formats.hudi.table`   -- driver side: timeline reads, creation, commit, rollback,
  and :class:`~pipeline.formats.hudi.table.HudiCommitter` (the coordinator's ``TableCommitter``).
* :mod:`~pipeline.formats.hudi.journal` -- the instant journal kept inside ``.hoodie/.ingest/``.
* :mod:`~pipeline.formats.hudi.sinks`   -- :class:`HudiSinks`, built from the pipeline
  config like ``IcebergSinks``.
"""
