"""Runs inside the sandbox child, before any untrusted code: lock the process down, then run the program.

    python -I sandbox_bootstrap.py WORKDIR LIMITS_JSON PROGRAM_FILE

Layers, each a kernel mechanism, applied in this order:
1. rlimits: address space, CPU seconds, file size, open files, no core dumps.
2. ``unshare(CLONE_NEWUSER | CLONE_NEWNET)``: a private network namespace whose loopback is down, so
   nothing (not even 127.0.0.1) is reachable; the new user namespace drops all host capabilities.
3. Landlock: reads only beneath the Python installation, system library dirs and WORKDIR; writes only
   beneath WORKDIR; no execve of any file; no TCP bind/connect (ABI >= 4).
4. seccomp (libseccomp via pyseccomp): fork, vfork, clone without CLONE_THREAD, clone3 and execve fail
   with EPERM, so no child processes (RLIMIT_NPROC does not bind for root or in a user namespace).
The layers that took effect are written as JSON to the report pipe the host passed so the host can require them.
The program file is read and deleted before it runs, then executed: running untrusted code is this
sandbox's purpose, and it happens only after every layer above is in place.
"""

import ctypes
import errno
import json
import os
import resource
import struct
import sys

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_WRITE_TREE = sum(1 << b for b in range(4, 13))  # remove/make dir, file, char, sock, fifo, block, sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
CLONE_NEWUSER, CLONE_NEWNET, CLONE_THREAD = 0x10000000, 0x40000000, 0x00010000

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def apply_rlimits(limits):
    memory = limits["memory_mb"] * 1024 * 1024
    cpu = max(1, int(limits["cpu_s"]))
    for name, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                        (resource.RLIMIT_FSIZE, limits["file_mb"] * 1024 * 1024),
                        (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(name, (value, value))


def isolate_network():
    return libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0


def landlock(workdir, read_roots):
    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return False
    fs = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_WRITE_TREE
    fs |= (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (FS_IOCTL_DEV if abi >= 5 else 0)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    attr = struct.pack("QQ", fs, net) if abi >= 4 else struct.pack("Q", fs)
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr), len(attr), 0)
    if ruleset < 0:
        return False
    read = FS_READ_FILE | FS_READ_DIR
    write = fs & ~FS_EXECUTE
    rules = [(root, read) for root in read_roots] + [(workdir, write), ("/dev/null", FS_READ_FILE | FS_WRITE_FILE)]
    for path, access in rules:
        if not os.path.exists(path):
            continue
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        if not os.path.isdir(path):
            access &= FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        rule = struct.pack("=Qi", access, fd)
        libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0)
        os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    ok = libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) == 0
    os.close(ruleset)
    return ok


def forbid_processes():
    try:
        import pyseccomp as seccomp
    except ImportError:
        return False
    try:
        rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        for name in ("fork", "vfork", "execve", "execveat"):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # glibc falls back to clone, filtered above
        rules.load()
        return True
    except Exception:
        return False


def main():
    workdir, limits_json, program_file = sys.argv[1], sys.argv[2], sys.argv[3]
    limits = json.loads(limits_json)
    with open(program_file, encoding="utf-8") as handle:
        source = handle.read()
    os.unlink(program_file)
    read_roots = sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__),
                         *limits.get("read_roots", []), "/usr/lib", "/usr/lib64", "/lib", "/lib64",
                         "/usr/share/zoneinfo", "/dev/urandom", "/proc/self"})
    try:
        import pyseccomp  # noqa: F401  (loaded before Landlock narrows what can be read)
    except ImportError:
        pass
    apply_rlimits(limits)
    layers = {"network": isolate_network(), "filesystem": landlock(workdir, read_roots),
              "processes": forbid_processes()}
    with os.fdopen(limits["report_fd"], "w") as report:
        report.write(json.dumps(layers))
    if limits.get("require_isolation") and not all(layers.values()):
        sys.exit(97)
    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}
    exec(compile(source, "solution.py", "exec"), namespace)


if __name__ == "__main__":
    main()
