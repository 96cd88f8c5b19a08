"""fedbench: a federated-optimization research benchmark over batched clients."""

__version__ = "0.1.0"
