"""How pytest-xdist's workers share the suite (tests/conftest.py installs it for `--dist load`, pyproject's
default): a test module stays whole on one worker, so its module-scoped fixtures and caches are made once and
its tests run in their order, as without xdist; the long tests of SPREAD go one by one, before the modules,
longest first as collected, so that the workers finish together; every test that starts Ray or uses the
session's cluster (tests/conftest.py's local_cluster) runs on one worker, next: one cluster a session, and no
two Ray instances at once. tests/conftest.py puts the tests in that order."""

from __future__ import annotations

# nodeid prefixes of the tests spread one by one (each minutes long), collected longest first
SPREAD = ("tests/reproduce/test_ci_record.py::test_ci_claims_are_the_recorded_ones[",)
RAY_MODULES = ("tests/runs/test_cluster.py", "tests/runs/test_ray_launcher.py", "tests/runs/test_security.py",
               "tests/runs/test_sweep_signals.py", "tests/scripts/test_bench_peers.py")


def spread(nodeid: str) -> bool:
    return nodeid.startswith(SPREAD)


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: itself, the Ray tests, or its module."""
    if spread(nodeid):
        return nodeid
    module = nodeid.split("::", 1)[0]
    return "ray" if module in RAY_MODULES else module


def scheduler(config, log):
    """xdist's LoadScopeScheduling over `unit`, in the order of collection (not the largest unit first)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)
