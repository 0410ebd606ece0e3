"""MemoryTracker counts the bytes that operations allocate, and frees them when tensors die."""

import pytest
import torch

from attention.memory import MemoryTracker

MiB = 2**20


def test_counts_allocations_and_frees():
    a = torch.zeros(256, 1024)  # 1 MiB, created outside: not counted
    with torch.no_grad(), MemoryTracker() as mem:
        b = a + 1  # 1 MiB
        c = b * 2  # 1 MiB, both alive
        del b
        d = c.t()  # a view: nothing new
        e = c + 1  # 1 MiB: b's MiB was freed, so 2 MiB alive again
    assert mem.peak_bytes == 2 * MiB
    assert mem.largest_bytes == MiB
    assert mem.current_bytes == 2 * MiB  # c (kept alive also by its view d) and e
    del c, e
    assert mem.current_bytes == MiB  # d still holds c's storage
    del d
    assert mem.current_bytes == 0


def test_score_matrix_is_the_largest_tensor_of_naive_attention():
    b, h, t, d_h = 1, 2, 256, 16
    q = torch.randn(b, h, t, d_h)
    with torch.no_grad(), MemoryTracker() as mem:
        torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q
    assert mem.largest_bytes == b * h * t * t * 4  # float32 (b, h, t, t)


def test_a_tensor_made_from_python_data_is_counted():
    """torch.tensor(data) hands its new tensor to lift_fresh as an input: it counted 0 bytes."""
    with torch.no_grad(), MemoryTracker() as mem:
        x = torch.tensor([1.0, 2.0, 3.0, 4.0])  # 4 float32 numbers
    assert (mem.peak_bytes, mem.largest_bytes) == (16, 16)
    del x


def test_an_out_argument_that_grows_is_counted_at_its_new_size():
    """The inputs' storages were read after the call, when an out= had already moved to its new
    storage, which then passed for an input's view: 256 bytes of the 512 were counted."""
    with torch.no_grad(), MemoryTracker() as mem:
        a = torch.ones(8, 8)  # 256 bytes
        out = torch.matmul(a, a, out=torch.empty(0))  # grows to 256 bytes
    assert mem.peak_bytes == 512
    del a, out


def test_meta_tensors_are_counted_as_cpu_tensors_are():
    """Every meta storage has data pointer 0: keyed by it, the first meta tensor stood for all,
    and a second one passed for its view (1 KiB of the 4 KiB below were counted)."""
    counts = {}
    for device in ("cpu", "meta"):
        with torch.no_grad(), MemoryTracker() as mem:
            a = torch.zeros(256, device=device)  # 1 KiB
            b = torch.zeros(512, device=device)  # 2 KiB
            c = (a + 1).view(16, 16)  # 1 KiB, and a view: nothing more
        counts[device] = (mem.peak_bytes, mem.largest_bytes, mem.current_bytes)
        del a, b, c
        counts[device] += (mem.current_bytes,)
    assert counts["meta"] == counts["cpu"] == (4096, 2048, 4096, 0)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_tensors_are_counted_by_their_parts():
    """A sparse tensor has no storage of its own: reading it raised torch's NotImplementedError
    inside the operation, so that code that ran outside the tracker failed inside it."""
    a = torch.eye(4)  # created outside: not counted
    with torch.no_grad(), MemoryTracker() as mem:
        coo = a.to_sparse()  # indices (2, 4) int64 and values (4,) float32: 64 + 16 bytes
        assert mem.current_bytes == 80
        csr = a.to_sparse_csr()  # crow_indices, col_indices and values, each a storage
        parts = (csr.crow_indices(), csr.col_indices(), csr.values())
        assert mem.current_bytes == 80 + sum(x.untyped_storage().nbytes() for x in parts)
        product = torch.sparse.mm(coo, a)  # (4, 4) float32, strided: 64 bytes more
        assert mem.current_bytes == 80 + sum(x.untyped_storage().nbytes() for x in parts) + 64
    del coo, csr, parts, product
    assert mem.current_bytes == 0
