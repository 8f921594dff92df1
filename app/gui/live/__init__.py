"""The live panel: cadence, replay, captures, memory and stages per period (pyqtgraph)."""
