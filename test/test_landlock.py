"""Landlock: the session's root confines the whole session in the kernel to
the writable roots, so that a raw system call (no libc, no hook) and a
static binary cannot write outside them either."""
import ctypes
import os
import socket
import subprocess

import pytest

from conftest import BUILD

SHIM = os.path.join(BUILD, "libftsbx.so")

RAW = r"""
#include <fcntl.h>
#include <stdio.h>
/* openat(AT_FDCWD, argv[1], O_WRONLY|O_CREAT, 0644) by the syscall instruction itself */
int main(int argc, char **argv)
{
	long r;
	register long r10 __asm__("r10") = 0644;
	__asm__ volatile("syscall" : "=a"(r) : "0"(257L), "D"((long)AT_FDCWD), "S"(argv[1]),
			 "d"((long)(O_WRONLY | O_CREAT)), "r"(r10) : "rcx", "r11", "memory");
	printf("%ld\n", r);
	return 0;
}
"""


def landlock_available():
    """The kernel's Landlock ABI version (landlock_create_ruleset with
    LANDLOCK_CREATE_RULESET_VERSION), > 0 where Landlock is on."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(444, None, 0, 1) > 0


@pytest.fixture
def scratch_policy(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "system"
    ws.mkdir()
    outside.mkdir()
    pol = tmp_path / "policy.ini"
    pol.write_text(f"[paths]\nwritable = {ws}\n")
    raw = tmp_path / "raw"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(raw)], input=RAW.encode(), check=True)
    return ws, outside, pol, raw


def run(ws, pol, tmp_path, script):
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), FTSBX_POLICY=str(pol),
               HOME=str(tmp_path))
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    return subprocess.run(["bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_raw_system_call_cannot_write_outside_the_writable_roots(scratch_policy, tmp_path):
    ws, outside, pol, raw = scratch_policy
    r = run(ws, pol, tmp_path, f"{raw} {outside}/raw-file; {raw} {ws}/inside-file")
    out = r.stdout.split()
    assert out[0] == "-13", r.stdout + r.stderr        # -EACCES from the kernel
    assert int(out[1]) >= 0, r.stdout + r.stderr
    assert not (outside / "raw-file").exists()
    assert (ws / "inside-file").exists()


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_static_binary_cannot_write_outside_the_writable_roots(scratch_policy, tmp_path):
    ws, outside, pol, raw = scratch_policy
    busybox = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("no busybox")
    r = run(ws, pol, tmp_path, f"{busybox} touch {outside}/bb-file; {busybox} touch {ws}/bb-inside")
    assert not (outside / "bb-file").exists(), r.stderr
    assert (ws / "bb-inside").exists(), r.stderr
    assert "static binary" in r.stderr


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_static_binary_cannot_truncate_outside_the_writable_roots(scratch_policy, tmp_path):
    """Truncation by path is in the layer a static program gets for itself
    (the session's leaves it to the shim: opaque.c, landlock_roots)."""
    ws, outside, pol, _ = scratch_policy
    busybox = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("no busybox")
    if ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) < 3:
        pytest.skip("Landlock before ABI 3 has no truncation right")
    for d in (ws, outside):
        (d / "keep").write_text("twelve bytes")
    r = run(ws, pol, tmp_path, f"{busybox} truncate -s 0 {outside}/keep; echo $?; "
                               f"{busybox} truncate -s 3 {ws}/keep; echo $?")
    assert r.stdout.split() == ["1", "0"], r.stdout + r.stderr
    assert (outside / "keep").read_text() == "twelve bytes"
    assert (ws / "keep").read_text() == "twe"


TRUNCATE = r"""
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) { printf("%d\n", truncate(argv[1], 0)); return 0; }
"""

# truncate(argv[1], 0) as a 32-bit program (int 0x80), whose exit status is
# the error number (0: done)
TRUNCATE_I386 = """
.globl _start
_start:
  mov 8(%esp), %ebx
  mov $92, %eax
  xor %ecx, %ecx
  int $0x80
  mov %eax, %ebx
  neg %ebx
  mov $1, %eax
  int $0x80
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_programs_no_loader_preloads_into_get_a_layer_of_their_own(scratch_policy, tmp_path):
    """A static-pie program (no PT_INTERP, position-independent) and a
    32-bit one are programs the shim is not loaded into, as a static one
    is: each gets its warning and its own Landlock layer, which handles
    truncation (the session's leaves it to the shim). The loader run as a
    program is not one of them: it preloads the shim into what it runs."""
    ws, outside, pol, _ = scratch_policy
    if ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) < 3:
        pytest.skip("Landlock before ABI 3 has no truncation right")
    spie = tmp_path / "spie"
    if subprocess.run(["gcc", "-static-pie", "-O2", "-x", "c", "-", "-o", str(spie)], input=TRUNCATE.encode(),
                      capture_output=True).returncode:
        pytest.skip("no static-pie toolchain")
    for d in (ws, outside):
        (d / "keep").write_text("twelve bytes")
        (d / "keep32").write_text("twelve bytes")
    r = run(ws, pol, tmp_path, f"{spie} {outside}/keep; {spie} {ws}/keep")
    assert r.stdout.split() == ["-1", "0"], r.stdout + r.stderr
    assert (outside / "keep").read_text() == "twelve bytes" and (ws / "keep").read_text() == ""
    assert r.stderr.count("is a static binary") == 2, r.stderr
    r = run(ws, pol, tmp_path, "/lib64/ld-linux-x86-64.so.2 /bin/echo seen")
    assert r.stdout == "seen\n" and "warning" not in r.stderr, r.stderr
    i386 = tmp_path / "t32"
    asm = subprocess.run(["as", "--32", "-o", str(tmp_path / "t32.o"), "-"], input=TRUNCATE_I386.encode(),
                         capture_output=True)
    if asm.returncode or subprocess.run(["ld", "-m", "elf_i386", "-o", str(i386), str(tmp_path / "t32.o")],
                                        capture_output=True).returncode:
        pytest.skip("no 32-bit assembler or linker")
    if subprocess.run([str(i386), str(tmp_path / "no-such-file")], capture_output=True).returncode != 2:
        pytest.skip("this kernel runs no 32-bit programs")
    r = run(ws, pol, tmp_path, f"{i386} {outside}/keep32; echo $?; {i386} {ws}/keep32; echo $?")
    assert r.stdout.split() == ["13", "0"], r.stdout + r.stderr      # EACCES from the kernel
    assert (outside / "keep32").read_text() == "twelve bytes" and (ws / "keep32").read_text() == ""
    assert r.stderr.count("another architecture") == 2, r.stderr


MUSL_WRITE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 3;
	}
	return write(fd, "musl\n", 5) == 5 ? 0 : 4;
}
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_program_of_another_c_library_runs_confined_without_the_shim(scratch_policy, tmp_path):
    """A program whose loader is musl's cannot load the shim (glibc's
    symbols are not there: it would not start at all). It runs as a
    program the shim cannot see into: without LD_PRELOAD, with the
    warning and a Landlock layer of its own, in enforce mode and in
    audit mode alike; refused where [programs] static = refuse."""
    ws, outside, pol, _ = scratch_policy
    prog = tmp_path / "muslw"
    if subprocess.run(["musl-gcc", "-O2", "-x", "c", "-", "-o", str(prog)], input=MUSL_WRITE.encode(),
                      capture_output=True).returncode:
        pytest.skip("no musl-gcc (Debian's musl-tools)")
    r = run(ws, pol, tmp_path, f"{prog} {ws}/made; echo $?; {prog} {outside}/made; echo $?")
    assert r.stdout.split() == ["0", "3"], r.stdout + r.stderr
    assert (ws / "made").read_text() == "musl\n" and not (outside / "made").exists()
    assert "Permission denied" in r.stderr and "Error relocating" not in r.stderr, r.stderr
    assert r.stderr.count("another C library") == 2, r.stderr
    # a glibc program whose loader has another name (Homebrew's lib/ld.so) is seen into
    ldso = tmp_path / "hb" / "lib" / "ld.so"
    ldso.parent.mkdir(parents=True)
    ldso.symlink_to("/lib64/ld-linux-x86-64.so.2")
    hb = tmp_path / "hbw"
    subprocess.run(["gcc", "-O2", f"-Wl,--dynamic-linker={ldso}", "-x", "c", "-", "-o", str(hb)],
                   input=MUSL_WRITE.encode(), check=True)
    r = run(ws, pol, tmp_path, f"{hb} {ws}/hb; echo $?; {hb} {outside}/hb; echo $?")
    assert r.stdout.split() == ["0", "3"] and "warning" not in r.stderr, r.stdout + r.stderr
    assert "ftsbx: refused" in r.stderr, r.stderr
    # env -i does not bring the shim back into it, and a glibc program it is
    # not the parent of still gets the shim
    r = run(ws, pol, tmp_path, f"env -i {prog} {ws}/again; echo $?; env -i sh -c 'echo $LD_PRELOAD'")
    assert r.stdout.split() == ["0", SHIM], r.stdout + r.stderr
    audit = tmp_path / "audit.ini"
    audit.write_text(f"[policy]\nmode = audit\n[paths]\nwritable = {ws}\n")
    r = run(ws, audit, tmp_path, f"{prog} {ws}/audited; echo $?")
    assert r.stdout.split() == ["0"] and (ws / "audited").exists(), r.stdout + r.stderr
    refuse = tmp_path / "refuse.ini"
    refuse.write_text(f"[paths]\nwritable = {ws}\n[programs]\nstatic = refuse\n")
    r = run(ws, refuse, tmp_path, f"{prog} {ws}/refused; echo $?")
    assert r.stdout.split() == ["126"] and not (ws / "refused").exists(), r.stdout + r.stderr
    assert "[programs] static" in r.stderr, r.stderr


URING = r"""
#include <stdio.h>
#include <string.h>
/* io_uring_setup(8, params) by the syscall instruction itself */
int main(void)
{
	static char params[120];
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "0"(425L), "D"(8L), "S"(params) : "rcx", "r11", "memory");
	printf("%ld\n", r);
	return 0;
}
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_io_uring_is_refused_even_by_a_raw_system_call(scratch_policy, tmp_path):
    """io_uring changes files where no hook sees it: in a confined session
    seccomp answers ENOSYS (-38) as a kernel without it would, so programs
    fall back to plain calls; outside the shim the same program gets a ring."""
    ws, outside, pol, _ = scratch_policy
    prog = tmp_path / "uring"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(prog)], input=URING.encode(), check=True)
    plain = subprocess.run([str(prog)], capture_output=True, text=True, check=True)
    if int(plain.stdout) < 0:
        pytest.skip(f"this kernel refuses io_uring itself ({plain.stdout.strip()})")
    r = run(ws, pol, tmp_path, str(prog))
    assert r.stdout.split() == ["-38"], r.stdout + r.stderr


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_root_started_by_ftsbx_run_confines_with_the_policy_ftsbx_compiled(scratch_policy, tmp_path):
    """ftsbx run compiles the policy while the root's program loads and
    leaves it in the session for the root (FTSBX_ROOT=PID+, no policy-PID
    file): the root maps it and still confines the session in the kernel,
    with that policy's writable roots, seccomp's refusal of io_uring
    included."""
    ws, outside, pol, raw = scratch_policy
    prog = tmp_path / "uring"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(prog)], input=URING.encode(), check=True)
    env = dict(os.environ, HOME=str(tmp_path))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL", "FTSBX_POLICY"):
        env.pop(k, None)
    j = tmp_path / "j"
    r = subprocess.run([os.path.join(BUILD, "ftsbx"), "run", "--policy", str(pol), "--journal", str(j), "--",
                        "bash", "-c", f"echo $FTSBX_ROOT; {raw} {outside}/raw-file; {raw} {ws}/inside-file; "
                        f"{prog}"], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    out = r.stdout.split()
    assert out[0].endswith("+"), r.stdout + r.stderr
    assert out[1] == "-13", r.stdout + r.stderr        # -EACCES from the kernel
    assert int(out[2]) >= 0, r.stdout + r.stderr
    plain = subprocess.run([str(prog)], capture_output=True, text=True, check=True)
    if int(plain.stdout) >= 0:
        assert out[3] == "-38", r.stdout + r.stderr
    assert not (outside / "raw-file").exists()
    assert (ws / "inside-file").exists()
    assert not [p for p in os.listdir(j) if p.startswith("policy-")]


NO_URING_LAUNCHER = r"""
#include <errno.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
/* A container's seccomp profile: io_uring_setup refused with EPERM; then ARGV. */
int main(int argc, char **argv)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = 4, .filter = f };
	(void)argc;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0))
		return 125;
	execvp(argv[1], argv + 1);
	return 127;
}
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_the_session_filter_is_added_where_io_uring_is_refused_already(scratch_policy, tmp_path):
    """Where io_uring is out of reach already (here a container-like profile
    refusing it with EPERM), the session still adds its filter, which also
    refuses the calls that act on the whole machine; io_uring stays out."""
    ws, _, pol, _ = scratch_policy
    prog = tmp_path / "uring"
    launcher = tmp_path / "no-uring"
    subprocess.run(["gcc", "-O2", "-x", "c", "-", "-o", str(prog)], input=URING.encode(), check=True)
    # static: the shim does not load into it, the session starts at its exec of bash
    subprocess.run(["gcc", "-O2", "-static", "-x", "c", "-", "-o", str(launcher)],
                   input=NO_URING_LAUNCHER.encode(), check=True)
    script = f"grep Seccomp_filters /proc/self/status; {prog}"
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), FTSBX_POLICY=str(pol),
               HOME=str(tmp_path))
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    r = subprocess.run([str(launcher), "bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=60)
    out = r.stdout.split()
    assert out[:2] == ["Seccomp_filters:", "2"] and int(out[2]) in (-1, -38), r.stdout + r.stderr
    r = run(ws, pol, tmp_path, script)
    assert r.stdout.split() == ["Seccomp_filters:", "1", "-38"], r.stdout + r.stderr


MACHINE = r"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
for name, call in (("sethostname", lambda: libc.sethostname(b"ftsbx-evil", 10)),
                   ("swapoff", lambda: libc.swapoff(b"/nonexistent-swap")),
                   ("settimeofday", lambda: libc.syscall(164, None, None)),
                   ("delete_module", lambda: libc.syscall(176, b"ftsbx_no_such_module", 0))):
    r = call()
    print(name, r, ctypes.get_errno())
print("hostname", socket.gethostname())
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_calls_on_the_whole_machine_are_refused_even_to_static_programs(scratch_policy, tmp_path):
    """reboot, kexec, modules, swap, the clock and the host name: no journal
    undoes them, so the session's seccomp filter refuses them with EPERM,
    to a root program's ctypes call and to static busybox alike. Run in a
    UTS and PID namespace of its own: a miss changes a throwaway host name."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "--uts", "--pid", "--fork", "true"]).returncode:
        pytest.skip("needs root and unshare")
    ws, _, pol, _ = scratch_policy
    script = (f"python3 -c '{MACHINE}'; busybox hostname ftsbx-evil2; echo busybox $?; "
              "python3 -c 'import socket; print(\"after\", socket.gethostname())'")
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), FTSBX_POLICY=str(pol),
               HOME=str(tmp_path))
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    r = subprocess.run(["unshare", "--uts", "--pid", "--fork", "bash", "-c", script], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=60)
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines())
    for name in ("sethostname", "swapoff", "settimeofday", "delete_module"):
        assert lines[name].split() == ["-1", "1"], r.stdout + r.stderr        # EPERM
    assert lines["busybox"] != "0", r.stdout + r.stderr
    assert lines["hostname"] == lines["after"] == socket.gethostname(), r.stdout + r.stderr


def landlock_abi():
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_static_binary_makes_no_device_node_and_writes_only_harmless_devices(scratch_policy, tmp_path):
    """Device nodes are made nowhere (not even in a writable root: a c 1 1
    node there would be /dev/mem): the session's seccomp filter refuses
    them (EPERM, so that Landlock's rules can grant all the rights it
    handles: a rename's walk then ends at the first ruled directory). And
    Landlock lets a static program open for writing only the devices the
    shim allows (/dev/null, terminals ...): static busybox's `> /dev/kmsg`
    (opened, never written) is refused."""
    ws, _, pol, _ = scratch_policy
    busybox = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("no busybox")
    # a virtual console (the machine's screen, not the session's terminal)
    # only where there is one: opened, never written, had the rule let it be
    vt = "; true > /dev/tty1; echo vt=$?" if os.path.exists("/dev/tty1") else ""
    r = run(ws, pol, tmp_path, f"{busybox} mknod mem c 1 1; echo mknod=$?; {busybox} mknod loop b 7 0; echo blk=$?; "
                               f"{busybox} mkfifo fifo; echo fifo=$?; "
                               f"{busybox} sh -c 'true > /dev/null; echo null=$?; true > /dev/kmsg; echo kmsg=$?{vt}'")
    assert r.stdout.split() == ["mknod=1", "blk=1", "fifo=0", "null=0", "kmsg=1"] + (["vt=1"] if vt else []), \
        r.stdout + r.stderr
    assert r.stderr.count("Operation not permitted") == 2, r.stderr
    assert sorted(os.listdir(ws)) == ["fifo"], r.stderr


@pytest.mark.skipif(landlock_abi() < 6, reason="the kernel's Landlock has no signal scoping (ABI 6)")
def test_a_static_kill_reaches_the_session_but_nothing_outside_it(scratch_policy, tmp_path):
    """With signals = session, the root's Landlock domain keeps signals in
    the session: static busybox kill (no hook sees it) of a process outside
    (a scratch sleep this test started) fails with EPERM and the process
    lives; of the session's own sleep it works."""
    ws, _, pol, _ = scratch_policy
    busybox = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("no busybox")
    pol.write_text(pol.read_text() + "[policy]\nsignals = session\n")
    outside = subprocess.Popen(["sleep", "60"])
    try:
        r = run(ws, pol, tmp_path, f"{busybox} kill -TERM {outside.pid}; echo outside=$?; "
                                   f"sleep 60 & {busybox} kill -TERM $!; echo own=$?; wait $!; echo waited=$?")
        assert r.stdout.split() == ["outside=1", "own=0", "waited=143"], r.stdout + r.stderr
        assert outside.poll() is None, "the process outside the session was signalled"
    finally:
        outside.kill()
        outside.wait()


HANDLE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]
h, mnt = Handle(128), ctypes.c_int()
got = libc.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(h), ctypes.byref(mnt), 0)
print("name_to_handle_at", got)
if got == 0:
    fd = libc.open_by_handle_at(os.open(os.path.dirname(sys.argv[1]), os.O_RDONLY), ctypes.byref(h), os.O_RDONLY)
    print("open_by_handle_at", fd, ctypes.get_errno(), os.read(fd, 64) if fd >= 0 else b"")
print("acct", libc.acct(None), ctypes.get_errno())
print("bpf", libc.syscall(321, 0x7fff, None, 0), ctypes.get_errno())
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_no_file_is_opened_by_its_handle_and_no_bpf_or_accounting(scratch_policy, tmp_path):
    """open_by_handle_at opens a file where no path is looked up (no hidden
    or writable-roots rule, no Landlock rule asks): the session's filter
    refuses it with EPERM, and bpf and acct, which act on the whole machine.
    The secret outside the roots stays unread."""
    if os.geteuid() != 0:
        pytest.skip("open_by_handle_at needs CAP_DAC_READ_SEARCH")
    ws, outside, pol, _ = scratch_policy
    (outside / "secret").write_text("the secret\n")
    (ws / "handle.py").write_text(HANDLE)
    r = run(ws, pol, tmp_path, f"python3 handle.py {outside}/secret")
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines())
    if lines.get("name_to_handle_at") != "0":
        pytest.skip("this filesystem gives no file handles")
    assert lines["open_by_handle_at"].split()[:2] == ["-1", "1"], r.stdout + r.stderr     # EPERM
    assert lines["acct"].split() == ["-1", "1"], r.stdout + r.stderr
    assert lines["bpf"].split() == ["-1", "1"], r.stdout + r.stderr
    assert "the secret" not in r.stdout


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_roots_a_new_home_does_not_have_yet_can_be_made(scratch_policy, tmp_path):
    """A new HOME has no ~/.npm and no ~/.local yet: a cache root and a
    user-install root under them are made at their first use (mkdir -p makes
    the ~/.local on the way, not journaled), while the rest of HOME stays
    closed (the new root may not be renamed away), to the shim's hooks and, in its own Landlock domain, to a static
    program, which may write a root made before its exec. A rewind removes
    what the journaled root got and leaves the cache."""
    ws, _, pol, _ = scratch_policy
    home = tmp_path / "home"
    home.mkdir()
    pol.write_text(f"[paths]\nwritable = {ws}\nwritable = ~/.local/lib\nuntracked = ~/.npm\n")
    busybox = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"
    script = ("mkdir -p ~/.npm/_cacache && echo c > ~/.npm/_cacache/entry; echo npm=$?; "
              "mkdir -p ~/.local/lib/py && echo m > ~/.local/lib/py/mod.py; echo lib=$?; "
              "mkdir ~/.local/other; echo other=$?; echo x > ~/.bashrc; echo rc=$?; mv ~/.npm ~/.npm2; echo mv=$?; "
              f"{busybox} sh -c 'echo b > ~/.npm/bb; echo bbnpm=$?; echo x > ~/.profile; echo bbrc=$?; "
              "mkdir ~/.elsewhere; echo bbdir=$?'")
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=str(tmp_path / "j"), FTSBX_POLICY=str(pol),
               HOME=str(home))
    for k in ("FTSBX_TXN", "FTSBX_ROOT"):
        env.pop(k, None)
    r = subprocess.run(["bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["npm=0", "lib=0", "other=1", "rc=1", "mv=1", "bbnpm=0", "bbrc=1", "bbdir=1"], \
        r.stdout + r.stderr

    def listing():
        return sorted(os.path.relpath(os.path.join(d, n), home)
                      for d, ds, fs in os.walk(home) for n in ds + fs)
    assert listing() == [".local", ".local/lib", ".local/lib/py", ".local/lib/py/mod.py", ".npm",
                         ".npm/_cacache", ".npm/_cacache/entry", ".npm/bb"]
    subprocess.run([os.path.join(BUILD, "txreplay"), "rewind", str(tmp_path / "j")], check=True,
                   capture_output=True)
    assert listing() == [".local", ".npm", ".npm/_cacache", ".npm/_cacache/entry", ".npm/bb"]


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_a_static_program_started_by_ftsbx_run_itself_is_confined(scratch_policy, tmp_path):
    """No shim loads into a static program: ftsbx run starts one that is the
    command itself through env, which the shim is in, so that it is judged,
    warned about and confined as one a tool call starts (before, busybox
    as the command ran with no policy and no Landlock at all)."""
    ws, outside, pol, _ = scratch_policy
    env = dict(os.environ, HOME=str(tmp_path))
    for k in ("LD_PRELOAD", "FTSBX_TXN", "FTSBX_ROOT", "FTSBX_JOURNAL", "FTSBX_POLICY"):
        env.pop(k, None)

    def ftsbx_run(policy, *argv):
        return subprocess.run([os.path.join(BUILD, "ftsbx"), "run", "--policy", str(policy), "--journal",
                               str(tmp_path / "j"), "--", *argv], cwd=ws, env=env, capture_output=True, text=True,
                              timeout=60)
    r = ftsbx_run(pol, "busybox", "touch", str(outside / "x"))
    assert r.returncode != 0 and "static binary" in r.stderr, r.stderr
    assert not (outside / "x").exists()
    r = ftsbx_run(pol, "busybox", "touch", "inside")
    assert r.returncode == 0, r.stderr
    assert (ws / "inside").exists()
    script = ws / "s.sh"                       # a script whose interpreter is static
    script.write_text(f"#!/usr/bin/busybox sh\ntouch {outside}/y\n")
    script.chmod(0o755)
    r = ftsbx_run(pol, "./s.sh")
    assert r.returncode != 0 and not (outside / "y").exists(), r.stderr
    ruled = tmp_path / "ruled.ini"             # a rule on the applet holds, as in a tool call
    ruled.write_text(pol.read_text() + "[commands]\nno-touch = touch\n")
    r = ftsbx_run(ruled, "busybox", "touch", "inside2")
    assert r.returncode == 126 and "no-touch" in r.stderr, r.stderr
    assert not (ws / "inside2").exists()


TIOCSTI = r"""
#include <errno.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
/* TIOCSTI on standard input (a pipe here: ENOTTY where nothing refuses
 * it), through libc and by a system call; TIOCGWINSZ as a control */
int main(void)
{
	char c = 'x';
	struct winsize w;
	int a = ioctl(0, TIOCSTI, &c) < 0 ? errno : 0;
	int b = syscall(SYS_ioctl, 0, TIOCSTI, &c) < 0 ? errno : 0;
	int g = ioctl(0, TIOCGWINSZ, &w) < 0 ? errno : 0;
	printf("%d %d %d\n", a, b, g);
	return 0;
}
"""


@pytest.mark.skipif(not landlock_available(), reason="the kernel has no Landlock")
def test_no_program_types_into_a_terminal(scratch_policy, tmp_path):
    """ioctl(TIOCSTI) pushes characters into a terminal's input: into the
    shell the agent was started from, which would run them once the
    session is over, outside the policy and the journal. The session's
    seccomp filter refuses it with EPERM, to static programs too; other
    ioctls pass."""
    ws, _, pol, _ = scratch_policy
    for static in ([], ["-static"]):
        prog = tmp_path / f"sti{len(static)}"
        subprocess.run(["gcc", "-O2", *static, "-x", "c", "-", "-o", str(prog)], input=TIOCSTI.encode(),
                       check=True)
        plain = subprocess.run([str(prog)], input="", capture_output=True, text=True, check=True)
        assert plain.stdout.split() == ["25", "25", "25"], plain.stdout   # ENOTTY: a pipe is no terminal
        r = run(ws, pol, tmp_path, f"true | {prog}")
        assert r.stdout.split() == ["1", "1", "25"], r.stdout + r.stderr  # EPERM, EPERM, ENOTTY
