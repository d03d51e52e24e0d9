"""A pids cgroup per sandbox run: the bound on processes and threads that holds on a root host.

The sandbox bounds a program's tasks with ``RLIMIT_NPROC`` in its user namespace, but the kernel exempts a
real uid of root (``copy_process``: ``user != INIT_USER``), so on a host that runs as root a raw
``clone(CLONE_THREAD)`` loop (no stack, no address space, nothing ``RLIMIT_AS`` sees) could take the host's
process ids until the wall limit. The pids controller has no such exemption: every run gets a cgroup of its
own with ``pids.max`` set, the bootstrap moves itself into it before it unshares anything (a fork and its
threads stay in it), and the host removes it once the run is killed.

Where: the pids hierarchy this process belongs to (``/proc/self/cgroup``, mounted per
``/proc/self/mountinfo``): cgroup v1's ``pids`` controller, or a cgroup v2 directory whose children get
``pids.max`` (its ``cgroup.subtree_control`` holds ``pids``, or accepts it: in practice only a cgroup that
holds no process itself, the kernel's rule). A host where neither is writable (a container without a
delegated cgroup) gets ``None``, and the sandbox reports the ``task_limit`` layer only where
``RLIMIT_NPROC`` binds (docs/architecture.md, the attack table).

Names: ``conductor-sbx-<host pid>-<random>-<deadline>``, the deadline (epoch seconds) past which nothing of
the run may be alive: its wall limit plus ``GRACE_S``. A host process killed mid-run leaves its program
running (nothing ties the two) and its cgroup busy; any process here that makes cgroups, at most once every
``SWEEP_EVERY_S``, kills what is left in run cgroups past their deadline and removes them.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Optional

PREFIX = "conductor-sbx-"
GRACE_S = 60.0
SWEEP_EVERY_S = 60.0
_REMOVE_WAIT_S = 2.0  # a killed run's tasks leave the cgroup a moment after its bootstrap is reaped
_NAME = re.compile(re.escape(PREFIX) + r"\d+-[0-9a-f]{8}-(\d+|probe)")  # the last part: the deadline
_lock = threading.Lock()  # the leftovers and the sweep's clock
_parent_lock = threading.Lock()  # the first look for the parent directory (it removes its probe: _lock)
_UNSET = object()
_parent: object = _UNSET  # found once: the directory, or None
_leftover: set[Path] = set()  # run cgroups still busy when their run ended, retried at the next create
_last_sweep = 0.0


def create(max_tasks: int, wall_s: float) -> Optional[Path]:
    """A new cgroup allowing ``max_tasks`` processes and threads to a run of at most ``wall_s`` seconds, or
    None where this host gives none."""
    parent = pids_parent()
    if parent is None:
        return None
    _tidy(parent)
    deadline = int(time.time() + wall_s + GRACE_S)
    for _ in range(3):  # a name taken (pid reuse, another container's process) is never touched: draw again
        path = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{deadline}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(f"{max_tasks}\n")
        except OSError:
            _try_remove(path)
            return None
        return path
    return None


def remove(path: Optional[Path]) -> None:
    """Remove a run's cgroup once its tasks are gone (they were killed); never raises."""
    if path is None:
        return
    deadline = time.monotonic() + _REMOVE_WAIT_S
    while not _try_remove(path):
        if time.monotonic() > deadline:
            with _lock:
                _leftover.add(path)
            return
        time.sleep(0.01)


def pids_parent() -> Optional[Path]:
    """The directory run cgroups are made in (checked once: one made, limited and removed), or None."""
    global _parent
    with _parent_lock:
        if _parent is _UNSET:
            _parent = _usable_parent()
        return _parent


def _usable_parent() -> Optional[Path]:
    parent = _own_pids_cgroup()
    if parent is None:
        return None
    probe = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}-probe"
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


def _try_remove(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    with _lock:
        _leftover.discard(path)
    return True


def _tidy(parent: Path) -> None:
    """This process's busy leftovers again; every process's expired run cgroups, now and then."""
    global _last_sweep
    with _lock:
        leftovers = list(_leftover)
        sweep = time.monotonic() - _last_sweep > SWEEP_EVERY_S
        if sweep:
            _last_sweep = time.monotonic()
    for path in leftovers:
        _try_remove(path)
    if sweep:
        sweep_expired(parent)


def sweep_expired(parent: Path, now: Optional[float] = None) -> None:
    """Kill what is left in run cgroups past their deadline (a host killed mid-run leaves its program
    running) and remove them. A probe counts from its last change; a name not of this module's form is
    left alone."""
    now = time.time() if now is None else now
    try:
        entries = list(parent.glob(f"{PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        name = _NAME.fullmatch(entry.name)
        if name is None:
            continue
        try:
            deadline = entry.stat().st_mtime + GRACE_S if name[1] == "probe" else int(name[1])
        except OSError:
            continue
        if now > deadline and not _try_remove(entry):
            _kill_tasks(entry)
            remove(entry)


def _kill_tasks(path: Path) -> None:
    try:
        pids = [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        if pid <= 0:  # a task of another pid namespace shows as 0: never signal by group
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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
