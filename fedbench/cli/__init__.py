"""The command line: `fedbench` (cli.app) and one module per sub-command."""

from fedbench.runs import interrupts as _interrupts

# first thing, before the command's imports: a SIGTERM during start-up is an interrupt too (cli.app)
_interrupts.install(importing=True)
