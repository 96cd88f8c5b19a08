"""The memory available to a run, on the host or a device, for the checks that refuse what cannot fit before
allocating it (the build, the batched launcher, the algorithms' own state)."""

from __future__ import annotations

import os

UNLIMITED = 2**60  # cgroup v1 writes 9223372036854771712 for no limit, v2 "max"


def available_memory() -> int:
    """The memory this process may still take, in bytes: the least of the host's available memory (Linux's
    MemAvailable; 8 GiB where /proc/meminfo is absent), what its address-space limit leaves (`ulimit -v`, which HPC
    login nodes set), and what its cgroup's limit leaves (a container's, a SLURM or systemd job's). MemAvailable
    alone is the whole host's: a check that passed on it ended in a MemoryError traceback under a 4 GB `ulimit -v`."""
    return min(_host_available(), _address_space_left(), _cgroup_left())


def available_bytes(device) -> int:
    """Memory free on `device` (a torch.device): CUDA's free memory, or what available_memory() leaves."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def _host_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def _address_space_left() -> int:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED
    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        size = 0
    return max(0, soft - size)


def _cgroup_left() -> int:
    """The limit of this process's memory cgroup less its usage (v2: memory.max, memory.current; v1:
    memory.limit_in_bytes, memory.usage_in_bytes), at its own path or the namespace's root."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return UNLIMITED
    places = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            places += [(f"/sys/fs/cgroup{p}", "memory.max", "memory.current") for p in (path.rstrip("/"), "")]
        elif "memory" in controllers.split(","):
            places += [(f"/sys/fs/cgroup/memory{p}", "memory.limit_in_bytes", "memory.usage_in_bytes")
                       for p in (path.rstrip("/"), "")]
    for folder, limit_name, usage_name in places:
        try:
            with open(os.path.join(folder, limit_name)) as f:
                limit = f.read().strip()
            with open(os.path.join(folder, usage_name)) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= UNLIMITED:
            return UNLIMITED
        return max(0, int(limit) - usage)
    return UNLIMITED
