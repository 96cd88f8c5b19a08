"""A grid too large to run is refused from the lengths of its sweeps, before any job is listed: a typo such
as `seed=range(0,100000000)` listed 10^8 override lists first (4 GB in 15 s, then out of memory), in `fedbench
run -m` and in `fedbench reproduce --seeds`. Each command here runs under an 8 GB address-space limit, which
the old code met with a MemoryError after ~30 s, and must end in one line, exit 2, within seconds."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from fedbench.config.preflight import MAX_GRID_JOBS, expand_jobs
from fedbench.core.errors import ConfigError
from tests.faultkit import env, error_lines

LIMIT = 8 * 2**30  # torch's shared libraries map ~3 GB of address space; the old listing passed 8 GB


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.parametrize("args,line", [
    (["run", "-m", "seed=range(0,100000000)", "rounds=1"],
     "error: a grid of 100,000,000 jobs (seed (100,000,000)); at most 100,000 are run from one command line "
     "(each is checked before the first starts): split it, e.g. by seed or algorithm"),
    (["reproduce", "losac/fig6", "--scale", "ci", "--seeds", "0-100000000"],
     "error: --seeds '0-100000000': 100,000,001 seeds; a reproduction runs at most 100,000 jobs"),
])
def test_a_huge_grid_is_one_line_at_once_in_bounded_memory(tmp_path, args, line):
    out = subprocess.run([sys.executable, "-m", "fedbench.cli", *args, f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path,
                         env=env(), capture_output=True, text=True, timeout=120, preexec_fn=capped)
    assert out.returncode == 2, out.stderr[-2000:]
    assert error_lines(out.stderr) == [line] and "Traceback" not in out.stderr
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("sweep,length", [
    ("seed=range(0,10)", 10), ("seed=range(10,0,-3)", 4), ("x=range(0,1,0.25)", 4), ("x=shuffle(range(0,7))", 7),
    ("x=1,2,3", 3), ("x=choice(a,b)", 2), ("x=shuffle(a,b,c)", 3),
])
def test_the_counted_length_is_the_listed_one(sweep, length):
    """The count that decides (no listing) equals what Hydra lists, for every kind of sweep fedbench's grids take."""
    assert len(expand_jobs([sweep, "rounds=1"])) == length


def test_the_bound_is_the_product_of_the_axes():
    side = int(MAX_GRID_JOBS**0.5) + 1
    with pytest.raises(ConfigError, match=f"a grid of {side * side:,} jobs"):
        expand_jobs([f"seed=range(0,{side})", f"rounds=range(1,{side + 1})"])
    assert len(expand_jobs([f"seed=range(0,{side - 1})", "rounds=1,2"])) == 2 * (side - 1)


def test_a_glob_sweep_lists_what_hydra_lists():
    """glob() selects a group's own options with Hydra's config loader, which a grid listed before Hydra runs had
    not: every glob sweep ended in HydraException("ConfigLoader is not set")'s traceback."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fedbench.config.compose import conf_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        hydras = GlobalHydra.instance().config_loader().get_group_options("algorithm")
    expected = [f"algorithm={n}" for n in hydras if n.startswith("feds") and n != "fedsso"]
    assert [job[0] for job in expand_jobs(["algorithm=glob(feds*,exclude=fedsso)", "seed=0,1"])][::2] == expected
    assert len(expected) >= 3
