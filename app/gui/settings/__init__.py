"""The settings dialog (model, arm, audio), validated off the GUI thread."""
