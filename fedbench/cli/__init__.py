"""The command line: `fedbench` (cli.app) and one module per sub-command."""
