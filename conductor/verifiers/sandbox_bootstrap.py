"""Runs inside the sandbox child, before any untrusted code: lock the process down, then run the program.

    python -I -S sandbox_bootstrap.py SETTINGS_JSON

The host passes the program as a read-only file descriptor (``program_fd``), stdin as another, stdout and
stderr as pipes it reads with a byte cap, and a report pipe (``report_fd``). No path is read back. A program
run as one of a pair (sandbox.py ``run_python_pair``) also holds the two ends of its pipes to the other, named
in the program's ``__channel__``.
Layers, each a kernel mechanism, applied in this order (the report names each one that took effect):

1. ``rlimits``: address space, CPU seconds, file size, open files, no core dumps.
2. Namespaces, one ``unshare``: ``user`` (the program's capabilities exist only there), ``network``
   (loopback down: not even 127.0.0.1), ``pid`` (this process forks once; the program is pid 1 of a
   namespace holding nothing else, so no host process can be named), ``mount``, and IPC/UTS.
   ``task_limit``: at most ``max_tasks`` processes and threads, so a thread bomb cannot use up the host's
   process ids: ``RLIMIT_NPROC`` in the namespace (counted within it), which the kernel does not apply to
   a host that runs as root, and so also the run's pids cgroup (task_cgroup.py), joined before the unshare.
3. ``private_disk``: a tmpfs of ``disk_mb`` and ``max_files`` inodes mounted over the work dir in the
   private mount namespace. Files written there never reach the host's disk and vanish with the
   program; a hard link to a host file is impossible (another filesystem).
4. ``capabilities``: every capability dropped (effective, permitted, inheritable, bounding, ambient).
5. ``landlock_filesystem``: reads only beneath the Python installation, system library dirs, the work
   dir and this process's own ``/proc`` entry; writes only in the work dir; no execve; no TCP.
6. ``landlock_scopes`` (Landlock ABI >= 6): no signal to, and no abstract Unix socket of, any
   process outside this sandbox.
7. ``seccomp``: no new processes (fork, vfork, clone without CLONE_THREAD, execve), no socket at all
   (only a connected AF_UNIX stream pair, which reaches nothing: asyncio needs it), no signal to any
   other pid, no ptrace or cross-process memory access, no io_uring (its operations bypass seccomp),
   no mount/namespace/keyring/bpf/perf/userfaultfd calls, no new session or process group, no memfd, no
   change to any file's owner or extended attributes, and a change of mode or times succeeds without
   effect (Landlock governs none of these, and the program owns what its host user owns; shutil.copy sets
   both on its own copies), no System V shared memory, message queue or semaphore (their memory is outside
   ``RLIMIT_AS``), no inotify/fanotify watch; any non-native syscall ABI (int 0x80, x32) kills the process.

The program runs only after every layer above has been attempted and reported; a missing layer the host
names in ``required_layers`` (every one with ``require_isolation``; by default ``landlock_filesystem``, the
one that stops reads: conductor/verifiers/sandbox.py) makes the bootstrap exit with ISOLATION_UNAVAILABLE
(97) instead.
Running untrusted code is this sandbox's purpose, and it happens only here, at the end.
"""

import ctypes
import errno
import json
import os
import resource
import signal
import struct
import sys

ISOLATION_UNAVAILABLE = 97
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_WRITE_TREE = sum(1 << b for b in range(4, 13))  # remove/make dir, file, char, sock, fifo, block, sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_THREAD = 0x10000000, 0x20000000, 0x40000000, 0x00010000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
AF_UNIX, SOCK_STREAM, SOCK_TYPE_MASK = 1, 1, 0xF

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def apply_rlimits(settings):
    for name, value in ((resource.RLIMIT_AS, settings["memory_mb"] << 20),
                        (resource.RLIMIT_CPU, max(1, int(settings["cpu_s"]))),
                        (resource.RLIMIT_FSIZE, settings["file_mb"] << 20),
                        (resource.RLIMIT_NOFILE, settings["max_open_files"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(name, (value, value))
    return True


def join_cgroup(path):
    """Move this process (and so all it starts) into the run's pids cgroup, made by the host."""
    if not path:
        return False
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
        return True
    except OSError:
        return False


def enter_namespaces():
    """One unshare for every namespace; without user namespaces, none (a root host could still make
    them, but a program that is root in the host's user namespace is what this layer exists to avoid)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
    if libc.unshare(flags) != 0:
        return False
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"),
                           ("/proc/self/gid_map", f"0 {gid} 1")):
            with open(path, "w") as handle:
                handle.write(text)
    except OSError:
        return False  # unmapped: no PID namespace (no fork), no private disk; reported as absent
    return True


def become_pid_one(keep_fds):
    """Fork into the new PID namespace. The parent only waits and mirrors the child's exit; it keeps
    no descriptor the host reads, so the host sees end-of-file exactly when the program is gone."""
    child = os.fork()
    if child == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for fd in keep_fds:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def mount_private_disk(workdir, disk_mb, max_files):
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    options = f"size={disk_mb}m,nr_inodes={max_files},mode=0700".encode()
    return libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0


def drop_capabilities():
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two (effective, permitted, inheritable) words, all zero
    libc.syscall(126, ctypes.c_char_p(header), ctypes.c_char_p(data))  # capset
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return all(int(fields[name], 16) == 0 for name in ("CapEff", "CapPrm", "CapBnd", "CapAmb"))


def landlock(workdir, read_roots):
    """Returns (filesystem and TCP restricted, signal and abstract-socket scopes applied)."""
    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return False, False
    fs = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_WRITE_TREE
    fs |= (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (FS_IOCTL_DEV if abi >= 5 else 0)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped) if abi >= 6 else (
        struct.pack("QQ", fs, net) if abi >= 4 else struct.pack("Q", fs))
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr), len(attr), 0)
    if ruleset < 0:
        return False, False
    read = FS_READ_FILE | FS_READ_DIR
    rules = [(root, read) for root in read_roots] + [(workdir, fs & ~FS_EXECUTE),
                                                     ("/dev/null", FS_READ_FILE | FS_WRITE_FILE)]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            access &= FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        rule = struct.pack("=Qi", access, fd)
        libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0)
        os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False, False
    ok = libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) == 0
    os.close(ruleset)
    return ok, ok and bool(scoped)


_DENIED = (
    "fork", "vfork", "execve", "execveat", "socket", "tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig",
    "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "setsid", "setpgid", "memfd_create",
    "memfd_secret", "name_to_handle_at", "open_by_handle_at", "fanotify_init", "quotactl", "acct",
    # a file's owner and extended attributes: Landlock governs neither (modes and times: _IGNORED)
    "chown", "fchown", "lchown", "fchownat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr",
    "lremovexattr", "fremovexattr", "removexattrat",
    # System V IPC: shared memory outside RLIMIT_AS, queues and semaphores in kernel memory
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
    "semctl",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_mark",
)


# A file's mode and times: Landlock governs neither, and the program owns what its host user owns (a root
# host's every file), so a mode change could make a host file setuid or world-writable. They succeed without
# doing anything: shutil.copy and copy2 set them on the program's own copies, and a refusal would fail them.
_IGNORED = ("chmod", "fchmod", "fchmodat", "fchmodat2", "utime", "utimes", "utimensat", "futimesat")


def restrict_syscalls(own_pid):
    try:
        import pyseccomp as seccomp
    except ImportError:
        return False
    deny = seccomp.ERRNO(errno.EPERM)
    try:
        rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
        for action, names in ((deny, _DENIED), (seccomp.ERRNO(0), _IGNORED)):
            for name in names:
                try:
                    rules.add_rule(action, name)
                except (OSError, ValueError):
                    pass  # a syscall this kernel/libseccomp does not know cannot be called either
        rules.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # glibc falls back to clone, filtered above
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            rules.add_rule(deny, name, seccomp.Arg(0, seccomp.NE, own_pid))
        rules.add_rule(deny, "socketpair", seccomp.Arg(0, seccomp.NE, AF_UNIX))
        for sock_type in range(SOCK_TYPE_MASK + 1):
            if sock_type != SOCK_STREAM:
                rules.add_rule(deny, "socketpair", seccomp.Arg(1, seccomp.MASKED_EQ, SOCK_TYPE_MASK, sock_type))
        rules.load()
        return True
    except Exception:
        return False


def use_site(host_site):
    """Started with -S: the host interpreter's prefix (a virtual environment's, which -S leaves unread) and
    site directories, and the builtins ``site`` adds (exit, quit, help), but not its .pth files: they run
    the host's own code (an editable install's finder) and cost half the start-up."""
    import site

    sys.prefix, sys.exec_prefix = host_site["prefix"], host_site["exec_prefix"]
    sys.path.extend(path for path in host_site["dirs"] if path not in sys.path)
    site.setquit()
    site.setcopyright()
    site.sethelper()


def main():
    settings = json.loads(sys.argv[1])
    use_site(settings["site"])
    workdir, report_fd, program_fd = settings["workdir"], settings["report_fd"], settings["program_fd"]
    with os.fdopen(program_fd, encoding="utf-8") as handle:
        source = handle.read()
    read_roots = sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__),
                         *settings["site"]["dirs"], *settings.get("read_roots", []), "/usr/lib", "/usr/lib64",
                         "/lib", "/lib64", "/usr/share/zoneinfo", "/dev/urandom"})
    try:
        import pyseccomp  # noqa: F401  (loaded before Landlock narrows what can be read)
    except ImportError:
        pass
    layers = {"rlimits": apply_rlimits(settings)}
    in_cgroup, host_root = join_cgroup(settings.get("task_cgroup")), os.getuid() == 0
    namespaces = enter_namespaces()
    if namespaces:
        max_tasks = settings["max_tasks"]
        resource.setrlimit(resource.RLIMIT_NPROC, (max_tasks, max_tasks))  # counted within the namespace
        become_pid_one(keep_fds=(report_fd, *settings.get("channel", ())))
    for name in ("user_namespace", "network_namespace", "pid_namespace"):
        layers[name] = namespaces
    layers["task_limit"] = in_cgroup or (namespaces and not host_root)  # the kernel exempts a real uid of root
    layers["private_disk"] = namespaces and mount_private_disk(workdir, settings["disk_mb"], settings["max_files"])
    os.chdir(workdir)
    layers["capabilities"] = drop_capabilities()
    own_proc = f"/proc/{os.readlink('/proc/self')}"  # this process's entry, as the host's /proc names it
    layers["landlock_filesystem"], layers["landlock_scopes"] = landlock(workdir, [*read_roots, own_proc])
    layers["seccomp"] = restrict_syscalls(os.getpid())
    with os.fdopen(report_fd, "w") as report:
        report.write(json.dumps(layers))
    if any(not layers.get(name) for name in settings.get("required_layers", ())):
        sys.exit(ISOLATION_UNAVAILABLE)
    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__,
                 "__channel__": tuple(settings.get("channel", ()))}
    exec(compile(source, "solution.py", "exec"), namespace)


if __name__ == "__main__":
    main()
