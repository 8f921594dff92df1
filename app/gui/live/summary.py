"""The numbers beside the charts: cadence percentiles, overruns, replay and memory totals."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QVBoxLayout, QWidget

from app.gui import theme
from app.gui.live.history import History

__all__ = ["SummaryCard"]


class _Chip(QWidget):
    def __init__(self, title: str, tip: str) -> None:
        super().__init__()
        self.setToolTip(tip)
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
    return f"{n_bytes / 2**30:.2f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.0f} MiB"


class SummaryCard(QFrame):
    """Two columns of figures: p50, p95, max, over budget, replayed, eager, captures, memory,
    and audit mode's verdict."""

    def __init__(self, window: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        last = f"over the last {window} periods"
        specs = {
            "p50": ("p50", f"median processing time per period {last}"),
            "p95": ("p95", f"95th percentile processing time per period {last}"),
            "max": ("max", f"slowest period {last}"),
            "over": ("over budget", "periods whose processing took longer than the period"),
            "hits": ("replayed", "operator calls replayed from a captured graph: hits (session)"),
            "misses": ("eager", "operator calls run eagerly: misses, by reason (session)"),
            "captures": ("captures / inval.", "graphs captured / invalidated (session)"),
            "memory": ("memory peak", "GPU peak allocated, or CPU peak resident set"),
            "audit": (
                "audit",
                "audit mode (Settings): every carry retention shadowed by the stock "
                "concatenation and compared bit for bit; retentions that agreed / diverged",
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
            "operator calls run eagerly: misses, by reason (session):\n"
            + ("\n".join(f"  {r}: {n:.0f}" for r, n in reasons) or "  none")
        )
        c["captures"].show_value(f"{t.get('captures', 0):.0f} / {t.get('invalidations', 0):.0f}")
        last = history.last
        if last is not None and last.memory:
            peak = max(
                last.memory.get("peak_bytes", 0),
                last.memory.get("peak_rss_bytes", 0),
                last.memory.get("rss_bytes", 0),
            )
            c["memory"].show_value(_size(peak))
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
