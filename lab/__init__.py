"""The lab: what a developer runs from a checkout to test and measure the pipeline.

Never imported by the runtime (``pipeline``; an import contract says so) and never shipped
with it (not in its wheel, its image or its ``--py-files`` zip). Its own distribution
(``lab/pyproject.toml``, installed editable by ``scripts/bootstrap.sh``) adds its commands
to ``ingest`` through the ``ingest.commands`` entry points (``pipeline/cli/plugins.py``).

- :mod:`~lab.broker`, :mod:`~lab.cluster`, :mod:`~lab.pgcluster`, :mod:`~lab.objectstore`,
  :mod:`~lab.registry`: launchers of real test services (Apache Kafka, a Spark standalone
  cluster, PostgreSQL, SeaweedFS, a Schema Registry) and :mod:`~lab.ports`
- :mod:`~lab.events` (the generated events), :mod:`~lab.generator` (producing them to
  Kafka), :mod:`~lab.avro_events`, :mod:`~lab.protobuf_events`: events
- :mod:`~lab.demo`: ``ingest demo``
- :mod:`~lab.drill`: ``ingest drill``, the failover drills (they start and kill their own
  brokers, producers and pipelines)
- :mod:`~lab.bench` and :mod:`~lab.peers`: ``ingest bench`` and the peers beside it
- :mod:`~lab.cli`: the commands' options (``demo``, ``broker``, ``produce``, ``drill``,
  ``bench``)
"""
