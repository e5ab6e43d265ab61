"""Deletion vectors read from a local Delta table's files, in the protocol's documented format
(PROTOCOL.md, "Deletion Vectors"): which row positions of a data file a version hides. Used to
find the rows a commit hid without reading the rows themselves (lake/changed.py); a table
elsewhere than a local folder goes by Spark instead (None here).

A descriptor's vector is inline (`i`: Z85 text of the bitmap) or in a file (`u`: a path
relative to the table, a random prefix and a Z85-encoded UUID; `p`: an absolute path), where
at `offset` it is stored as a 4-byte big-endian size, the bitmap and a 4-byte checksum. The
bitmap is Delta's RoaringBitmapArray in its portable form: a magic number, the count of 32-bit
Roaring bitmaps, then each one's high 32 bits and its portable Roaring serialization.
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_NO_RUNS, _RUNS = 12346, 12347  # Roaring's cookies: without run containers, with them
_ARRAY_MAX = 4096


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ's base 85) text back into its bytes: each 5 characters are 4 bytes."""
    if len(text) % 5:
        raise ValueError(f"Z85 text of {len(text)} characters (a multiple of 5 expected)")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i:i + 5]:
            value = value * 85 + _Z85_VALUE[c]
        out += value.to_bytes(4, "big")
    return bytes(out)


def hidden(table_dir: str, descriptor: dict[str, Any] | None) -> np.ndarray:
    """The row positions (sorted uint64) the deletion vector `descriptor` (a log action's
    `deletionVector`; None: no vector) hides in its data file."""
    if not descriptor:
        return np.zeros(0, dtype=np.uint64)
    kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "i":
        return bitmap_positions(z85_decode(where))
    if kind == "u":
        prefix, encoded = where[:-20], where[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        file = Path(table_dir) / prefix / name if prefix else Path(table_dir) / name
    elif kind == "p":
        file = Path(where.removeprefix("file:"))
    else:
        raise ValueError(f"deletion vector of unknown storage type {kind!r}")
    with open(file, "rb") as f:
        f.seek(int(descriptor.get("offset") or 0))
        size = struct.unpack(">i", f.read(4))[0]
        data = f.read(size)
    if len(data) != size:
        raise ValueError(f"deletion vector in {file} is cut short ({len(data)} of {size} bytes)")
    return bitmap_positions(data)


def bitmap_positions(data: bytes) -> np.ndarray:
    """The positions a RoaringBitmapArray (portable form) holds, sorted uint64."""
    magic, count = struct.unpack_from("<iq", data, 0)
    if magic != MAGIC:
        raise ValueError(f"not a Delta deletion vector (magic {magic})")
    pos, found = 12, []
    for _ in range(count):
        high = struct.unpack_from("<i", data, pos)[0]
        low, pos = _roaring32(data, pos + 4)
        found.append((np.uint64(high) << np.uint64(32)) | low.astype(np.uint64))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)


def _roaring32(data: bytes, pos: int) -> tuple[np.ndarray, int]:
    """One 32-bit Roaring bitmap in its portable serialization at `pos`: its values and the
    position after it. (Roaring's format spec: a cookie, the containers' keys and cardinalities,
    offsets, then each container as a run list, a sorted array or a 2^16-bit bitmap.)"""
    cookie = struct.unpack_from("<I", data, pos)[0]
    pos += 4
    if cookie & 0xFFFF == _RUNS:
        n = (cookie >> 16) + 1
        runs = data[pos:pos + (n + 7) // 8]
        pos += (n + 7) // 8
        offsets = n >= 4  # (NO_OFFSET_THRESHOLD)
    elif cookie == _NO_RUNS:
        n = struct.unpack_from("<I", data, pos)[0]
        pos, runs, offsets = pos + 4, b"", True
    else:
        raise ValueError(f"not a Roaring bitmap (cookie {cookie})")
    header = np.frombuffer(data, dtype="<u2", count=2 * n, offset=pos).reshape(n, 2)
    pos += 4 * n + (4 * n if offsets else 0)
    values = []
    for i in range(n):
        key, card = int(header[i, 0]) << 16, int(header[i, 1]) + 1
        if runs and runs[i // 8] >> (i % 8) & 1:
            count = struct.unpack_from("<H", data, pos)[0]
            pairs = np.frombuffer(data, dtype="<u2", count=2 * count, offset=pos + 2).reshape(count, 2)
            pos += 2 + 4 * count
            low = np.concatenate([np.arange(int(s), int(s) + int(n1) + 1, dtype=np.uint32) for s, n1 in pairs]) \
                if count else np.zeros(0, dtype=np.uint32)
        elif card <= _ARRAY_MAX:
            low = np.frombuffer(data, dtype="<u2", count=card, offset=pos).astype(np.uint32)
            pos += 2 * card
        else:
            bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8, count=8192, offset=pos), bitorder="little")
            low = np.flatnonzero(bits).astype(np.uint32)
            pos += 8192
        values.append(low + np.uint32(key))
    return (np.concatenate(values) if values else np.zeros(0, dtype=np.uint32)), pos
