"""Host memory a model may still take, checked before it loads on the CPU (issue 27).

A model that does not fit grows until the allocator fails or the kernel's OOM killer ends the
process, minutes into loading. :func:`check_host_memory` refuses first, in one line with the
numbers: what the model needs against the least of what bounds this process, which is the
memory the system has available (``psutil``), the address space left under ``ulimit -v``
(``RLIMIT_AS``, less what the process maps already) and its cgroup's limit (containers,
``systemd-run -p MemoryMax``) less what the cgroup uses.
"""

from __future__ import annotations

import resource
from pathlib import Path

from adapters.face import FamilyError
from engine.sizes import byte_text

__all__ = ["check_host_memory", "host_room"]

_CGROUP = Path("/sys/fs/cgroup")


def host_room() -> tuple[int, str]:
    """Bytes this process may still take on the host, and what bounds it, in words."""
    import psutil

    rooms = [(int(psutil.virtual_memory().available), "this machine has available")]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        mapped = int(psutil.Process().memory_info().vms)
        rooms.append((max(0, soft - mapped), "its address-space limit (ulimit -v) leaves"))
    cgroup = _cgroup_room()
    if cgroup is not None:
        rooms.append((cgroup, "its cgroup's memory limit leaves"))
    return min(rooms)


def _cgroup_room() -> int | None:
    """The cgroup v2 limit less its use, or None where there is no limit to read."""
    try:
        own = Path("/proc/self/cgroup").read_text().strip().splitlines()[0].split("::", 1)[1]
        folder = _CGROUP / own.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text()))
    except (OSError, IndexError, ValueError):
        return None


def check_host_memory(
    needed: int, what: str, parts: str, fix: str, *, at_least: bool = False
) -> None:
    """A :class:`FamilyError` on ``device`` when the host cannot hold ``needed`` bytes:
    ``what`` needs them (``parts`` says of what), ``fix`` says what to do; ``at_least``: they
    are what is known before the model is built, part of what it needs."""
    room, bound = host_room()
    if room < needed:
        raise FamilyError(
            f"{what} needs {'at least' if at_least else 'about'} {byte_text(needed)} of host "
            f"memory on the CPU ({parts}), "
            f"but {bound} {byte_text(room)}: {fix}",
            "device",
        )
