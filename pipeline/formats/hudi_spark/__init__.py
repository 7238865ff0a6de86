"""Hudi's own Spark writer (``hudi-spark3.5-bundle_2.12``) in the pipeline's two phases.

:mod:`pipeline.formats.hudi_spark.client` drives our JVM helper
(``pipeline/resources/hudi-writer``, :class:`ingest.hudi.TwoPhaseWriter`) through py4j:
the instant requested on Hudi's timeline, data files written by Hudi on the executors with
the instant left inflight, the instant completed later -- in another process if need be --
from the recorded write statistics with ``commitStats``, or rolled back by Hudi.
"""
