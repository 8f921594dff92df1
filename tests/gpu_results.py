"""GPU tests report their key numbers as JSON lines; ``bench/run_gpu.sh`` collects them."""

from __future__ import annotations

import json
import os

import torch


def record(test: str, **numbers: object) -> None:
    """Append this test's key numbers to ``$DUPLEXCADENCE_GPU_RESULTS`` (JSON lines), if set."""
    path = os.environ.get("DUPLEXCADENCE_GPU_RESULTS")
    if not path:
        return
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    row = {"test": test, "gpu": device, "torch": torch.__version__, **numbers}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
