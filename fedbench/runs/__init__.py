"""The run layer: a config -> a trained, recorded run (single.py), through Hydra for the command
line and sweeps (hydra_app.py, callbacks.py), and from Python (api.py: fedbench.run/sweep).
build.py turns a composed config into the engine's Federation."""
