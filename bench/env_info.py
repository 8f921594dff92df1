"""Print the facts every committed result carries: GPU, driver, torch, date and the command."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys

import torch


def environment(command: str) -> dict[str, object]:
    """The environment of a benchmark or GPU-test run, as plain JSON."""
    info: dict[str, object] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=driver_version,clocks.sm,clocks.mem",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        info["nvidia_smi"] = smi.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = None
    return info


if __name__ == "__main__":
    print(json.dumps(environment(" ".join(sys.argv[1:])), indent=2))
