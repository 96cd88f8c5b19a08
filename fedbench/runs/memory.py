"""How much memory a run may take on a device: read by the build (chunk size, eager populations) and by the
batched launcher (lanes per group), so it sits below both."""

from __future__ import annotations

import torch


def available_bytes(device: torch.device) -> int:
    """Memory free for lanes on `device`: CUDA's free memory, or the host's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30
