"""`python -m bench.systems SYSTEM MEASURE JSON`: run one measurement, print its JSON."""

from __future__ import annotations

import importlib
import json
import sys

MODULES = {
    "tenure": "bench.systems.tenure_system",
    "procrastinate": "bench.systems.procrastinate_system",
    "pgqueuer": "bench.systems.pgqueuer_system",
    "awa": "bench.systems.awa_system",
    "raw": "bench.systems.raw_system",
}


def main() -> None:
    system, measure, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    module = importlib.import_module(MODULES[system])
    figures = getattr(module, measure)(**arguments)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
