"""The one thing pyproject.toml cannot say: the config tree lives at the top of the checkout (`conf/`)
and ships inside the package as `fedbench/conf` (package data, pyproject.toml), so that a wheel carries
the same configs; fedbench.config.compose finds the tree in either place."""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["fedbench*", "hydra_plugins*"]), "fedbench.conf"],
      package_dir={"fedbench.conf": "conf"})
