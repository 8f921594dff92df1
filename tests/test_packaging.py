"""The desktop packaging: the .desktop entry, AppStream metainfo, icon and PyInstaller spec.

The validators are the real ``desktop-file-validate`` and ``appstreamcli`` (scripts/setup.sh
installs desktop-file-utils and appstream); a test skips, naming the package, only where its tool
is missing. The spec is checked without building: a full bundle takes minutes and gigabytes.
"""

from __future__ import annotations

import ast
import configparser
import importlib.resources
import re
import shutil
import struct
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP_ID = "io.github.duplexcadence.DuplexCadence"
PACKAGING = ROOT / "packaging"
DESKTOP = PACKAGING / f"{APP_ID}.desktop"
METAINFO = PACKAGING / f"{APP_ID}.metainfo.xml"
SPEC = PACKAGING / "duplexcadence.spec"
ICON_SVG = ROOT / "assets" / "icons" / f"{APP_ID}.svg"
ICON_PNG = ROOT / "assets" / "icons" / f"{APP_ID}.png"
# The component id keeps the GitHub project's capitals (the reverse-DNS convention for app ids);
# --pedantic notes it, and that is the only note allowed.
PEDANTIC_ALLOWED = {"cid-contains-uppercase-letter"}


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed: apt-get install {package} (scripts/setup.sh does)")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(DESKTOP, encoding="utf-8")
    return parser["Desktop Entry"]


def _metainfo() -> ET.Element:
    return ET.parse(METAINFO).getroot()


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def _appstream_issues(output: str) -> set[str]:
    """Issue tags from appstreamcli's text report: lines like ``P: <cid>:4: some-tag``."""
    return set(re.findall(r"^\s*[EWIP]: [^:\s]+:[^:\s]*: ([\w-]+)", output, re.MULTILINE))


def test_desktop_entry_validates_without_any_message() -> None:
    result = _run(_tool("desktop-file-validate", "desktop-file-utils"), str(DESKTOP))
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout


def test_metainfo_validates_pedantic() -> None:
    tool = _tool("appstreamcli", "appstream")
    result = _run(tool, "validate", "--no-net", "--pedantic", str(METAINFO))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _appstream_issues(result.stdout) <= PEDANTIC_ALLOWED, result.stdout


def test_installed_tree_validates(tmp_path: Path) -> None:
    """Laid out as ``packaging/README.md`` installs it, the metainfo finds its desktop entry."""
    tool = _tool("appstreamcli", "appstream")
    share = tmp_path / "usr" / "share"
    for source, folder in [
        (DESKTOP, share / "applications"),
        (METAINFO, share / "metainfo"),
        (ICON_SVG, share / "icons" / "hicolor" / "scalable" / "apps"),
        (ICON_PNG, share / "icons" / "hicolor" / "256x256" / "apps"),
    ]:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder)
    result = _run(tool, "validate-tree", "--no-net", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_desktop_entry_matches_metainfo_and_icon() -> None:
    entry, meta = _desktop_entry(), _metainfo()
    command = next(iter(_pyproject()["scripts"]))
    assert entry["Exec"] == f"{command} gui"
    assert meta.findtext("provides/binary") == command
    assert entry["Icon"] == meta.findtext("id") == meta.findtext("icon") == APP_ID
    assert meta.findtext("launchable") == DESKTOP.name
    assert entry["Name"] == meta.findtext("name")
    assert ICON_SVG.is_file() and ET.parse(ICON_SVG).getroot().tag.endswith("svg")


def test_icon_png_is_256_pixels() -> None:
    header = ICON_PNG.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{ICON_PNG} is not a PNG"
    assert struct.unpack(">II", header[16:24]) == (256, 256), "re-run packaging/render_icon.py"


def test_metainfo_release_is_the_project_version() -> None:
    newest = _metainfo().find("releases/release")
    assert newest is not None
    assert newest.get("version") == _pyproject()["version"], (
        "add a <release> for the new version at the top of the metainfo's <releases>"
    )


def test_metainfo_screenshot_is_the_committed_one() -> None:
    url = _metainfo().findtext("screenshots/screenshot/image") or ""
    assert url.endswith("/docs/screenshot.png"), url
    if not (ROOT / "docs" / "screenshot.png").is_file():
        pytest.skip("docs/screenshot.png not committed yet (scripts/screenshot.sh makes it)")


def _spec_paths(tree: ast.Module) -> list[str]:
    """Every ``ROOT / "a" / f"{APP_ID}.b"`` chain in the spec, as a path relative to the root."""
    paths = []
    for node in ast.walk(tree):
        parts: list[str] = []
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if isinstance(node.right, ast.Constant):
                parts.insert(0, str(node.right.value))
            elif isinstance(node.right, ast.JoinedStr):
                parts.insert(0, ast.unparse(node.right)[2:-1].replace("{APP_ID}", APP_ID))
            node = node.left
        if parts and isinstance(node, ast.Name) and node.id == "ROOT":
            paths.append("/".join(parts))
    return paths


def test_spec_names_files_that_exist() -> None:
    text = SPEC.read_text(encoding="utf-8")
    paths = _spec_paths(ast.parse(text, str(SPEC)))
    assert "packaging/launch.py" in paths and "assets/declarations/*.yaml" in paths
    assert f"assets/icons/{APP_ID}.svg" in paths and f"assets/icons/{APP_ID}.png" in paths
    for path in paths:
        assert list(ROOT.glob(path)), f"the spec names {path}, which matches no file"
    assert 'collect_data_files("silero_vad", subdir="data")' in text
    vad_data = importlib.resources.files("silero_vad") / "data"
    assert any(p.name.endswith(".jit") for p in vad_data.iterdir()), "silero-vad lost its weights"
    assert 'name="duplexcadence"' in text, "the bundle's program must be the desktop Exec command"


def test_bundle_entry_runs_the_command_line() -> None:
    """The spec's entry script imports the app and forwards arguments (no args means ``gui``)."""
    result = _run(sys.executable, str(PACKAGING / "launch.py"), "--help")
    assert result.returncode == 0 and "usage: duplexcadence" in result.stdout, result.stderr
