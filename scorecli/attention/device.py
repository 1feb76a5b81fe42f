"""Moving a batch's index arrays to the device in one copy, and scattering ragged values into a
padded layout. Knows nothing about attention or models.
"""

from __future__ import annotations

import functools

import numpy as np
import torch


def to_device(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Copy several 1-D arrays to the device in one transfer; return a view of each.

    Arrays of one dtype travel concatenated; mixed dtypes (flashinfer's uint16/uint32 plan
    arrays beside int64 ids) travel as the bytes of one buffer, each array at an 8-byte
    aligned offset, and come back as views of their own dtype.
    """
    if len({a.dtype for a in arrays}) <= 1:
        flat = torch.from_numpy(np.concatenate(arrays))
        return list(torch.split(_upload(flat, device), [len(a) for a in arrays]))
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // 8) * 8
    buf = np.zeros(end, dtype=np.uint8)
    for a, at in zip(arrays, offsets):
        buf[at : at + a.nbytes] = np.ascontiguousarray(a).view(np.uint8)
    flat = _upload(torch.from_numpy(buf), device)
    return [flat[at : at + a.nbytes].view(_torch_dtype(a.dtype)) for a, at in zip(arrays, offsets)]


@functools.cache
def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


def _upload(flat: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return flat.pin_memory().to(device, non_blocking=True)
    return flat


def pad_ragged(values: torch.Tensor, where: torch.Tensor, s: int, length: int, fill: int) -> torch.Tensor:
    """Scatter ragged [T] values to the flat positions `where` of a [S, L] tensor of `fill`."""
    out = torch.full((s * length,), fill, dtype=values.dtype, device=values.device)
    return out.index_copy_(0, where, values).view(s, length)
