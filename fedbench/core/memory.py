"""The host's memory available to a run, for the checks that refuse what cannot fit before allocating it."""

from __future__ import annotations


def available_memory() -> int:
    """The host's available memory in bytes (Linux's MemAvailable; 8 GiB where /proc/meminfo is absent)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30
