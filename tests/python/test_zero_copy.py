"""No copies across the boundary: dynemb reads tensors at their own addresses and hands back
memory that torch.from_dlpack wraps in place; NumPy arrays work on the CPU."""

import pytest
import torch

try:  # NumPy is optional (PyTorch 2 does not need it)
    import numpy as np
except ImportError:
    np = None

requires_numpy = pytest.mark.skipif(np is None, reason="numpy not installed")

import dynemb
from dynemb import _C
from dynemb.torch import DynamicEmbeddingBag


def test_inputs_are_read_in_place(seed):
    t = torch.randint(0, 100, (1000,))
    assert _C.tensor_address(t) == t.data_ptr()
    view = torch.randint(0, 100, (10, 8))[3]  # an offset view: the address includes the offset
    assert _C.tensor_address(view) == view.data_ptr()


@requires_numpy
def test_numpy_arrays_are_read_in_place():
    a = np.arange(50, dtype=np.int64)
    assert _C.tensor_address(a) == a.ctypes.data
    a.setflags(write=False)  # read-only: through the buffer protocol
    assert _C.tensor_address(a) == a.ctypes.data


def test_out_is_written_in_place_and_capsules_are_wrapped_without_copy(seed):
    h = DynamicEmbeddingBag(100, 8).dynemb_tables()["table"]
    ids = torch.randint(0, 100, (12,))
    offsets = torch.arange(0, 13, 3)
    out = torch.full((4, 8), float("nan"))
    returned = h.forward(ids, offsets, None, _C.PoolingMode.SUM, False, out, 0)
    assert returned is out
    assert not torch.isnan(out).any()
    capsule = h.forward(ids, offsets, None, _C.PoolingMode.SUM, False, None, 0)
    address = _C.tensor_address(capsule)
    wrapped = torch.from_dlpack(capsule)
    assert wrapped.data_ptr() == address
    torch.testing.assert_close(wrapped, out)
    # The module's output rows go straight into a strided slice of a wider buffer.
    wide = torch.zeros(4, 20)
    h.forward(ids, offsets, None, _C.PoolingMode.SUM, False, wide[:, 5:13], 0)
    torch.testing.assert_close(wide[:, 5:13], out)
    assert float(wide[:, :5].abs().sum() + wide[:, 13:].abs().sum()) == 0.0


@requires_numpy
def test_numpy_in_numpy_out(seed):
    h = DynamicEmbeddingBag(100, 4).dynemb_tables()["table"]
    ids = np.random.default_rng(seed).integers(0, 100, 9).astype(np.int64)
    offsets = np.array([0, 4, 9], dtype=np.int64)
    out = np.zeros((2, 4), dtype=np.float32)
    h.forward(ids, offsets, None, _C.PoolingMode.SUM, True, out, 0)
    rows = torch.from_dlpack(h.find(torch.from_numpy(ids))[0])[:, :4].numpy()
    np.testing.assert_allclose(out, np.stack([rows[:4].sum(0), rows[4:].sum(0)]), rtol=1e-6)
    if hasattr(np, "from_dlpack"):
        keys, _, _, _ = h.export_rows(0)
        assert sorted(np.from_dlpack(_Capsule(keys)).tolist()) == sorted(set(ids.tolist()))


class _Capsule:
    """Lets numpy.from_dlpack take a bare capsule (it asks for __dlpack__)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)
