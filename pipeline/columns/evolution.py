"""What a restart may change in a table's columns, decided before any side effect.

:func:`plan_changes` compares the columns a table has (``current``, read from the table)
with the configured ones (``wanted``) and returns the changes that turn one into the other,
or raises :class:`~pipeline.errors.SchemaChangeRefused` naming the column and the change.

Allowed (each format applies them in one atomic schema update):
  * :class:`AddColumn`: a new optional column, at the top level or inside a struct;
  * :class:`WidenType`: ``int`` → ``long``, ``float`` → ``double``, ``decimal(p, s)`` →
    ``decimal(P, s)`` with ``P > p``;
  * :class:`MakeOptional`: a required column (or list element, map value) made optional;
  * :class:`UpdateDoc`: a new ``doc`` (a missing ``doc`` changes nothing);
  * :class:`RenameColumn`: only when the configuration says so (``renamedFrom``).

What a format's readers cannot follow (Hudi's: renames, decimals stored as Avro ``fixed``
of another size) is refused through :class:`Rules`.

Refused: a dropped column, a new required column, an optional column made required, any
other type change (narrowing, int → string, struct → list …), a rename nobody asked for
(it reads as a drop plus an add).

Paths are tuples of names as pyiceberg's ``update_schema`` takes them: a list's element
is ``element``, a map's value ``value`` (``("items", "element", "price")``); messages show
them dotted (``items.element.price``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.columns.model import Column, ColumnType, Decimal, ListOf, MapOf, Primitive, StructOf
from pipeline.errors import SchemaChangeRefused

Path = tuple[str, ...]

_WIDENINGS = {("int", "long"), ("float", "double")}


@dataclass(frozen=True)
class AddColumn:
    path: Path  # the new column's path (its parent must exist)
    column: Column


@dataclass(frozen=True)
class WidenType:
    path: Path
    old: ColumnType
    new: ColumnType


@dataclass(frozen=True)
class MakeOptional:
    path: Path


@dataclass(frozen=True)
class UpdateDoc:
    path: Path
    doc: str


@dataclass(frozen=True)
class RenameColumn:
    path: Path  # the old path
    new_name: str


Change = AddColumn | WidenType | MakeOptional | UpdateDoc | RenameColumn


def dotted(path: Path) -> str:
    return ".".join(path)


def describe(change: Change) -> str:
    """One short line, e.g. ``add items.element.color (string)``."""
    where = dotted(change.path)
    if isinstance(change, AddColumn):
        return f"add {where} ({change.column.type})"
    if isinstance(change, WidenType):
        return f"widen {where} {change.old} -> {change.new}"
    if isinstance(change, MakeOptional):
        return f"make {where} optional"
    if isinstance(change, UpdateDoc):
        return f"update the doc of {where}"
    return f"rename {where} to {change.new_name}"


@dataclass(frozen=True)
class Rules:
    """What one table's format accepts; ``where`` names the table in a refusal."""

    where: str
    renames: bool = True
    decimal_widening: bool = True

    def refuse(self, path: Path, what: str) -> SchemaChangeRefused:
        return SchemaChangeRefused(f"{self.where}: column {dotted(path)!r}: {what}")


def plan_changes(current: Sequence[Column], wanted: Sequence[Column], rules: Rules) -> list[Change]:
    """The changes from ``current`` to ``wanted`` (empty: the same columns)."""
    changes: list[Change] = []
    _fields(tuple(current), tuple(wanted), (), changes, rules)
    return changes


def _fields(
    current: tuple[Column, ...],
    wanted: tuple[Column, ...],
    parent: Path,
    changes: list[Change],
    rules: Rules,
) -> None:
    by_name = {c.name: c for c in current}
    matched: set[str] = set()
    for w in wanted:
        old = by_name.get(w.name)
        if w.renamed_from is not None and w.renamed_from != w.name and old is None:
            old = by_name.get(w.renamed_from)
            if old is None:
                raise rules.refuse(
                    (*parent, w.name), f"renamedFrom {w.renamed_from!r} names no column"
                )
            if not rules.renames:
                raise rules.refuse(
                    (*parent, old.name),
                    f"renaming to {w.name!r} is not supported by this table format's readers",
                )
            changes.append(RenameColumn((*parent, old.name), w.name))
        if old is None:
            if w.required:
                raise rules.refuse(
                    (*parent, w.name), "a new column must be optional (required: false)"
                )
            changes.append(AddColumn((*parent, w.name), w))
            continue
        matched.add(old.name)
        path = (*parent, old.name)  # pyiceberg applies every change by the old path
        if old.required and not w.required:
            changes.append(MakeOptional(path))
        elif w.required and not old.required:
            raise rules.refuse(path, "an optional column cannot become required")
        if w.doc is not None and w.doc != old.doc:
            changes.append(UpdateDoc(path, w.doc))
        _types(old.type, w.type, path, changes, rules)
    for c in current:
        if c.name not in matched:
            raise rules.refuse(
                (*parent, c.name),
                "is in the table but not configured: dropping a column is not supported "
                "(configure it again, or rename a column with renamedFrom)",
            )


def _types(
    old: ColumnType,
    new: ColumnType,
    path: Path,
    changes: list[Change],
    rules: Rules,
) -> None:
    if isinstance(old, StructOf) and isinstance(new, StructOf):
        _fields(old.fields, new.fields, path, changes, rules)
        return
    if isinstance(old, ListOf) and isinstance(new, ListOf):
        _inner(old.element, old.element_required, new.element, new.element_required,
               (*path, "element"), changes, rules)  # fmt: skip
        return
    if isinstance(old, MapOf) and isinstance(new, MapOf):
        _inner(old.value, old.value_required, new.value, new.value_required,
               (*path, "value"), changes, rules)  # fmt: skip
        return
    if old == new:
        return
    if _widens(old, new):
        if isinstance(old, Decimal) and not rules.decimal_widening:
            raise rules.refuse(
                path, f"widening {old} -> {new} is not supported by this table format's readers"
            )
        changes.append(WidenType(path, old, new))
        return
    raise rules.refuse(path, f"type change {old} -> {new} is not a widening")


def _inner(
    old: ColumnType,
    old_required: bool,
    new: ColumnType,
    new_required: bool,
    path: Path,
    changes: list[Change],
    rules: Rules,
) -> None:
    if old_required and not new_required:
        changes.append(MakeOptional(path))
    elif new_required and not old_required:
        raise rules.refuse(path, "optional values cannot become required")
    _types(old, new, path, changes, rules)


def _widens(old: ColumnType, new: ColumnType) -> bool:
    if isinstance(old, Primitive) and isinstance(new, Primitive):
        return (old.name, new.name) in _WIDENINGS
    if isinstance(old, Decimal) and isinstance(new, Decimal):
        return new.scale == old.scale and new.precision > old.precision
    return False
