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
from typing import TYPE_CHECKING, Any

import pytest
from pytestqt.qtbot import QtBot

from app.gui.settings.checkpoints import PUBLIC_CHECKPOINTS
from app.gui.settings.plan import size_text

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


def gpu_here(monkeypatch: pytest.MonkeyPatch, present: bool) -> None:
    """Whether the Models page finds a GPU driver (this machine has none; a fake at that
    boundary only, so the download tests run the same everywhere)."""
    monkeypatch.setattr("app.gui.settings.models.cuda_present", lambda: present)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., _Hub]]:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    gpu_here(monkeypatch, True)
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
    asked = sum(len(d) for n, d in server.files.items() if n.startswith("assets/token2wav/"))
    assert page.bar.format() == f"{size_text(asked)} of {size_text(asked)}"  # the hub's sizes
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
    qtbot.waitUntil(lambda: page.job is not None, timeout=30_000)  # after the hub's sizes
    big = "assets/token2wav/flow.pt"
    qtbot.waitUntil(lambda: server.sent.get(big, 0) > 100_000, timeout=30_000)
    assert page.bar.maximum() == 1000 and page.bar.value() > 0
    assert page.job is not None, page.status.text()
    with qtbot.waitSignal(page.job.cancelled, timeout=30_000):
        page.cancel.click()
    qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
    assert "Cancelled" in page.status.text() and page.bar.isHidden()  # the bar stops
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


def _page(make_window: Callable[..., MainWindow], endpoint: str, folder: Path) -> Any:
    settings = make_window().open_settings()
    settings.models_endpoint = endpoint
    page = settings.open_models()
    page.folder.setText(str(folder))
    return page


def test_without_a_gpu_the_size_is_said_and_a_second_press_downloads(
    make_window: Callable[..., MainWindow], qtbot: QtBot, hub: Callable[..., _Hub],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    gpu_here(monkeypatch, False)
    server = hub()
    page = _page(make_window, server.endpoint, tmp_path / "models")
    page.download.click()
    qtbot.waitUntil(lambda: page.pending is not None, timeout=30_000)
    asked = sum(len(d) for n, d in server.files.items() if n.startswith("assets/token2wav/"))
    assert "needs a CUDA GPU" in page.status.text() and size_text(asked) in page.status.text()
    assert page.download.text() == f"Download {size_text(asked)} anyway"
    assert not server.gets and page.bar.isHidden()  # nothing came down before the answer
    with qtbot.waitSignal(page.chosen, timeout=60_000):
        page.download.click()
    assert page.download.text() == "Download"
    page.reject()


def test_a_disk_too_small_refuses_before_anything_comes_down(
    make_window: Callable[..., MainWindow], qtbot: QtBot, hub: Callable[..., _Hub],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    server = hub()
    # The disk's free space is the one thing faked (no test fills a real disk).
    monkeypatch.setattr("app.gui.settings.plan._free_bytes", lambda folder: 10_000)
    page = _page(make_window, server.endpoint, tmp_path / "models")
    page.download.click()
    qtbot.waitUntil(lambda: "free some space" in page.status.text(), timeout=30_000)
    line = page.status.text()
    assert "\n" not in line and "10.0 kB free" in line and "another disk" in line
    assert not server.gets and page.bar.isHidden() and page.job is None
    qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
    page.reject()


def test_offline_is_one_sentence_the_bar_stops_and_the_error_goes_with_a_new_try(
    make_window: Callable[..., MainWindow], qtbot: QtBot, hub: Callable[..., _Hub],
    tmp_path: Path,
) -> None:  # fmt: skip
    import socket

    with socket.socket() as closed:  # a port nothing listens on: the network is "down"
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    page = _page(make_window, dead, tmp_path / "models")
    page.download.click()
    qtbot.waitUntil(lambda: "cannot be reached" in page.status.text(), timeout=60_000)
    assert "\n" not in page.status.text() and "Traceback" not in page.status.text()
    assert page.bar.isHidden()  # no busy bar moving after the failure
    qtbot.waitUntil(lambda: page.download.isEnabled(), timeout=10_000)
    server = hub()
    page.endpoint = server.endpoint  # back online
    with qtbot.waitSignal(page.chosen, timeout=60_000):
        page.download.click()
    assert "cannot be reached" not in page.status.text()  # no stale error
    assert page.status.text().startswith("Downloaded:")
    page.reject()


def test_every_row_shows_at_the_default_size_and_no_installation_path(
    make_window: Callable[..., MainWindow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.default_family import basic_present

    basic_present(monkeypatch)
    page = _page(make_window, "http://127.0.0.1:9", tmp_path / "models")
    page.show()
    table = page.table
    last = table.rowCount() - 1
    assert table.visualRect(table.model().index(last, 0)).bottom() <= table.viewport().height()
    for row in range(table.rowCount()):
        where = table.item(row, 2).text()
        assert "site-packages" not in where and "dist-packages" not in where
    basic = next(r for r in range(table.rowCount()) if table.rows[r].key == "basic")
    assert table.item(basic, 2).text() == "installed with the app"
    page.reject()
