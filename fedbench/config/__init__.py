"""The one home of configuration: the config tree (conf/, package data), composing a run's config
from overrides (compose.py), and checking it before any work (validate.py for one config,
preflight.py for every job of a command line)."""
