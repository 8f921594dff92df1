"""Export of a session's trace (Perfetto JSON, CSV, JSONL) and audio (WAV), atomic, off-thread."""
