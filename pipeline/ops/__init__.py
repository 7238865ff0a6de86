"""What an operator runs against a production pipeline's tables: ``ingest status``
(:mod:`~pipeline.ops.status`), ``ingest compact`` (:mod:`~pipeline.ops.compact`) and
``ingest verify`` (:mod:`~pipeline.ops.verify`). The test rigs are in the lab (``lab/``)."""
