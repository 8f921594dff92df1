"""Moshi (Kyutai): a 7B speech-text model and the Mimi codec, one 80-ms frame per period.

Its model code is the ``moshi`` package (installed with ``--no-deps``: it pins an older torch);
this family runs that code under the engine (``frame``: the frame's operators; ``stream``: arms
and replay; ``family``: the face), from a local checkpoint folder or seeded random weights.
"""
