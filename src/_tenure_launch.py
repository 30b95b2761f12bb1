"""The `tenure` console script's entry: the `tenure` package takes a moment to import, and a
Ctrl-C in that moment ends here in one line and exit 130, not in a traceback of the import."""

from __future__ import annotations

import sys


def main() -> int:
    """Import the command line, then run it."""
    try:
        from tenure.cli import main as run_command_line
    except KeyboardInterrupt:
        sys.stderr.write("tenure: interrupted\n")
        return 130
    return run_command_line()
