"""The main window and its parts."""
