"""Host-memory staging: the only part of a save the training loop waits for.

Buffers are allocated once per item and reused by later saves, so a save is a plain memcpy
into memory that is already faulted in (a fresh allocation would page-fault on every 4 KiB
and make the stall several times a memcpy). A tensor becomes raw bytes plus dtype and shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import numpy as np


@dataclass(slots=True)
class StagedItem:
    name: str  # object-safe name (the state-dict key, percent-quoted)
    view: memoryview
    meta: dict[str, Any]


def item_name(key: str) -> str:
    return quote(key, safe="._-")


def key_of(item: str) -> str:
    return unquote(item)


class StagingPool:
    def __init__(self) -> None:
        self._bufs: dict[str, Any] = {}

    def _buffer(self, name: str, nbytes: int, torch_like: bool) -> Any:
        buf = self._bufs.get(name)
        if buf is None or buf.shape[0] != nbytes or (torch_like != (not isinstance(buf,
                                                                                  np.ndarray))):
            if torch_like:
                import torch
                buf = torch.empty(nbytes, dtype=torch.uint8)
            else:
                buf = np.empty(nbytes, dtype=np.uint8)
            self._bufs[name] = buf
        return buf

    def stage(self, state: Mapping[str, Any]) -> list[StagedItem]:
        out = []
        for key, value in state.items():
            name = item_name(str(key))
            if type(value).__module__.startswith("torch"):
                import torch
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"state[{key!r}]: unsupported type {type(value).__name__}")
                t = value.detach()
                src = t.contiguous().reshape(-1).view(torch.uint8)
                buf = self._buffer(name, src.numel(), True)
                buf.copy_(src)
                meta = {"kind": "torch", "dtype": str(t.dtype).removeprefix("torch."),
                        "shape": list(t.shape), "key": str(key)}
                view = memoryview(buf.numpy())
            elif isinstance(value, np.ndarray):
                arr = np.ascontiguousarray(value)
                buf = self._buffer(name, arr.nbytes, False)
                np.copyto(buf, arr.reshape(-1).view(np.uint8))
                meta = {"kind": "numpy", "dtype": arr.dtype.str, "shape": list(arr.shape),
                        "key": str(key)}
                view = memoryview(buf)
            elif isinstance(value, bytes | bytearray | memoryview):
                buf = self._buffer(name, len(value), False)
                buf[:] = np.frombuffer(value, dtype=np.uint8)
                meta = {"kind": "bytes", "key": str(key)}
                view = memoryview(buf)
            else:
                raise TypeError(f"state[{key!r}]: unsupported type {type(value).__name__}; "
                                f"use torch tensors, numpy arrays or bytes")
            out.append(StagedItem(name, view, meta))
        return out


def decode_item(data: bytes | bytearray | memoryview, meta: dict[str, Any]) -> Any:
    kind = meta.get("kind", "bytes")
    if kind == "torch":
        import torch
        dtype = getattr(torch, meta["dtype"])
        raw = bytearray(data)
        if not raw:
            return torch.empty(meta["shape"], dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype).reshape(meta["shape"])
    if kind == "numpy":
        return np.frombuffer(bytes(data), dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])
    return bytes(data)
