"""A staged ``DataFile`` as bytes and back: what a worker returns to the driver.

Plain values only (path, partition tuple, statistics, spec id) behind a header, read
back with an unpickler that trusts no class from the payload but ``Decimal``.
"""

from __future__ import annotations

import pickle
from decimal import Decimal
from io import BytesIO
from typing import Any

from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    DEFAULT_READ_VERSION,
    DataFile,
    DataFileContent,
    FileFormat,
)
from pyiceberg.typedef import Record

__all__ = ["deserialize_data_file", "serialize_data_file"]

_MAGIC = b"ingest-datafile:1\n"
_DATA_FILE_FIELDS = tuple(f.name for f in DATA_FILE_TYPE[DEFAULT_READ_VERSION].fields)


class _PlainUnpickler(pickle.Unpickler):
    """Only builtin containers/scalars and Decimal: no class from the payload is trusted."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("decimal", "Decimal"):
            return Decimal
        raise pickle.UnpicklingError(f"data file payload references {module}.{name}")


def serialize_data_file(data_file: DataFile) -> bytes:
    """A DataFile as bytes (plain values only: path, partition tuple, statistics, spec id)."""
    if len(data_file) != len(_DATA_FILE_FIELDS):
        raise ValueError(f"unexpected DataFile layout ({len(data_file)} fields) for {data_file}")
    values: dict[str, Any] = {name: data_file[i] for i, name in enumerate(_DATA_FILE_FIELDS)}
    values["content"] = int(data_file.content)
    values["file_format"] = data_file.file_format.value
    partition = data_file.partition
    values["partition"] = [partition[i] for i in range(len(partition))]
    try:
        spec_id: int | None = data_file.spec_id
    except AttributeError:
        spec_id = None
    payload = {"data_file": values, "spec_id": spec_id}
    return _MAGIC + pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def deserialize_data_file(blob: bytes) -> DataFile:
    """Inverse of :func:`serialize_data_file`."""
    if not blob.startswith(_MAGIC):
        raise ValueError("not a serialized data file (missing header)")
    payload = _PlainUnpickler(BytesIO(blob[len(_MAGIC) :])).load()
    values = dict(payload["data_file"])
    values["content"] = DataFileContent(values["content"])
    values["file_format"] = FileFormat(values["file_format"])
    values["partition"] = Record(*values["partition"])
    data_file = DataFile.from_args(**values)
    if payload.get("spec_id") is not None:
        data_file.spec_id = int(payload["spec_id"])
    return data_file
