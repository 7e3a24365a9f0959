#!/usr/bin/python3
"""hot_text.py - regenerate the list of functions shim/layout.ld keeps
together at the start of the shim's text.

On these machines every page a new process first touches costs it several
microseconds (a hypervisor that shadows page tables fills its entry at the
first touch, mapped or not), so what a short program under the shim pays is
mostly the number of the shim's pages it touches. The functions that run in
the processes of an ordinary session (start, read-only opens, a fork
child's exec, the records of a change, exit) are measured here: a small
shell session of coreutils, git, python, sed -i, rm, mv and a pipeline runs
under the shim and valgrind's callgrind, one profile per process; every
function of libftsbx.so that ran is listed, those run by more processes
first. The list replaces the one between the markers of shim/layout.ld.

A stale list costs speed, never correctness: a name the library no longer
has matches nothing (test_shim_layout.py says which), a new function not in
it is placed with the rest of the text.

Usage: test/hot_text.py BUILD_DIR        (then rebuild; needs valgrind)
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
LAYOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim", "layout.ld")
WORK = ("head -3 h.txt | wc -l; ls >/dev/null; cat h.txt | grep -c hello; echo x > o.txt; cat h.txt >> o.txt; "
        "sed -i s/a/c/ s.txt; mkdir d; touch d/f; rm -rf d; mv o.txt p.txt; cp p.txt q.txt; "
        "git init -q g && git -C g status --short; "
        "/usr/bin/python3 -c \"import subprocess; open('r.txt', 'w').write('x'); subprocess.run(['true'])\"; "
        "for f in h.txt s.txt; do test -f $f && head -1 $f >/dev/null; done; true")
# libsodium's hashing of the records: their archive members, whole
SODIUM = {"blake2b_compress_ref": "libsodium_la-blake2b-compress-ref.o",
          "crypto_generichash_blake2b__init_param": "libsodium_la-blake2b-ref.o",
          "crypto_generichash_blake2b__init": "libsodium_la-blake2b-ref.o",
          "crypto_generichash_blake2b__update": "libsodium_la-blake2b-ref.o",
          "crypto_generichash_blake2b__final": "libsodium_la-blake2b-ref.o",
          "crypto_generichash_blake2b_init": "libsodium_la-generichash_blake2b.o",
          "crypto_generichash_blake2b_update": "libsodium_la-generichash_blake2b.o",
          "crypto_generichash_blake2b_final": "libsodium_la-generichash_blake2b.o",
          "sodium_memzero": "libsodium_la-utils.o"}


def profile(tmp):
    ws = os.path.join(tmp, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "h.txt"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(ws, "s.txt"), "w") as f:
        f.write("a\nb\n")
    out = os.path.join(tmp, "cg")
    os.makedirs(out)
    env = dict(os.environ, LD_PRELOAD=os.path.join(BUILD, "libftsbx.so"), FTSBX_JOURNAL=os.path.join(tmp, "j"),
               HOME=tmp)
    env.pop("FTSBX_TXN", None)
    # a profile per process, and one of what a process ran before each
    # exec (a fork child's judgement of it), which the exec'd program's
    # profile of the same pid would otherwise replace
    subprocess.run(["valgrind", "-q", "--tool=callgrind", "--trace-children=yes", "--dump-before=execve",
                    f"--callgrind-out-file={out}/cg.%p", "bash", "-c", WORK], cwd=ws, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    nm = subprocess.run(["nm", "--defined-only", os.path.join(BUILD, "libftsbx.so")], capture_output=True,
                        text=True, check=True).stdout
    ours = {f[2] for f in (line.split() for line in nm.splitlines()) if len(f) == 3 and f[1] in "tTwW"}
    # (processes that ran it to their end, parts before an exec that ran it)
    users = collections.defaultdict(lambda: [0, 0])
    for name in os.listdir(out):
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", os.path.join(out, name)],
                             capture_output=True, text=True).stdout
        seen = set(re.findall(r":([A-Za-z_][A-Za-z0-9_.]*) \[(?:[^]]*libftsbx\.so|\?\?\?)\]", ann))
        for f in seen & ours:
            users[f][name.count(".") > 1] += 1
    return users


def main():
    with tempfile.TemporaryDirectory(prefix="ftsbx-hot-") as tmp:
        users = profile(tmp)
    if not users:
        sys.exit("hot_text.py: no profile (is valgrind installed?)")
    lines, members = [], set()
    # what a program runs first (the most programs first), then what fork
    # children run before their exec
    for name, _ in sorted(users.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0])):
        if name in SODIUM:
            if SODIUM[name] not in members:
                members.add(SODIUM[name])
                lines.append(f"\t\t*libsodium.a:{SODIUM[name]}(.text .text.*)")
        elif not name.startswith(("crypto_", "sodium_", "blake2b")):
            lines.append(f"\t\t*(.text.{name} .text.hot.{name} .text.unlikely.{name} .text.exit.{name})")
    text = open(LAYOUT).read()
    begin, end = "/* hot_text.py: begin */\n", "\t\t/* hot_text.py: end */\n"
    a, b = text.index(begin) + len(begin), text.index(end)
    open(LAYOUT, "w").write(text[:a] + "\n".join(lines) + "\n" + text[b:])
    print(f"hot_text.py: {len(lines)} entries in {LAYOUT}")


if __name__ == "__main__":
    main()
