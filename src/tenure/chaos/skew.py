"""Workers whose wall clocks are hours off: an LD_PRELOAD shim built with the machine's C
compiler that shifts CLOCK_REALTIME only."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path


def build_shim(folder: Path) -> Path | None:
    """Compile the shim into `folder`; None when there is no C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = folder / "skew.c"
    source.write_text(resources.files("tenure.chaos").joinpath("skew.c").read_text())
    shim = folder / "skew.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"],
        check=True,
        capture_output=True,
    )
    return shim


def skew_env(shim: Path, seconds: int) -> dict[str, str]:
    """The environment that makes a process's wall clock `seconds` off."""
    return {"LD_PRELOAD": str(shim), "SKEW_SECONDS": str(seconds)}
