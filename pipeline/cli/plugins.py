"""Commands another distribution adds to ``ingest``: the lab's (``lab/pyproject.toml``)
through the ``ingest.commands`` entry point group. A plugin, not an import: the runtime
never imports the lab (an import contract), it reads the installed distributions' entry
points. Without the lab installed, each of its commands answers in one line where it is.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

import typer

from pipeline.errors import PipelineError

GROUP = "ingest.commands"

# the lab's commands, in the order of ``ingest --help``
LAB_COMMANDS = ("demo", "broker", "produce", "drill", "bench")


class LabNotInstalled(PipelineError):
    """A lab command in an installation without the lab (the image, a wheel)."""

    code = "lab_not_installed"


def installed() -> dict[str, EntryPoint]:
    """The ``ingest.commands`` entry points by command name (the first of a name wins)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)
    return found


def _absent(name: str) -> Callable[[typer.Context], None]:
    def command(ctx: typer.Context) -> None:
        raise LabNotInstalled(
            f"'ingest {name}' is part of the lab, a tool of a checkout, not installed here "
            "(in a checkout: pip install -e ./lab, or scripts/bootstrap.sh)"
        )

    return command


def register(app: typer.Typer, names: tuple[str, ...]) -> None:
    """Add the commands ``names`` to ``app``: the installed entry point's function, or a
    stand-in that says the command is the lab's."""
    eps = installed()
    for name in names:
        ep = eps.get(name)
        if ep is not None:
            app.command(name=name)(ep.load())
            continue
        app.command(
            name=name,
            help="Part of the lab (lab/ in a checkout): not installed here.",
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )(_absent(name))


def register_others(app: typer.Typer) -> None:
    """Entry points of the group that are none of :data:`LAB_COMMANDS` (after them)."""
    for name, ep in sorted(installed().items()):
        if name not in LAB_COMMANDS:
            app.command(name=name)(ep.load())
