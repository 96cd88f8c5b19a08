"""The command line: `fedbench` (cli.app) and one module per sub-command."""

import os as _os
import sys as _sys

from fedbench.runs import interrupts as _interrupts

# first thing, before the command's imports, when this process is the `fedbench` program (its console
# script, or `python -m fedbench.cli` while Python finds the module): a signal while it starts ends it
# with one line. A process that only imports the CLI (pytest, a notebook) keeps its own Ctrl-C: its
# summary, its clean-up.
if _sys.argv and (_sys.argv[0] == "-m" or _os.path.basename(_sys.argv[0]) in ("fedbench", "fedbench.exe")):
    _interrupts.install(importing=True)
