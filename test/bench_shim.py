#!/usr/bin/python3
"""bench_shim.py - the shim's figures for `make bench`: every figure is a
ratio of the same work with and without LD_PRELOAD=libftsbx.so, measured in
alternating rounds in one run (these machines are small and noisy), the
median kept. Prints figures; never fails on a slow machine.

Usage: bench_shim.py BUILD_DIR
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
SHIM = os.path.join(BUILD, "libftsbx.so")
CALLS = os.path.join(BUILD, "test", "benchcalls")
TXREPLAY = os.path.join(BUILD, "txreplay")
ROUNDS = int(os.environ.get("FTSBX_BENCH_ROUNDS", "7"))
MICRO_ROUNDS = 5 * ROUNDS       # shorter rounds, more of them: see micro_row


def shim_env(journal):
    env = dict(os.environ, LD_PRELOAD=SHIM, FTSBX_JOURNAL=journal)
    env.pop("FTSBX_TXN", None)
    return env


def run(argv, env=None, cwd=None):
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - t0


def row(name, plain, shim, unit, extra=""):
    print(f"{name:<44} {shim:>10.2f} {unit:<6} native {plain:>10.2f} {unit:<6} ratio {shim / plain:5.2f}{extra}")


def micro_row(name, plain, shim, unit, k, extra=""):
    """A row's figures (its rounds' times divided by K): the medians, and
    the ratio of the fastest rounds too. On these machines noise only ever
    adds time (another tenant, an interrupt, a page written back), so the
    best of many alternating rounds is the steadiest estimate of what the
    work itself costs; the medians move by 0.1 from run to run."""
    best = min(shim) / min(plain)
    row(name, statistics.median(plain) / k, statistics.median(shim) / k, unit,
        f"  (best rounds {best:4.2f}){extra}")


def alternate(op, n, target, env_of):
    """OP N times per round, natively and under the shim (ENV_OF(round)),
    in MICRO_ROUNDS alternating rounds: the two lists of ns per call."""
    plain, shim = [], []
    for r in range(MICRO_ROUNDS):
        out = subprocess.run([CALLS, op, str(n), target], stdout=subprocess.PIPE, check=True)
        plain.append(float(out.stdout))
        out = subprocess.run([CALLS, op, str(n), target], stdout=subprocess.PIPE, check=True, env=env_of(r))
        shim.append(float(out.stdout))
    return plain, shim


def micro(tmp):
    target = os.path.join(tmp, "file")
    with open(target, "wb") as f:
        f.write(b"x" * 8192)
    for op, n, label in (("open", 40000, "read-only open+close"), ("stat", 40000, "stat"),
                         ("read", 40000, "pread 4 KiB"), ("spawn", 60, "exec of /bin/true (posix_spawn+wait)")):
        plain, shim = alternate(op, n, target, lambda r: shim_env(os.path.join(tmp, f"j-{op}-{r}")))
        unit = "us" if op == "spawn" else "ns"
        micro_row(label, plain, shim, unit, 1000.0 if op == "spawn" else 1.0)
    confinement(tmp, target)


def confinement(tmp, target):
    """The same read-only open+close and pread under the default policy with
    landlock = off, which also leaves out the seccomp filter that refuses
    io_uring: what the shim itself costs, apart from the kernel confinement
    of the session (Landlock's check on every path lookup, seccomp's on
    every system call), which a program pays alike with or without hooks."""
    policy = os.path.join(tmp, "no-landlock.ini")
    with open(policy, "w") as f:
        f.write("[policy]\nbase = default\nlandlock = off\n")
    for op, n, label in (("open", 40000, "read-only open+close, landlock = off"),
                         ("read", 40000, "pread 4 KiB, landlock = off")):
        plain, shim = alternate(op, n, target, lambda r: dict(shim_env(os.path.join(tmp, f"j-nl-{op}-{r}")),
                                                             FTSBX_POLICY=policy))
        micro_row(label, plain, shim, "ns", 1.0)


def make_tree(root, nfiles):
    os.makedirs(root)
    per = 100
    for d in range(nfiles // per):
        sub = os.path.join(root, f"d{d:03d}")
        os.mkdir(sub)
        for i in range(per):
            with open(os.path.join(sub, f"f{i:03d}.c"), "w") as f:
                # about 3.5 KB, the size of a typical source file
                f.write(f"/* file {d}/{i} */\n")
                for k in range(60):
                    f.write(f"int f{d}_{i}_{k}(int x) {{ return x * {k} + {i}; }}\n")


def bytes_under(path, skip=()):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            if not name.endswith(skip):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def rm_rf(tmp):
    """rm -rf natively, under the shim, and under the shim with landlock =
    off (which also leaves out the seccomp filter): each removal a rename
    into the journal's objects/ where Landlock checks the move of the file
    from one directory to another (its refer right), which a plain unlink
    never asks. Which goes first turns with the rounds."""
    plain, shim, nolandlock, rewind, cpa = [], [], [], [], []
    policy = os.path.join(tmp, "no-landlock-rm.ini")
    with open(policy, "w") as f:
        f.write("[policy]\nbase = default\nlandlock = off\n")
    for r in range(max(5, ROUNDS - 2)):
        a, b, n = (os.path.join(tmp, f"rm-{x}{r}") for x in "abn")
        for t in (a, b, n):
            make_tree(t, 10000)
        j, jn = os.path.join(tmp, f"j-rm{r}"), os.path.join(tmp, f"j-rmn{r}")
        for k in ((0, 1, 2), (1, 2, 0), (2, 0, 1))[r % 3]:
            if k == 1:
                shim.append(run(["rm", "-rf", b], env=shim_env(j)))
            elif k == 2:
                nolandlock.append(run(["rm", "-rf", n], env=dict(shim_env(jn), FTSBX_POLICY=policy)))
            else:
                plain.append(run(["rm", "-rf", a]))
        rewind.append(run([TXREPLAY, "rewind", j]))
        c = os.path.join(tmp, f"rm-c{r}")
        cpa.append(run(["cp", "-a", b, c]))
        for t in (b, c, j, jn):
            shutil.rmtree(t)
    micro_row("rm -rf of a 10,000-file tree", plain, shim, "ms", 1e-3)
    micro_row("rm -rf of it, landlock = off", plain, nolandlock, "ms", 1e-3)
    micro_row("rewind of it (against cp -a of the tree)", cpa, rewind, "ms", 1e-3)


def main():
    tmp = tempfile.mkdtemp(prefix="ftsbx-bench-")
    try:
        print(f"ftsbx shim bench: medians of alternating rounds ({ROUNDS}; {MICRO_ROUNDS} shorter ones for the "
              "calls); ratio = with shim / native")
        micro(tmp)
        run_true()
        rm_rf(tmp)
        sed_i(tmp)
        make_build(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
