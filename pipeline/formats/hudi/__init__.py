"""Native Hudi copy-on-write sink (the ``hudi`` table format), no JVM involved.

Table version 6, timeline layout 1, JSON commit metadata, metadata table off (see
docs/hudi.md for why). Modules:

* :mod:`~pipeline.formats.hudi.schema`  -- table spec: Arrow types written, Avro schema committed,
  key generator, record keys and hive-style partition paths.
* :mod:`~pipeline.formats.hudi.layout`  -- ``hoodie.properties``, base-file names, atomic
  files, the table lock.
* :mod:`~pipeline.formats.hudi.instant` -- instants (action, state) and their file names, built
  and parsed in one place.
* :mod:`~pipeline.formats.hudi.writer`  -- worker side: base files with the five meta columns.
* :mod:`~pipeline.formats.hudi.timeline` -- the ``.hoodie`` instant files, indexed.
* :mod:`~pipeline.formats.hudi.cow_table`   -- driver side: timeline reads, creation, commit files,
  rollback (:class:`~pipeline.formats.hudi.cow_table.HudiTable`); which tables it may write:
  :mod:`~pipeline.formats.hudi.compatibility`; trimming: :mod:`~pipeline.formats.hudi.trim`.
* :mod:`~pipeline.formats.hudi.committer` -- :class:`HudiCommitter`, the coordinator's
  ``TableCommitter``; its staged files: :mod:`~pipeline.formats.hudi.staged_files`.
* :mod:`~pipeline.formats.hudi.journal` -- the instant journal kept inside ``.hoodie/.ingest/``.
* :mod:`~pipeline.formats.hudi.pipeline_tables`   -- :class:`HudiTables`, built from the pipeline
  config like ``IcebergTables``.
* :mod:`~pipeline.formats.hudi.format`  -- :class:`HudiFormat`, the ``TableFormat``.
* :mod:`~pipeline.formats.hudi.status`  -- what ``ingest status`` shows for a Hudi table.
* :mod:`~pipeline.formats.hudi.compaction` -- :class:`HudiMaintenance`: small-file compaction
  (``replacecommit``; files rewritten by :mod:`~pipeline.formats.hudi.rewrite`), file
  statistics; :mod:`~pipeline.formats.hudi.orphans` -- orphan cleanup; both over
  :mod:`~pipeline.formats.hudi.view`, the base files as readers see them.
"""
