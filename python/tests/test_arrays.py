"""Arrays in: every stride read as the values it shows, bf16 without bit patterns, bad input
refused with the library's messages."""

import ml_dtypes
import numpy as np
import pytest

import xentlab

BF16 = np.dtype(ml_dtypes.bfloat16)


def _linear(seed=0, N=6, V=50, D=8, dtype=np.float32):
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((N, D)).astype(dtype)
    W = rng.standard_normal((V, D)).astype(dtype)
    t = rng.integers(0, V, N)
    return H, W, t


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_strided_views_are_read_as_their_values():
    H, W, t = _linear()
    big = np.zeros((12, 3 * W.shape[1]), np.float32)
    Hs = big[::2, ::3]  # row stride 3·D·2, column stride 3
    Hs[...] = H
    Wt = np.ascontiguousarray(W.T).T  # a transposed view: column-major
    rev = t[::-1].copy()[::-1]  # negative stride
    assert not Hs.flags.c_contiguous and not Wt.flags.c_contiguous
    strided = xentlab.Problem.linear(Hs, Wt, rev)
    plain = xentlab.Problem.linear(H, W, t)
    assert _same_bits(strided.H, H) and _same_bits(strided.W, W) and _same_bits(strided.targets, t)
    a = xentlab.reference(strided, tier="compensated")
    b = xentlab.reference(plain, tier="compensated")
    assert _same_bits(a.loss, b.loss) and _same_bits(a.dW, b.dW)


def test_logits_with_row_stride_other_than_V():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((5, 40)).astype(np.float32)
    Z = big[:, 3:33]  # V = 30, row stride 40
    t = rng.integers(0, 30, 5)
    p = xentlab.Problem.from_logits(Z, t)
    assert _same_bits(p.logits, np.ascontiguousarray(Z))
    r = xentlab.reference(p)
    lse = np.log(np.exp(np.ascontiguousarray(Z).astype(np.float64)).sum(axis=1))
    assert np.all(np.abs(r.lse - lse) <= r.lse_bound + 1e-13 * np.abs(lse))


def test_bf16_numpy_round_trip_and_reference_agree():
    H, W, t = _linear(dtype=BF16)
    p = xentlab.Problem.linear(H[:, ::1], W, t)
    assert p.input_dtype == "bf16" and p.H.dtype == BF16 and _same_bits(p.H, H)
    ref_view = xentlab.reference(
        xentlab.Problem.linear(np.asfortranarray(H), W, t), tier="compensated"
    )
    ref = xentlab.reference(p, tier="compensated")
    assert _same_bits(ref.dH, ref_view.dH)


def test_float16_and_float64_inputs_keep_their_dtype():
    H, W, t = _linear(dtype=np.float16)
    assert xentlab.Problem.linear(H, W, t).input_dtype == "fp16"


def test_torch_tensors_bf16_and_strided():
    torch = pytest.importorskip("torch")
    H, W, t = _linear()
    Ht = torch.from_numpy(H).to(torch.bfloat16)
    Wt = torch.from_numpy(np.ascontiguousarray(W.T)).to(torch.bfloat16).t()  # transposed view
    p = xentlab.Problem.linear(Ht, Wt, torch.from_numpy(t))
    assert p.input_dtype == "bf16"
    back = p.arrays("torch")
    assert (
        back["H"].dtype == torch.bfloat16
        and torch.equal(back["H"], Ht)
        and torch.equal(back["W"], Wt)
    )


def test_bad_dtypes_are_type_errors():
    H, W, t = _linear()
    with pytest.raises(TypeError, match=r"H: dtype int32 is not a float format"):
        xentlab.Problem.linear(H.astype(np.int32), W, t)
    with pytest.raises(TypeError, match=r"targets: dtype float32 is not an integer dtype"):
        xentlab.Problem.linear(H, W, t.astype(np.float32))
    with pytest.raises(TypeError, match=r"expected a numpy array or a torch tensor"):
        xentlab.Problem.linear("H", W, t)


def test_bad_values_and_shapes_are_value_errors_with_the_librarys_messages():
    H, W, t = _linear()
    bad = t.copy()
    bad[2] = 50
    with pytest.raises(xentlab.InputError, match=r"target"):
        xentlab.Problem.linear(H, W, bad)
    nan = H.copy()
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"H"):
        xentlab.Problem.linear(nan, W, t)
    with pytest.raises(ValueError, match=r"W: expected a 2-D array"):
        xentlab.Problem.linear(H, W[None], t)
    with pytest.raises(ValueError):
        xentlab.Problem.linear(H, W[:, :5], t)  # D differs
    with pytest.raises(ValueError, match=r"expected a 1-D array"):
        xentlab.Problem.linear(H, W, t, bias=np.zeros((50, 1), np.float32))


def test_bf16_targets_are_refused_not_read_as_their_bits():
    """A bf16 array of class indices reaches the library as its uint16 bit patterns (1.0 is
    16256): it must be refused as any float dtype is, never read as those integers."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    H = np.zeros((4, 8), dtype=np.float32)
    W = np.zeros((20000, 8), dtype=np.float32)
    t = np.array([1, 2, 3, 5]).astype(ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="not an integer dtype"):
        xentlab.Problem.linear(H, W, t)
    with pytest.raises(TypeError, match="not an integer dtype"):
        xentlab.Problem.from_logits(np.zeros((4, 20000), dtype=np.float32), t)


def test_ctrl_c_after_a_write_raises_keyboard_interrupt(tmp_path):
    """Writing a file must not replace Python's SIGINT handler: Ctrl-C raises KeyboardInterrupt."""
    import os
    import signal

    xentlab.write_candidate(tmp_path / "c.h5", {"reduced_loss": np.float32(1.0)})
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
