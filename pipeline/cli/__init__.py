"""``ingest`` command line: one module per command group.

- :mod:`~pipeline.cli.common`: the Typer app, consoles, shared options, the log file, and
  the refusals that run before a command opens anything
- :mod:`~pipeline.cli.entry`: :func:`main`, the one error path of every command
- :mod:`~pipeline.cli.run`: ``run`` (and its stop signals)
- :mod:`~pipeline.cli.tables`: ``status``, ``compact``, ``verify``
- :mod:`~pipeline.cli.plugins`: the lab's commands (``demo``, ``broker``, ``produce``,
  ``drill``, ``bench``), added from its ``ingest.commands`` entry points when it is
  installed (a checkout), else a one-line answer that they are the lab's
"""

from importlib import import_module

from pipeline.cli.common import app
from pipeline.cli.entry import main
from pipeline.cli.plugins import register, register_others

# registered in this order, the order of ``ingest --help``
import_module("pipeline.cli.run")
register(app, ("demo",))
import_module("pipeline.cli.tables")
register(app, ("broker", "produce", "drill", "bench"))
register_others(app)

__all__ = ["app", "main"]
