"""``ingest`` command line: one module per command group.

- :mod:`~pipeline.cli.common`: the Typer app, consoles, shared options, the log file, and
  the refusals that run before a command opens anything
- :mod:`~pipeline.cli.entry`: :func:`main`, the one error path of every command
- :mod:`~pipeline.cli.run`: ``run`` (and its stop signals)
- :mod:`~pipeline.cli.tables`: ``status``, ``compact``, ``verify``
- :mod:`~pipeline.cli.kafka_tools`: ``broker``, ``produce``
- :mod:`~pipeline.cli.demo`: ``demo``
- :mod:`~pipeline.cli.drill`: ``drill`` (with ``--soak`` and ``--files``)
- :mod:`~pipeline.cli.bench`: ``bench``
"""

from importlib import import_module

from pipeline.cli.common import app
from pipeline.cli.entry import main

# registered in this order, the order of ``ingest --help``
for _group in ("run", "demo", "tables", "kafka_tools", "drill", "bench"):
    import_module(f"pipeline.cli.{_group}")

__all__ = ["app", "main"]
