"""The memory a set-up check counts on is what this process may still take (core.memory.available_memory): under a
`ulimit -v` (an HPC login node's) or a cgroup limit, the host's MemAvailable passed a LIBSVM file's 0.6 GiB dense
table that then failed to allocate, a MemoryError traceback."""

from __future__ import annotations

import subprocess
import sys

from tests.faultkit import ROOT


def test_the_address_space_limit_bounds_the_available_memory():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, resource.RLIM_INFINITY)); "
            "from fedbench.core.memory import available_memory; print(available_memory())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 0 < int(out.stdout) < 2 * 2**30


def test_without_limits_it_is_the_hosts_available_memory():
    from fedbench.core.memory import _host_available, available_memory

    assert 0 < available_memory() <= _host_available()
