"""The Models page downloads a public checkpoint through huggingface_hub — here from a loopback
server that serves a tiny checkpoint in the hub's layout — with progress, cancel, and a second
download that fetches only the files the first did not finish."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytestqt.qtbot import QtBot

from app.gui.settings.download import PUBLIC_CHECKPOINTS

if TYPE_CHECKING:
    from app.gui.window.main_window import MainWindow

pytestmark = pytest.mark.gui

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _archive(size: int) -> bytes:
    """A zip archive (torch.save's format) of about ``size`` bytes."""
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", bytes(range(256)) * (size // 256))
    return buffer.getvalue()


class _Hub:
    """A loopback stand-in for the hub: model info, the file tree, and resolve with Range."""

    def __init__(self, repo: str, files: dict[str, bytes], slow_s: float = 0.0) -> None:
        self.repo, self.files, self.slow_s = repo, files, slow_s
        self.gets: list[str] = []  # files fetched (GET), in order
        self.sent: dict[str, int] = {}  # bytes of each file sent so far
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, value: object) -> None:
                body = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _resolve(self, head: bool) -> None:
                name = self.path.split("/resolve/", 1)[1].split("/", 1)[1].split("?")[0]
                data = hub.files.get(name)
                if data is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                start = 0
                wanted = self.headers.get("Range")
                if not head:
                    hub.gets.append(name)
                if wanted and not head:
                    start = int(wanted.split("=")[1].split("-")[0])
                self.send_response(206 if wanted and not head else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if head:
                    return
                for at in range(start, len(data), 16384):
                    self.wfile.write(data[at : at + 16384])
                    self.wfile.flush()
                    hub.sent[name] = hub.sent.get(name, 0) + len(data[at : at + 16384])
                    time.sleep(hub.slow_s)

            def do_HEAD(self) -> None:
                self._resolve(head=True)

            def do_GET(self) -> None:
                if self.path.startswith(f"/api/models/{hub.repo}/tree/"):
                    self._json([
                        {"type": "file", "path": n, "size": len(d),
                         "oid": hashlib.sha1(d).hexdigest()}
                        for n, d in hub.files.items()
                    ])  # fmt: skip
                elif self.path.startswith(f"/api/models/{hub.repo}"):
                    siblings = [{"rfilename": n} for n in hub.files]
                    self._json({"id": hub.repo, "sha": COMMIT, "siblings": siblings})
                else:
                    self._resolve(head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., _Hub]]:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    servers: list[_Hub] = []

    def serve(flow_size: int = 40_000, slow_s: float = 0.0) -> _Hub:
        checkpoint = PUBLIC_CHECKPOINTS[0]
        files = {
            "assets/token2wav/flow.yaml": b"flow: 1\n",
            "assets/token2wav/flow.pt": _archive(flow_size),
            "assets/token2wav/hift_original.pt": _archive(20_000),
            "model-00001-of-00009.safetensors": b"not asked for",
        }
        server = _Hub(checkpoint.repo_id, files, slow_s)
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.server.shutdown()


def test_a_checkpoint_downloads_only_its_files_and_fills_the_settings(
    make_window: Callable[..., MainWindow], qtbot: QtBot, hub: Callable[..., _Hub],
    tmp_path: Path,
) -> None:  # fmt: skip
    from app.settings import Settings, check_settings

    server = hub()
    window = make_window()
    settings = window.open_settings()
    settings.models_endpoint = server.endpoint
    page = settings.open_models()
    page.folder.setText(str(tmp_path / "models"))
    assert "Nothing is downloaded" in page.status.text()
    with qtbot.waitSignal(page.chosen, timeout=60_000) as chosen:
        page.download.click()
    folder = Path(chosen.args[0])
    assert folder == tmp_path / "models" / "MiniCPM-o-4_5" / "assets" / "token2wav"
    assert settings.checkpoint.text() == str(folder)
    whole = Settings(family="synthetic", checkpoint=folder, device="cpu")
    check_settings(whole)  # whole: sizes and headers check out
    assert not (folder.parents[1] / "model-00001-of-00009.safetensors").exists()
    assert page.bar.value() == page.bar.maximum()
    qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
    page.reject()
    settings.reject()


def test_a_download_can_be_cancelled_and_fetches_only_the_rest_later(
    make_window: Callable[..., MainWindow], qtbot: QtBot, hub: Callable[..., _Hub],
    tmp_path: Path,
) -> None:  # fmt: skip
    server = hub(flow_size=2_000_000, slow_s=0.05)  # ~6 s for the big file
    window = make_window()
    settings = window.open_settings()
    settings.models_endpoint = server.endpoint
    page = settings.open_models()
    page.folder.setText(str(tmp_path / "models"))
    page.download.click()
    assert page.job is not None
    big = "assets/token2wav/flow.pt"
    qtbot.waitUntil(lambda: server.sent.get(big, 0) > 100_000, timeout=30_000)
    assert page.bar.maximum() == 1000 and page.bar.value() > 0
    assert page.job is not None, page.status.text()
    with qtbot.waitSignal(page.job.cancelled, timeout=30_000):
        page.cancel.click()
    qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
    assert "Cancelled" in page.status.text()
    root = tmp_path / "models" / "MiniCPM-o-4_5"
    whole = {name for name in server.files if (root / name).is_file()}
    assert "assets/token2wav/flow.yaml" in whole  # 8 bytes: done long before the cancel
    assert "assets/token2wav/flow.pt" not in whole  # 4 s of data: cut off
    server.gets.clear()
    server.slow_s = 0.0
    with qtbot.waitSignal(page.chosen, timeout=60_000):
        page.download.click()
    assert "assets/token2wav/flow.pt" in server.gets
    assert not whole & set(server.gets)  # what came down whole is not fetched again
    page.reject()
    settings.reject()
