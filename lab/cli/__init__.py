"""The lab's ``ingest`` commands, plain Typer command functions that the runtime's CLI
adds through the ``ingest.commands`` entry points of ``lab/pyproject.toml``:

- :mod:`~lab.cli.demo`: ``demo``
- :mod:`~lab.cli.kafka_tools`: ``broker``, ``produce``
- :mod:`~lab.cli.drill`: ``drill`` (with ``--soak`` and ``--files``)
- :mod:`~lab.cli.bench`: ``bench``
"""

# The runtime's CLI first: it imports the modules below through the entry points while it
# loads, so importing one of them directly (before ``pipeline.cli``) is no import cycle.
import pipeline.cli  # noqa: F401
