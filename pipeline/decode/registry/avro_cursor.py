"""The positions of many Avro datums in one buffer, read together (for
:mod:`pipeline.decode.registry.avro_columns`): a cursor per datum, zig-zag varints a byte
position at a time over all of them, fixed-width reads, and byte ranges as Arrow
``binary_view`` values into the buffer itself. A read that would pass a datum's end marks
the datum *odd* and reads nothing; the caller leaves odd datums to fastavro.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["Cursor"]


class Cursor:
    """One position per datum in a binary array's value buffer, and which datums are odd."""

    def __init__(self, values: pa.Array, skip: int) -> None:
        """``values``: a ``binary`` array; each datum starts ``skip`` bytes into its value."""
        if not pa.types.is_binary(values.type):  # int32 offsets (and a view's offset)
            raise TypeError(f"Avro datums must be a binary array, not {values.type}")
        offsets = np.frombuffer(values.buffers()[1], np.int32)[
            values.offset : values.offset + len(values) + 1
        ]
        data = values.buffers()[2]
        self.buffer = data if data is not None else pa.py_buffer(b"\0")
        self.buf = np.frombuffer(self.buffer, np.uint8)
        self.last = max(len(self.buf) - 1, 0)
        self.pos = offsets[:-1].astype(np.int64) + skip
        self.end = offsets[1:].astype(np.int64)
        self.odd = np.zeros(len(values), bool)

    def gather(self, at: np.ndarray, width: int) -> np.ndarray:
        """(len(at), width) bytes from each position (clamped: callers check the ends)."""
        limit = len(self.buf) - width
        if limit < 0:
            return self.buf[np.minimum(at[:, None] + np.arange(width), self.last)]
        # rows of a sliding window over the buffer: one copy of width bytes per position
        # (an index per byte would cost 8 times that)
        out = sliding_window_view(self.buf, width)[np.minimum(at, limit)]
        tail = np.flatnonzero(at > limit)
        if len(tail):
            out[tail] = self.buf[np.minimum(at[tail, None] + np.arange(width), self.last)]
        return out

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """The zig-zag varint (an Avro int or long) at each row's position; advances."""
        start, end = self.pos[rows], self.end[rows]
        first = self.buf[np.minimum(start, self.last)]
        if (first < 0x80).all() and (start < end).all():  # one byte each (small values)
            self.pos[rows] = start + 1
            small = first.astype(np.int64)
            return (small >> 1) ^ -(small & 1)
        value = np.zeros(len(rows), np.uint64)
        used = np.zeros(len(rows), np.int64)
        live = np.ones(len(rows), bool)
        for k in range(10):
            at = start + k
            inside = at < end
            self.odd[rows[live & ~inside]] = True
            live &= inside
            if not live.any():
                break
            byte = self.buf[np.minimum(at, self.last)]
            value[live] |= (byte[live] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            used[live] += 1
            live &= (byte & 0x80) != 0
        self.odd[rows[live]] = True  # more than 10 bytes
        self.pos[rows] = start + used
        return (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)

    def take(self, rows: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The start of ``length`` bytes at each row (odd, and 0 long, where they do not fit)."""
        start = self.pos[rows]
        bad = (length < 0) | (start + length > self.end[rows])
        self.odd[rows[bad]] = True
        length[bad] = 0
        self.pos[rows] = start + length
        return start

    def views(self, start: np.ndarray, length: np.ndarray) -> pa.Array:
        """``binary_view`` values over the buffer (inline up to 12 bytes, as Arrow wants)."""
        n = len(start)
        out = np.zeros((n, 16), np.uint8)
        out[:, 0:4] = length.astype("<i4").view(np.uint8).reshape(n, 4)
        inline = self.gather(start, 12)
        out[:, 4:16] = np.where(np.arange(12) < length[:, None], inline, 0)
        long = length > 12
        out[long, 8:12] = 0  # buffer index; bytes 4..8 keep the prefix
        out[long, 12:16] = start[long].astype("<i4").view(np.uint8).reshape(-1, 4)
        return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(out), self.buffer])
