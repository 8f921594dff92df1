"""``plan`` bounds every evaluated quantity, whatever its source (issue 27): a product of absurd
sizes, an override, a declared literal, a division by zero. A user's mistake is one line naming
the key and exits 2 (``--set``) or 1 (the declaration file), never "internal error" (70)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import EXIT_INVALID, EXIT_USAGE, main

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "declarations"


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["plan", *argv])
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "internal error" not in err, err
    return status, err


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("tokens_per_call=100000000000000", "over the bound"),  # 2.6e20 bytes of cache
        ("frames_per_token=0", "frames_per_token"),
        ("f_call=" + "9" * 5000, "5,000 digits, over the bound"),
        ("n_steps=-1", "n_steps"),
        ("vocab=" + "9" * 16, "vocab"),
    ],
)
def test_absurd_overrides_exit_2_with_the_key(
    capsys: pytest.CaptureFixture[str], setting: str, words: str
) -> None:
    status, err = _plan(capsys, "minicpmo45_token2wav", "--set", setting)
    assert status == EXIT_USAGE and err.startswith("duplexcadence: error: --set ") and words in err


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("frames_per_token: 2", "frames_per_token: 0", "division by zero"),
        ("frames_per_token: 2", "frames_per_token: " + "7" * 5000, "5,000 characters"),
        ("f_prompt: 302", "f_prompt: 999999999999999", "over the bound"),
    ],
)
def test_absurd_declarations_exit_1_with_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, new: str, words: str
) -> None:
    text = (SHIPPED / "minicpmo45_token2wav.yaml").read_text()
    assert old in text
    (tmp_path / "d.yaml").write_text(text.replace(old, new))
    status, err = _plan(capsys, str(tmp_path / "d.yaml"))
    assert status == EXIT_INVALID and words in err, err
