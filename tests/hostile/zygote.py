"""The server side of :mod:`tests.hostile.child`'s forked children (run inside a zygote).

Started once per bound, bounded like its children (``RLIMIT_AS``, set by the prelude before
anything is imported), it imports what they import first (:data:`PRELOADED`: torch, numpy,
soundfile, the project's modules, seconds of each child's time on a busy 2-core machine; or
:data:`TORCH_FREE`, for commands that must end before torch loads) and builds the command
line's parser (whose help reads the Token2Wav declarations and plans them: their caches are
inherited), then serves one request a line on stdin, a JSON object, answering one JSON line on
stdout:

- ``{"op": "run", "code", "cwd", "stdout", "stderr", "session"}``: fork; the child runs
  ``code`` as ``python -c`` would (in ``__main__``, ``sys.exit`` and an uncaught exception end
  it the interpreter's way, with ``atexit`` and the flush of its streams), its stdin
  ``/dev/null``, its stdout and stderr the files named, in a session of its own if asked.
  Answers ``{"pid"}`` at once.
- ``{"op": "load", "argv"}``: load, with production's own checks and load, the model the
  ``converse`` command ``argv`` would load, keyed by its request; answers ``{"threads"}`` (a
  fork copies one thread only, so a load that left another running is refused). A child run
  with ``"shared": true`` is handed that model by its family's ``load`` (once, for the same
  request; any other load is a real one): the process state right after ``load`` returned.
- ``{"op": "wait", "pid", "block"}``: reap the child (or only look, ``block`` false); answers
  ``{"status"}``, as ``subprocess`` reports it (``-N`` if signal N ended it), or ``null``.

Imports only; the zygote starts no thread, so a fork copies a whole process. Before each fork
it freezes its heap (``gc.freeze``): a child's collections, and its interpreter's at exit, skip
what it inherited, instead of walking it (and copying every page they touch): 0.8 s of the
1.3 s an empty child took, at load 8. A conversation gives its heap back when its session
closes (``app.heap.release_heap``) and then walks it at exit as any process does.
"""

from __future__ import annotations

import gc
import json
import os
import sys

PRELOADED = (
    "torch", "numpy", "soundfile", "yaml",
    "app.cli", "app.converse", "app.demo", "app.synth", "app.periods",
    "adapters.registry", "adapters.token2wav.family", "engine.trace_export",
)  # fmt: skip
TORCH_FREE = ("numpy", "soundfile", "yaml", "app.cli", "engine.trace_export")


def serve(preload: tuple[str, ...]) -> None:
    for name in preload:
        __import__(name)
    sys.modules["app.cli"].build_parser()
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "run":
            out.flush()
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                _become(request)
                exec(compile(request["code"], "<string>", "exec"), vars(sys.modules["__main__"]))
                sys.exit(0)  # the end of the code: the end of the child, as for ``python -c``
            answer: dict[str, object] = {"pid": pid}
        elif request["op"] == "load":
            answer = {"threads": _load(request["argv"])}
        else:
            flags = 0 if request["block"] else os.WNOHANG
            done, status = os.waitpid(request["pid"], flags)
            answer = {"status": os.waitstatus_to_exitcode(status) if done else None}
        out.write(json.dumps(answer) + "\n")
        out.flush()


LOADED: dict[object, object] = {}  # request -> the model its family's load returned


def _load(argv: list[str]) -> int:
    import threading

    from adapters.registry import family
    from app.cli import build_parser
    from app.converse import request_from_args

    req = request_from_args(build_parser().parse_args(argv))
    realtime = req.input is None or req.realtime  # as app.converse asks build_session
    request = req.settings.model_request(n_steps=req.n_steps, realtime=realtime)
    if request not in LOADED:
        face = family(req.settings.family)
        face.check(request)
        LOADED[request] = face.load(request, lambda stage, fraction: None)
    return max(threading.active_count(), len(os.listdir("/proc/self/task")))


def _share_loaded() -> None:
    """The families' ``load`` hands out the model loaded for the same request, once."""
    from adapters.registry import family

    for face in {type(family(key)) for key in ("synthetic",)}:
        original = face.load

        def load(self: object, request: object, progress: object, original: object = original):
            if request in LOADED:
                return LOADED.pop(request)
            return original(self, request, progress)  # type: ignore[operator]

        face.load = load  # type: ignore[method-assign]


def _become(request: dict[str, object]) -> None:
    """The forked child's own process state: cwd, session, standard streams."""
    if request["shared"]:
        _share_loaded()
    else:
        LOADED.clear()
    if request["session"]:
        os.setsid()
    os.chdir(str(request["cwd"]))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(str(request[name]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (fd 0, owned by the process)
    sys.argv = ["-c"]
