"""PersonaPlex's voice and role from the command line and the settings file, to the request;
an unknown voice is one line naming the folder's voices."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import build_parser, main
from app.converse import request_from_args
from app.settings import Settings


def test_voice_and_role_flags_reach_the_request() -> None:
    args = build_parser().parse_args(
        ["converse", "--headless", "--family", "personaplex", "--voice", "NATM1",
         "--role", "You sell bicycles.", "--device", "cpu"]
    )  # fmt: skip
    settings = request_from_args(args).settings
    assert settings.voice == Path("NATM1") and settings.role == "You sell bicycles."
    request = settings.model_request()
    assert request.voice == Path("NATM1") and request.role == "You sell bicycles."
    again = Settings.from_dict(settings.to_dict())
    assert again.role == "You sell bicycles." and again.voice == Path("NATM1")
    assert Settings.from_dict({"role": ""}).role is None


def test_a_voice_name_without_a_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["converse", "--headless", "--family", "personaplex", "--voice", "NATF9",
         "--device", "cpu", "--input", "assets/talk/question.flac",
         "--output", str(tmp_path / "out.wav"), "--quiet"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert "voice 'NATF9' is neither a file nor one of the folder's voices" in err[0]
