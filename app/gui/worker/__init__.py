"""The engine side of the app: the thread that owns the session, and what crosses from it."""
