"""The one home of configuration: the config tree (conf/, package data; the one source of default
values), composing a run's config from overrides (compose.py), the schema of its keys (schema.py)
with the one checker of values and keys (checker.py), and checking it before any work (validate.py
for one config, with the cross-key checks; preflight.py for every job of a command line)."""
