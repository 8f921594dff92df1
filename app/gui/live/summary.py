"""The numbers beside the charts: cadence percentiles, overruns, replay and memory totals."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QVBoxLayout, QWidget

from app.gui import theme
from app.gui.live.history import History
from app.gui.words import reason_words
from engine.sizes import GIB, byte_text

__all__ = ["SummaryCard"]


class _Chip(QWidget):
    def __init__(self, title: str, tip: str) -> None:
        super().__init__()
        self.setToolTip(tip)
        self.setAccessibleName(title)
        self.setAccessibleDescription(tip)
        self.title = theme.card_title(title)
        self.value = QLabel("—")
        self.value.setObjectName("value")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.setSpacing(0)
        layout.addWidget(self.title)
        layout.addWidget(self.value)

    def show_value(self, text: str, colour: str | None = None) -> None:
        self.value.setText(text)
        self.value.setStyleSheet(f"color: {colour};" if colour else "")


def _ms(seconds: float | int | None) -> str:
    return "—" if seconds is None else f"{float(seconds) * 1e3:.0f} ms"


def _size(n_bytes: float) -> str:
    return byte_text(n_bytes, "GiB", 2) if n_bytes >= GIB else byte_text(n_bytes, "MiB", 0)


def _memory_peak(memory: dict[str, int]) -> str:
    """The session's memory peak and where: the GPU's allocations, or the process's RAM."""
    if "peak_bytes" in memory:  # engine.metrics.memory_stats on a CUDA device
        return f"{_size(memory['peak_bytes'])} (GPU)"
    return f"{_size(max(memory.get('peak_rss_bytes', 0), memory.get('rss_bytes', 0)))} (RAM)"


class SummaryCard(QFrame):
    """Two columns of figures: response latency, real-time headroom, p50, p95, max, over
    budget, dropouts, replayed, eager, captures, memory, and audit mode's verdict."""

    def __init__(self, window: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        last = f"over the last {window} periods"
        specs = {
            "response": (
                "response",
                "How long the assistant takes to answer: from the end of your speech at the "
                "microphone to its first sound at the speaker, by the sound card's own clock "
                "where it gives one (median of the answers so far; the last one in brackets; "
                "the trace's response_ms).",
            ),
            "headroom": (
                "headroom",
                "How many times faster than real time the engine computes a period (the period "
                f"divided by the 95th percentile time, {last}). Below 1x the voice stutters.",
            ),
            "p50": ("p50", f"Median time to compute one period, {last}."),
            "p95": ("p95", f"95 periods in 100 are computed at least this fast ({last})."),
            "max": ("max", f"The slowest period, {last}."),
            "over": (
                "over budget",
                "Periods that took longer to compute than they last (each one can stutter).",
            ),
            "dropouts": (
                "dropouts",
                "Moments the speaker ran dry or the microphone overflowed (audible gaps). "
                "A file as the microphone, or no speaker, has none.",
            ),
            "hits": ("replayed", "Model operations replayed from a recorded graph (session)."),
            "misses": (
                "direct",
                "Model operations run directly, not replayed, by reason (session).",
            ),
            "captures": (
                "captures / inval.",
                "Graphs recorded / thrown away because something they relied on changed.",
            ),
            "memory": (
                "memory peak",
                "The most memory the session has used: on a GPU its allocations there (the "
                "Session card names the GPU and its size), on the CPU the app's RAM.",
            ),
            "audit": (
                "audit",
                "Audit mode (Settings): every carried state is checked against the stock "
                "concatenation, bit for bit; retentions that agreed / diverged.",
            ),
        }
        title = theme.card_title("Cadence and replay")
        grid = QGridLayout()
        grid.setHorizontalSpacing(16)
        grid.setVerticalSpacing(4)
        self.chips = {key: _Chip(name, tip) for key, (name, tip) in specs.items()}
        for i, chip in enumerate(self.chips.values()):
            grid.addWidget(chip, i // 2, i % 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(6)
        layout.addWidget(title)
        layout.addLayout(grid)

    def refresh(self, history: History) -> None:
        s = history.stats.summary()
        c = self.chips
        responses = history.responses_ms
        if responses:
            median = float(np.median(responses))
            c["response"].show_value(f"{median:.0f} ms ({responses[-1]:.0f})")
        else:
            c["response"].show_value("—")
        p95, last_view = s["p95_s"], history.last
        if p95 and last_view is not None:
            headroom = last_view.budget_ms / 1e3 / float(p95)
            colour = theme.OVER if headroom < 1 else theme.PROCESSING
            c["headroom"].show_value(f"{headroom:.1f}x real time", colour)
        else:
            c["headroom"].show_value("—")
        dropouts = last_view.dropouts if last_view is not None else 0
        c["dropouts"].show_value(str(dropouts), theme.OVER if dropouts else None)
        c["p50"].show_value(_ms(s["p50_s"]))
        c["p95"].show_value(_ms(s["p95_s"]))
        c["max"].show_value(_ms(s["max_s"]))
        over, total = int(s["over_budget_total"] or 0), int(s["periods"] or 0)
        c["over"].show_value(f"{over} / {total}", theme.OVER if over else theme.PROCESSING)
        t = history.totals
        c["hits"].show_value(f"{t.get('hits', 0):.0f}", theme.HITS if t.get("hits") else None)
        reasons = sorted(
            ((k.removeprefix("misses."), v) for k, v in t.items() if k.startswith("misses.")),
            key=lambda kv: -kv[1],
        )
        c["misses"].show_value(f"{t.get('misses', 0):.0f}")
        c["misses"].setToolTip(
            "Model operations run directly, not replayed, by reason (session):\n"
            + ("\n".join(f"  {n:.0f}: {reason_words(r)} ({r})" for r, n in reasons) or "  none")
        )
        c["captures"].show_value(f"{t.get('captures', 0):.0f} / {t.get('invalidations', 0):.0f}")
        last = history.last
        if last is not None and last.memory:
            c["memory"].show_value(_memory_peak(last.memory))
        self._show_audit(last.audit if last is not None else None)

    def _show_audit(self, audit: dict[str, object] | None) -> None:
        chip = self.chips["audit"]
        if audit is None:
            chip.show_value("off")
        elif not audit.get("active"):
            chip.show_value("no carry (arm)")
        elif audit.get("divergences_total"):
            chip.show_value(f"{audit['divergences_total']} diverged", theme.OVER)
            chip.setToolTip(f"first divergence: {audit.get('first')}")
        else:
            chip.show_value(f"{audit.get('agreements_total', 0)} agree", theme.HITS)
