"""Count the bytes that PyTorch operations allocate, deterministically, on any device.

Wall-clock memory readings (peak RSS, allocator statistics) depend on the allocator's caching and
on whatever else the process did before. To compare *algorithms*, we want a number that depends
only on the tensors an algorithm creates. :class:`MemoryTracker` sees every ATen operation
through a ``TorchDispatchMode`` and keeps a running total of the bytes held by the tensors those
operations created and that are still alive:

- ``peak_bytes``: the most bytes alive at once (the algorithm's working set);
- ``largest_bytes``: the largest single tensor created (e.g. a ``(b, h, t, t)`` score matrix).

Outputs that share storage with an input (views such as ``transpose``) allocate nothing; a view
keeps its storage counted as alive for as long as the view lives. A sparse tensor, which has
no storage of its own, is counted by those of its parts (indices and values). A tensor that an
``out=`` or ``resize_`` moves to a larger storage is counted at its new size from then on, and
at its old one too until the tensor dies (its old storage is freed at once). Use it under
``torch.no_grad()``: tensors that autograd saves for backward are freed by autograd, not by
Python, and would be released from the count too early.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["MemoryTracker"]

Key = tuple[int, int]  # a storage: its StorageImpl, and where its data lives


def _key(storage: torch.UntypedStorage) -> Key:
    """Which storage this is: the data pointer tells apart the storages of a real device, and
    the one an out= or resize_ moves to, but every meta storage has pointer 0; the address of
    the StorageImpl (``_cdata``, which views share) tells those apart."""
    return storage._cdata, storage.data_ptr()


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages that hold t's numbers: its own, or a sparse tensor's parts, which have one
    each where the sparse tensor has none (its untyped_storage() raises)."""
    if t.layout == torch.sparse_coo:
        parts = [t._indices(), t._values()]
    elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = [t.crow_indices(), t.col_indices(), t.values()]
    elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = [t.ccol_indices(), t.row_indices(), t.values()]
    else:  # strided
        return [t.untyped_storage()]
    return [part.untyped_storage() for part in parts]


class MemoryTracker(TorchDispatchMode):
    """Context manager that records the peak live bytes and the largest tensor created inside it.

    ``current_bytes`` is what is alive now, ``peak_bytes`` the most alive at once and
    ``largest_bytes`` the largest single storage created, all counted from the moment the
    tracker is entered.

    Examples:
        >>> with torch.no_grad(), MemoryTracker() as mem:
        ...     x = torch.zeros(256)  # 256 float32 numbers: 1024 bytes
        ...     y = x.view(16, 16)    # a view: nothing allocated
        >>> mem.peak_bytes, mem.largest_bytes
        (1024, 1024)
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self.current_bytes = 0
        self.peak_bytes = 0
        self.largest_bytes = 0
        self._refs: dict[Key, int] = {}  # storage (_key) -> number of live tensors using it
        self._sizes: dict[Key, int] = {}  # storage (_key) -> bytes

    def _release(self, key: Key) -> None:
        self._refs[key] -= 1
        if self._refs[key] == 0:
            self.current_bytes -= self._sizes.pop(key)
            del self._refs[key]

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # the inputs' storages before the call: one that an out= or resize_ grows moves
        inputs = {
            _key(storage)
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
            for storage in _storages(t)
        }
        out = func(*args, **(kwargs or {}))
        # torch.tensor(data) builds its tensor outside the operations seen here and hands it to
        # lift_fresh, as an input: it is new all the same
        fresh = func is torch.ops.aten.lift_fresh.default
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            for storage in _storages(t):
                key, nbytes = _key(storage), storage.nbytes()
                if key not in self._refs:
                    if (key in inputs and not fresh) or nbytes == 0:
                        continue  # a view of an untracked input, or empty: nothing was allocated
                    self._refs[key] = 0
                    self._sizes[key] = nbytes
                    self.current_bytes += nbytes
                    self.peak_bytes = max(self.peak_bytes, self.current_bytes)
                    self.largest_bytes = max(self.largest_bytes, nbytes)
                self._refs[key] += 1
                weakref.finalize(t, self._release, key)
        return out
