"""Arrays between Python and the lab: numpy and torch in, numpy (or torch) out, bf16 included.

The C++ side (python/src/module.cpp) reads any host array through DLPack or the buffer protocol
with its strides, element by element, so a transposed or sliced view is read as the values it
shows. Two cases are prepared here:

- a torch tensor is detached and, when it is on a device, copied to host memory (``.cpu()``);
  torch exports bfloat16 by DLPack itself;
- a numpy bfloat16 array (``ml_dtypes.bfloat16``, which numpy cannot export by DLPack) is passed
  as its uint16 view with a flag, so the C++ side stores the same bits as bf16.

Out: float64 results are numpy arrays; a bf16 tensor of a problem comes back as a numpy
``ml_dtypes.bfloat16`` array (or a ``torch.bfloat16`` tensor), never as bit patterns.
"""

from __future__ import annotations

import numpy as np

try:  # numpy's bfloat16 (a dependency of the package; the import is checked where it is needed)
    import ml_dtypes as _ml_dtypes

    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    _ml_dtypes = None
    BFLOAT16 = None


def is_torch(x) -> bool:
    """True for a torch.Tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_host(x, name: str):
    """(array for the C++ side, bf16_bits flag). Raises TypeError for what is no array."""
    if is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x, False
    if isinstance(x, np.ndarray):
        if BFLOAT16 is not None and x.dtype == BFLOAT16:
            return x.view(np.uint16), True
        return x, False
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        return x, False
    if isinstance(x, (list, tuple)):
        return np.asarray(x), False
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")


def from_raw(raw: np.ndarray, dtype: str, framework: str = "numpy", device=None):
    """A tensor's stored values (raw: float64/float32/float16, or uint16 bits for bf16)."""
    if framework == "numpy":
        if dtype == "bf16":
            if BFLOAT16 is None:
                raise ImportError(
                    "bf16 arrays in numpy need the package ml_dtypes (pip install ml_dtypes)"
                )
            return raw.view(BFLOAT16)
        return raw
    if framework == "torch":
        import torch

        t = (
            torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
            if dtype == "bf16"
            else torch.from_numpy(raw)
        )
        return t.to(device) if device is not None else t
    raise ValueError(f"framework '{framework}': expected numpy or torch")


def to_numpy64(x) -> np.ndarray:
    """Any float array (numpy, ml_dtypes bfloat16, torch of any dtype and device) as float64."""
    if is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x.double().numpy()  # every float dtype of torch widens exactly
    return np.asarray(x).astype(np.float64)
