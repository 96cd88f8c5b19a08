"""fedbench: a federated-optimization research benchmark over batched clients.

From Python: `fedbench.run([...overrides])`, `fedbench.sweep([...])`, `fedbench.report()` and `fedbench.plot()`
(see fedbench.runs.api, docs/api.md).
"""

__version__ = "0.1.0"

__all__ = ["run", "sweep", "summary_table", "report", "plot", "RunResult"]


def __getattr__(name: str):
    # the API pulls in torch and MLflow: imported on first use, so `import fedbench` stays instant
    if name in __all__:
        from fedbench.runs import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedbench' has no attribute {name!r}")
