"""A registered Protobuf schema → its message descriptors, compiled by ``protoc``.

A registry holds a Protobuf schema as ``.proto`` text (what Apicurio and Confluent's Java
serializers register) or as a base64 ``FileDescriptorProto`` (what Confluent's Python
serializer registers), importing other subjects' schemas by reference. Text is compiled by
the real compiler (``grpcio-tools``' ``protoc``, in a child process so its errors come back
as text), with the well-known types on its include path; the references are fetched and
written beside it under the names they are imported by.

Compiled descriptors are cached per process by the schema's content and its references, so
a Python worker compiles a writer schema once however many tasks it runs.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError

from pipeline.decode.registry.client import RegistrySchema, SchemaRegistry

__all__ = ["ProtoCompileError", "ProtoFile", "compile_schema"]

_MAIN = "registered.proto"
_cache: dict[tuple[str, ...], ProtoFile] = {}
_lock = threading.Lock()


class ProtoCompileError(Exception):
    """The schema does not compile (protoc's first error)."""


@dataclass(frozen=True)
class ProtoFile:
    """One compiled schema: its file and its messages in declaration order."""

    file: FileDescriptor

    @property
    def messages(self) -> list[Descriptor]:
        """The top-level messages in declaration order (the wire format's indexes)."""
        proto = descriptor_pb2.FileDescriptorProto.FromString(self.file.serialized_pb)
        return [self.file.message_types_by_name[m.name] for m in proto.message_type]

    def message(self, name: str | None) -> Descriptor:
        """The message ``name`` (full or simple), or the file's first (the serializers'
        default); ProtoCompileError when there is no such message."""
        found = self.messages
        if not found:
            raise ProtoCompileError("the schema declares no message")
        if name is None:
            return found[0]
        for m in self._all(found):
            if name in (m.full_name, m.name):
                return m
        raise ProtoCompileError(f"the schema has no message {name!r}")

    def by_indexes(self, indexes: list[int]) -> Descriptor:
        """The message the wire format's index path names (``[0]``: the first top-level
        message; ``[1, 0]``: the first nested in the second)."""
        found = self.messages
        message: Descriptor | None = None
        for i in indexes:
            if i >= len(found):
                raise ProtoCompileError(f"message index path {indexes} is not in the schema")
            message = found[i]
            found = list(message.nested_types)
        if message is None:
            raise ProtoCompileError("an empty message index path")
        return message

    def _all(self, messages: list[Descriptor]) -> list[Descriptor]:
        out: list[Descriptor] = []
        for m in messages:
            out.append(m)
            out.extend(self._all(list(m.nested_types)))
        return out


def compile_schema(client: SchemaRegistry, schema: RegistrySchema) -> ProtoFile:
    """The compiled schema, its references fetched through ``client``."""
    sources = _sources(client, schema, {})
    key = tuple(f"{name}\0{text}" for name, text in sorted(sources.items()))
    with _lock:
        found = _cache.get(key)
    if found is None:
        found = ProtoFile(_load(sources))
        with _lock:
            _cache[key] = found
    return found


def _sources(
    client: SchemaRegistry, schema: RegistrySchema, out: dict[str, str], name: str = _MAIN
) -> dict[str, str]:
    """Every file the schema needs, by the name it is imported by: its own text and each
    reference's, recursively."""
    out[name] = schema.text
    for ref_name, subject, version in schema.references:
        if ref_name not in out:
            _sources(client, client.version_of(subject, version), out, ref_name)
    return out


def _load(sources: dict[str, str]) -> FileDescriptor:
    pool = descriptor_pool.DescriptorPool()
    parsed = {n: _descriptor(t) for n, t in sources.items()}  # None: .proto text
    texts = {n: sources[n] for n, proto in parsed.items() if proto is None}
    added: set[str] = set()
    if texts:
        for proto in _protoc(texts).file:
            pool.Add(proto)
            added.add(proto.name)
    for name, found in parsed.items():  # the base64 ones: their imports first
        if found is not None and name not in added:
            found.name = name
            _add_with_imports(pool, found, sources, added)
    return pool.FindFileByName(_MAIN)


def _add_with_imports(
    pool: descriptor_pool.DescriptorPool,
    proto: descriptor_pb2.FileDescriptorProto,
    sources: dict[str, str],
    added: set[str],
) -> None:
    for dep in proto.dependency:
        if dep in added:
            continue
        if dep in sources and (inner := _descriptor(sources[dep])) is not None:
            inner.name = dep
            _add_with_imports(pool, inner, sources, added)
        elif dep.startswith("google/protobuf/"):
            pool.Add(_well_known(dep))
            added.add(dep)
    pool.Add(proto)
    added.add(proto.name)


def _descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto a base64 schema holds; None for ``.proto`` text."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        proto = descriptor_pb2.FileDescriptorProto()
        proto.ParseFromString(raw)
    except (binascii.Error, DecodeError, ValueError):
        return None
    return proto


def _protoc(texts: dict[str, str]) -> descriptor_pb2.FileDescriptorSet:
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="ingest-proto-") as tmp:
        root = Path(tmp)
        for name, text in texts.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        out = root / "out.pb"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{root}",
                f"-I{include}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                _MAIN,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            raise ProtoCompileError(lines[0] if lines else f"protoc exit {done.returncode}")
        found = descriptor_pb2.FileDescriptorSet()
        found.ParseFromString(out.read_bytes())
        return found


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto:
    """A well-known type's file, from the protobuf runtime's default pool."""
    module = "google.protobuf." + name.removeprefix("google/protobuf/").removesuffix(".proto")
    importlib.import_module(module + "_pb2")  # registers the file in the default pool
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    return proto
