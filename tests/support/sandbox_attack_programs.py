"""The attack programs of tests/test_sandbox_attacks.py, each written the way a program that is *trying* would
write it. Upper-case placeholders (SECRET_PATH, VICTIM, HOST, UNIX_PATH, DGRAM_PATH, ABSTRACT_NAME, TCP_PORT,
RAY_DIR, OUTSIDE_PATH) are replaced with the test host's values before a program runs; a line starting with
SENT, CONNECTED, GOT, WROTE, DID, ALLOWED or SURVIVED, or the host's secret, in its output is a breach."""

ATTACKS: dict[str, str] = {
    # The host used to read output files back by path: swap them for symlinks to a host secret.
    "symlinked_output_files": """
import os
for name in ('.stdout', '.stderr', 'stdout', 'stderr', 'output.txt', 'solution.py'):
    try: os.symlink(SECRET_PATH, name)
    except OSError as e: print('symlink', name, type(e).__name__)
try: print(open('.stdout').read())
except OSError as e: print('read', type(e).__name__)
""",
    # ... or for FIFOs, which block a host that opens them; then hold a FIFO open for writing.
    "fifo_output_files": """
import os
for name in ('.stdout', '.stderr', 'stdout', 'stderr', 'fifo'):
    os.mkfifo(name)
fd = os.open('fifo', os.O_WRONLY)
""",
    "signal_host_processes": """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def raw(number, *args):
    if libc.syscall(number, *args) != 0: raise OSError(ctypes.get_errno(), 'refused')
info = ctypes.create_string_buffer(128)
def parent():  # in a PID namespace the parent is invisible (getppid() == 0): nothing to name
    if not os.getppid(): raise ProcessLookupError('parent not visible')
    os.kill(os.getppid(), signal.SIGTERM)
for label, call in (('victim', lambda: os.kill(VICTIM, signal.SIGKILL)),
                    ('all', lambda: os.kill(-1, signal.SIGKILL)),
                    ('victim group', lambda: os.killpg(VICTIM, signal.SIGKILL)),
                    ('host', lambda: os.kill(HOST, signal.SIGTERM)),
                    ('own group', lambda: os.kill(0, signal.SIGTERM)), ('parent', parent),
                    ('tgkill', lambda: raw(234, VICTIM, VICTIM, 9)), ('sigqueue', lambda: raw(129, VICTIM, 9, info))):
    try: call(); print('SENT', label, flush=True)
    except (OSError, ValueError) as e: print('refused', label, type(e).__name__, flush=True)
""",
    "ptrace_and_read_host_memory": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('attach', libc.ptrace(16, VICTIM, 0, 0), ctypes.get_errno())
print('seize', libc.ptrace(0x4206, VICTIM, 0, 0), ctypes.get_errno())
buf = ctypes.create_string_buffer(64)
class iovec(ctypes.Structure): _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
local, remote = iovec(ctypes.addressof(buf), 64), iovec(0x400000, 64)
print('vm_readv', libc.process_vm_readv(VICTIM, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
""",
    "read_other_processes_proc": """
import os
for path in ('/proc/VICTIM/environ', '/proc/VICTIM/cmdline', '/proc/HOST/environ', '/proc/1/environ', '/proc/1/cmdline',
             '/proc/HOST/maps', '/proc/self/../VICTIM/environ'):
    try: print(path, open(path, 'rb').read())
    except OSError as e: print('refused', path, type(e).__name__)
try: print('listing', sorted(os.listdir('/proc')))
except OSError as e: print('refused listing', type(e).__name__)
try: print('cwd of host', os.readlink('/proc/HOST/cwd'))
except OSError as e: print('refused cwd', type(e).__name__)
""",
    "parent_environment": """
import os
print(dict(os.environ))
print(open('/proc/self/environ', 'rb').read())
try: print(open('/proc/%d/environ' % os.getppid(), 'rb').read())
except OSError as e: print('refused parent', type(e).__name__)
""",
    "connect_pathname_unix_socket": """
import socket
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    try:
        s = socket.socket(socket.AF_UNIX, kind); s.connect(UNIX_PATH); s.sendall(b'hello'); print('CONNECTED', kind)
    except OSError as e: print('refused', kind, type(e).__name__)
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'hello', DGRAM_PATH); print('SENT dgram')
except OSError as e: print('refused pair', type(e).__name__)
try:
    a, b = socket.socketpair(); a.sendto(b'hello', DGRAM_PATH); print('SENT stream pair')
except OSError as e: print('refused stream pair', type(e).__name__)
""",
    "connect_abstract_unix_socket": """
import socket
try:
    s = socket.socket(socket.AF_UNIX); s.connect(ABSTRACT_NAME); s.sendall(b'hello'); print('CONNECTED')
except OSError as e: print('refused', type(e).__name__)
""",
    "network_any_family": """
import socket
for family, kind, address in ((socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', TCP_PORT)),
                              (socket.AF_INET, socket.SOCK_DGRAM, ('127.0.0.1', TCP_PORT)),
                              (socket.AF_INET6, socket.SOCK_STREAM, ('::1', TCP_PORT, 0, 0)),
                              (socket.AF_NETLINK, socket.SOCK_RAW, (0, 0))):
    try:
        s = socket.socket(family, kind); s.settimeout(1); s.connect(address); s.send(b'x'); print('CONNECTED', family)
    except OSError as e: print('refused', family, type(e).__name__)
""",
    "read_ray_session_dir": """
import os, socket
for call in (lambda: os.listdir(RAY_DIR), lambda: open(RAY_DIR + '/session.json').read(),
             lambda: socket.socket(socket.AF_UNIX).connect(RAY_DIR + '/sockets/raylet')):
    try: print('GOT', call())
    except OSError as e: print('refused', type(e).__name__)
""",
    "hard_link_host_file": """
import os
try: os.link(SECRET_PATH, 'linked'); print(open('linked').read())
except OSError as e: print('refused', type(e).__name__)
""",
    "write_outside_work_dir": """
for path in (OUTSIDE_PATH, '/tmp/conductor-escape', '/dev/shm/conductor-escape'):
    try: open(path, 'w').write('x'); print('WROTE', path)
    except OSError as e: print('refused', path, type(e).__name__)
""",
    "fill_the_disk": """
import os
written = 0
try:
    for i in range(1000):
        with open('big%d' % i, 'wb') as f:
            for _ in range(16): f.write(b'x' * (1 << 20)); written += 1 << 20
except OSError as e: print('stopped', type(e).__name__, written >> 20, 'MB')
""",
    "many_files": """
count = 0
try:
    for i in range(1_000_000): open('f%d' % i, 'w').close(); count += 1
except OSError as e: print('stopped', type(e).__name__, count)
""",
    "fd_exhaustion": """
import os
fds = []
try:
    while True: fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e: print('stopped', type(e).__name__, len(fds))
try: r, w = os.pipe(); print('pipe after exhaustion')
except OSError as e: print('no pipe', type(e).__name__)
""",
    "outlive_the_parent": """
import os, threading, time
for label, call in (('fork', os.fork), ('setsid', os.setsid), ('setpgid', lambda: os.setpgid(0, 0)),
                    ('daemon', lambda: os.posix_spawn('/bin/sleep', ['sleep', '60'], {}))):
    try: print('DID', label, call())
    except OSError as e: print('refused', label, type(e).__name__)
threading.Thread(target=time.sleep, args=(600,)).start()
os.close(1); os.close(2)
""",
    "kernel_attack_surface": """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
results = {'io_uring_setup': libc.syscall(425, 8, params), 'unshare_user': libc.unshare(0x10000000),
           'unshare_mount': libc.unshare(0x00020000), 'bpf': libc.syscall(321, 0, 0, 0),
           'userfaultfd': libc.syscall(323, 0), 'perf_event_open': libc.syscall(298, 0, 0, -1, -1, 0),
           'keyctl': libc.syscall(250, 0, 0, 0, 0, 0), 'memfd_create': libc.syscall(319, b'x', 0),
           'mount': libc.mount(b'none', b'.', b'tmpfs', 0, None), 'chroot': libc.chroot(b'.'),
           'pidfd_open': libc.syscall(434, os.getpid(), 0)}
print('ALLOWED' if any(v >= 0 for v in results.values()) else 'all refused', results)
""",
    # The 32-bit syscall ABI (int 0x80) is a classic seccomp bypass: it must kill, not run.
    "foreign_syscall_abi": """
import ctypes, mmap
code = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (getpid on i386); int 0x80; ret
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
print('pid via int 0x80', ctypes.CFUNCTYPE(ctypes.c_int)(address)())
print('SURVIVED')
""",
    # Landlock governs reads and writes, not a file's metadata: the program owns what its host user owns, so a
    # root host's files could be made setuid or world-writable, their times and attributes changed.
    "change_host_file_metadata": """
import os
before = os.stat(SECRET_PATH)
for label, call in (('chown', lambda: os.chown(SECRET_PATH, 0, 0)),
                    ('setxattr', lambda: os.setxattr(SECRET_PATH, 'user.x', b'1'))):
    try: call(); print('DID', label)
    except OSError as e: print('refused', label, type(e).__name__)
os.chmod(SECRET_PATH, 0o4777); os.utime(SECRET_PATH, (0, 0))  # succeed without effect
after = os.stat(SECRET_PATH)
print('DID chmod' if after.st_mode != before.st_mode else 'ignored chmod')
print('DID utime' if after.st_mtime != before.st_mtime else 'ignored utime')
""",
    # System V shared memory, filled then detached, is resident outside RLIMIT_AS.
    "sysv_shared_memory": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
for label, result in (('shmget', libc.shmget(0, 1 << 20, 0o1600)), ('msgget', libc.msgget(0, 0o1600)),
                      ('semget', libc.semget(0, 1, 0o1600))):
    print('DID' if result >= 0 else 'refused', label, result)
""",
    # Raw clone(CLONE_THREAD) threads that share the caller's stack and only ever pause: no stack, no memory,
    # no CPU, so no rlimit but a task limit stops them; a root host is exempt from RLIMIT_NPROC.
    "raw_clone_thread_bomb": """
import ctypes, mmap, os
code = bytes([0xB8, 56, 0, 0, 0,  # mov eax, clone
              0xBF, 0x00, 0x0F, 0x05, 0x00,  # mov edi, VM|FS|FILES|SIGHAND|THREAD|SYSVSEM (0x50F00)
              0x31, 0xF6, 0x31, 0xD2, 0x45, 0x31, 0xD2, 0x45, 0x31, 0xC0,  # no new stack, no tids, no tls
              0x0F, 0x05, 0x48, 0x85, 0xC0, 0x74, 0x01, 0xC3,  # syscall; the caller returns the result
              0xB8, 34, 0, 0, 0, 0x0F, 0x05, 0xEB, 0xF7])  # the thread: pause, forever, touching no memory
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
clone = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
started = 0
while started < 5000:
    result = clone()
    if result < 0:
        break
    started += 1
print('stopped after', started, 'threads, errno', -result, flush=True)
os._exit(0)  # no unmapping of the page the threads are parked in
""",
    # Forge the isolation report or reach the host's descriptors.
    "forge_report_and_host_fds": """
import json, os
for fd in range(3, 64):
    try: os.write(fd, json.dumps({'seccomp': True}).encode()); print('WROTE fd', fd)
    except OSError: pass
""",
}
