"""The README's screenshot, taken the way CI takes it: the app under Xvfb, mid-conversation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.gui


def test_screenshot_under_xvfb_shows_the_live_panel(tmp_path: Path) -> None:
    for tool in ("xvfb-run", "espeak-ng"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: scripts/setup.sh installs it")
    out = tmp_path / "shot.png"
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env["PYTHON"] = sys.executable  # this interpreter: a fresh clone has no .venv of its own
    done = subprocess.run(
        [str(ROOT / "scripts" / "screenshot.sh"), str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "terminate called" not in done.stderr, done.stderr[-3000:]  # a clean exit
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert not image.isNull(), f"{out} is not a readable PNG"
    assert image.width() >= 800 and image.height() >= 600, (image.width(), image.height())
    # A real window has many colours (charts, meters, text), not one flat fill.
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint32, image.width() * image.height())
    assert np.unique(pixels).size > 50, "the screenshot is (nearly) one colour"
