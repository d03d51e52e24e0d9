"""A pids cgroup per sandbox run: the bound on processes and threads that holds on a root host.

The sandbox bounds a program's tasks with ``RLIMIT_NPROC`` in its user namespace, but the kernel exempts a
real uid of root (``copy_process``: ``user != INIT_USER``), so on a host that runs as root a raw
``clone(CLONE_THREAD)`` loop (no stack, no address space, nothing ``RLIMIT_AS`` sees) could take the host's
process ids until the wall limit. The pids controller has no such exemption: every run gets a cgroup of its
own with ``pids.max`` set, the bootstrap moves itself into it before it unshares anything (a fork and its
threads stay in it), and the host removes it once the run is killed.

Where: the pids hierarchy this process belongs to (``/proc/self/cgroup``, mounted per
``/proc/self/mountinfo``): cgroup v1's ``pids`` controller, or a cgroup v2 directory whose children get
``pids.max`` (its ``cgroup.subtree_control`` holds ``pids``, or accepts it). A host where neither is writable
(a container without a delegated cgroup) gets ``None``, and the sandbox reports the ``task_limit`` layer only
where ``RLIMIT_NPROC`` binds (docs/architecture.md, the attack table).
Run cgroups are named ``conductor-sbx-<host pid>-<n>``; one left behind (its host process was killed) is
removed when the next process here makes its first.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from pathlib import Path
from typing import Optional

PREFIX = "conductor-sbx-"
STALE_S = 600.0
_REMOVE_WAIT_S = 2.0  # a killed run's tasks leave the cgroup a moment after its bootstrap is reaped
_numbers = itertools.count()
_leftover: set[Path] = set()  # run cgroups still busy when their run ended, retried at the next create
_leftover_lock = threading.Lock()


def create(max_tasks: int) -> Optional[Path]:
    """A new cgroup allowing ``max_tasks`` processes and threads, or None where this host gives none."""
    parent = pids_parent()
    if parent is None:
        return None
    with _leftover_lock:
        stale = list(_leftover)
    for busy in stale:
        _try_remove(busy)
    path = parent / f"{PREFIX}{os.getpid()}-{next(_numbers)}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(f"{max_tasks}\n")
    except OSError:
        _try_remove(path)
        return None
    return path


def remove(path: Optional[Path]) -> None:
    """Remove a run's cgroup once its tasks are gone (they were killed); never raises."""
    if path is None:
        return
    deadline = time.monotonic() + _REMOVE_WAIT_S
    while not _try_remove(path):
        if time.monotonic() > deadline:
            with _leftover_lock:
                _leftover.add(path)
            return
        time.sleep(0.01)


def _try_remove(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    with _leftover_lock:
        _leftover.discard(path)
    return True


@functools.cache
def pids_parent() -> Optional[Path]:
    """The directory run cgroups are made in (checked once: one made, limited and removed), or None."""
    parent = _own_pids_cgroup()
    if parent is None:
        return None
    _sweep(parent)
    probe = parent / f"{PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except OSError:
        return None
    try:
        if not (probe / "pids.max").exists():
            (parent / "cgroup.subtree_control").write_text("+pids\n")  # v2: children get the controller
        (probe / "pids.max").write_text("1\n")
        return parent
    except OSError:
        return None
    finally:
        _try_remove(probe)


def _own_pids_cgroup() -> Optional[Path]:
    """This process's cgroup in the hierarchy that has the pids controller: v1's, else the v2 one."""
    try:
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = {}
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        own["v2" if controllers == "" else controllers] = path
    for version in ("v1", "v2"):
        for line in mounts:
            fields = line.split()
            separator = fields.index("-")
            fstype, options = fields[separator + 1], fields[separator + 3].split(",")
            if version == "v1" and fstype == "cgroup" and "pids" in options:
                path = next((p for c, p in own.items() if "pids" in c.split(",")), None)
            elif version == "v2" and fstype == "cgroup2":
                path = own.get("v2")
            else:
                continue
            mount_root, mount_point = fields[3], fields[4]
            if path is None or not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
                continue
            directory = Path(mount_point) / path[len(mount_root):].lstrip("/")
            if os.access(directory, os.W_OK):
                return directory
    return None


def _sweep(parent: Path) -> None:
    """Remove the run cgroups left by processes killed before their runs' cleanup: any of them empty and
    older than ``STALE_S``. One still holding tasks cannot be removed (the kernel refuses), and none is empty
    that long while in use: a run joins its cgroup as it starts. (Not by owner pid: a host whose containers
    share a cgroup hierarchy has pids that this process's namespace cannot see.)"""
    now = time.time()
    try:
        entries = list(parent.glob(f"{PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        try:
            stale = now - entry.stat().st_mtime > STALE_S
        except OSError:
            continue
        if stale:
            _try_remove(entry)
