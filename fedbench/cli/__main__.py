from fedbench.cli.app import entrypoint

entrypoint()
