"""`python -m tenure.cli`: the same as the `tenure` console script."""

from __future__ import annotations

import sys

from tenure.cli import main

sys.exit(main())
