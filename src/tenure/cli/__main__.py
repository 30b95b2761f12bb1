"""`python -m tenure.cli`: the same as the `tenure` console script."""

from __future__ import annotations

import sys

from tenure.cli import main

if __name__ == "__main__":  # imported by a documentation tool, it runs nothing
    sys.exit(main())
