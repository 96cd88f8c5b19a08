"""The bottom layer: shared records and the client-work protocol (types.py), counter-based random
streams (streams.py), registries (registry.py) and user-facing errors (errors.py). It imports no
other fedbench package; every other layer may import it."""
