"""Settings: YAML round trip in the config folder, atomic saves, bad files name the key and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import (
    Settings,
    SettingsError,
    check_settings,
    load_settings,
    save_settings,
    settings_path,
)
from engine.arms import Arm


def test_round_trip_keeps_every_value(tmp_path: Path) -> None:
    s = Settings(
        family="lycheefd",
        model_size="small",
        voice_frames=250,
        device="cpu",
        arm=Arm.RC,
        audit=True,
        input_device="Monitor of Null Output",
        output_device="Null Output",
        host_api="ALSA",
        echo_cancel=True,
        push_to_talk=True,
        seed=7,
    )
    path = save_settings(s, tmp_path / "deep" / "settings.yaml")
    assert load_settings(path) == s
    assert [p.name for p in path.parent.iterdir()] == ["settings.yaml"]  # no temp file left


def test_paths_survive_and_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "none.yaml") == Settings()
    s = Settings(checkpoint=tmp_path / "t2w", voice=tmp_path / "v.wav")
    assert load_settings(save_settings(s, tmp_path / "s.yaml")) == s


def test_default_path_is_in_the_user_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert settings_path() == tmp_path / "duplexcadence" / "settings.yaml"
    save_settings(Settings(seed=3))
    assert load_settings().seed == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arm: XR\n", "unknown arm"),
        ("family: nope\n", "family = 'nope': expected one of synthetic, lycheefd"),
        ("voice_frames: 301\n", "even number"),
        ("audit: maybe\n", "audit = 'maybe': give true or false"),
        ("armm: SRc\n", "unknown key 'armm'"),
        ("- a list\n", "must hold a mapping"),
        ("arm: [unclosed\n", "not valid YAML"),
        ("seed: -1\n", "non-negative"),
    ],
)
def test_bad_files_name_the_key_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message.replace("[", r"\[")):
        load_settings(path)


def test_check_settings_names_the_checkpoint_fix(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        check_settings(
            Settings(family="synthetic", checkpoint=tmp_path / "missing", model_size="full")
        )
    (tmp_path / "flow.yaml").write_text("flow: {}\n")
    with pytest.raises(SettingsError, match=r"lacks flow\.pt, hift_original\.pt"):
        check_settings(Settings(family="synthetic", checkpoint=tmp_path, model_size="full"))
    with pytest.raises(SettingsError, match="needs a checkpoint"):
        check_settings(Settings(family="synthetic", voice=tmp_path / "v.wav"))


def test_auto_sizes_follow_the_device() -> None:
    assert Settings(device="cpu").resolved_model_size() == "small"
    assert Settings(model_size="full", device="cpu").resolved_model_size() == "full"
    assert Settings().resolved_model_size("cuda") == "full"
    # A released checkpoint is full size: auto never asks for the small model on the CPU.
    assert Settings(device="cpu", checkpoint=Path("ckpt")).resolved_model_size() == "full"


def test_unwritable_folder_is_a_settings_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SettingsError, match="writable"):
        save_settings(Settings(), blocker / "settings.yaml")


def _fake_checkpoint(folder: Path) -> Path:
    """Token2Wav's three files: YAML text and two small zip archives (torch.save's format)."""
    import zipfile

    folder.mkdir()
    (folder / "flow.yaml").write_text("flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec\n")
    for name in ("flow.pt", "hift_original.pt"):
        with zipfile.ZipFile(folder / name, "w") as archive:
            archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    return folder


def test_check_settings_catches_empty_and_truncated_checkpoint_files(tmp_path: Path) -> None:
    from app.settings import check_settings

    folder = _fake_checkpoint(tmp_path / "t2w")

    def _check_checkpoint(folder: Path) -> None:
        check_settings(Settings(family="synthetic", checkpoint=folder, device="cpu"))

    _check_checkpoint(folder)  # whole files pass
    assert (
        Settings(family="synthetic", checkpoint=folder, device="cpu").resolved_model_size()
        == "full"
    )
    (folder / "flow.pt").write_bytes(b"")
    with pytest.raises(SettingsError, match=r"flow.pt is empty \(0 bytes\).*download"):
        _check_checkpoint(folder)
    whole = (folder / "hift_original.pt").read_bytes()
    (folder / "flow.pt").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SettingsError, match=r"flow\.pt is truncated"):
        _check_checkpoint(folder)
    (folder / "flow.pt").write_bytes(b"<html>not found</html>")
    with pytest.raises(SettingsError, match="is not a PyTorch checkpoint"):
        _check_checkpoint(folder)


def test_echo_cancellation_that_cannot_run_is_refused_before_anything_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On by default; where the canceller cannot run the settings check says so, with the fix,
    before a model loads (it once failed 30 s into Moshi's load, with a traceback)."""
    import app.audio.echo as echo
    from app.audio.devices import AudioError

    assert Settings().echo_cancel

    def absent() -> None:
        raise AudioError(f"{echo.INSTALL_HINT} (No module named 'pywebrtc_audio')")

    monkeypatch.setattr(echo, "_webrtc", absent)
    with pytest.raises(SettingsError, match=r"echo_cancel = true: .*pip install pywebrtc-audio"):
        check_settings(Settings(family="synthetic", device="cpu"))
    check_settings(Settings(family="synthetic", device="cpu", echo_cancel=False))
