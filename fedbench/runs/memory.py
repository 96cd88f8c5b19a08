"""How much memory a run may take on a device: read by the build (chunk size, eager populations) and by the
batched launcher (lanes per group), so it sits below both."""

from __future__ import annotations

import torch

from fedbench.core.memory import available_memory


def available_bytes(device: torch.device) -> int:
    """Memory free for lanes on `device`: CUDA's free memory, or the host's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()
