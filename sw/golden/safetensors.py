"""Reading and writing the safetensors format with NumPy alone (no torch).

File = 8-byte little-endian header length N, N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then
the raw little-endian tensor bytes (offsets relative to the end of the header).  bfloat16
has no NumPy dtype: its 16 bits are the high half of a float32, so it widens exactly.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from mcf.sw.errors import UserError

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_header(path: str | Path) -> tuple[dict, int]:
    """(tensor table, byte offset of the data section)."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise UserError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > 100_000_000:
            raise UserError(f"{path}: not a safetensors file (header length {n})")
        try:
            table = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{path}: bad safetensors header ({exc})") from None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for k, v in table.items() if k != "__metadata__"):
        raise UserError(f"{path}: bad safetensors header (not an object of tensor entries)")
    table.pop("__metadata__", None)
    return table, 8 + n


def read_tensor(path: Path, entry: dict, data_start: int, name: str = "?") -> np.ndarray:
    """One tensor as float32 (floating types) or its integer type."""
    dtype, shape = entry["dtype"], tuple(entry["shape"])
    begin, end = entry["data_offsets"]
    count = int(np.prod(shape, dtype=np.int64))
    if dtype not in _DTYPES and dtype != "BF16":
        raise UserError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    itemsize = 2 if dtype == "BF16" else np.dtype(_DTYPES[dtype]).itemsize
    if end - begin != count * itemsize:
        raise UserError(f"{path}: tensor {name}: data_offsets span {end - begin} bytes, "
                        f"shape {list(shape)} of {dtype} needs {count * itemsize}")
    raw = np.fromfile(path, dtype="<u2" if dtype == "BF16" else _DTYPES[dtype], count=count,
                      offset=data_start + begin)
    if raw.size != count:
        raise UserError(f"{path}: tensor {name} is truncated")
    if dtype == "BF16":
        arr = (raw.astype(np.uint32) << 16).view(np.float32)
    else:
        arr = raw.astype(np.float32) if dtype in ("F16", "F64") else raw
    return arr.reshape(shape)


def load_file(path: str | Path, names=None) -> dict[str, np.ndarray]:
    """Every tensor of one file (or only ``names``)."""
    path = Path(path)
    table, start = read_header(path)
    wanted = table if names is None else [n for n in names if n in table]
    return {n: read_tensor(path, table[n], start, n) for n in wanted}


def save_file(tensors: dict[str, np.ndarray], path: str | Path, dtype: str = "F32",
              metadata: dict | None = None) -> None:
    """Write float tensors as F32, F16 or BF16 (BF16 rounds to nearest even).  For tests and
    for converting checkpoints; the reader does not depend on it."""
    table, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        a = np.asarray(arr, dtype=np.float32)
        if dtype == "BF16":
            u = a.view(np.uint32).astype(np.uint64)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16          # round to nearest even
            blob = u.astype("<u2").tobytes()
        else:
            blob = a.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        table[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        table["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    header = json.dumps(table).encode()
    header += b" " * (-len(header) % 8)        # keep the data 8-byte aligned, as the format recommends
    with Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for blob in blobs:
            f.write(blob)
