"""A workspace on another filesystem than the journal (a container's
volume, a tmpfs; the journal in ~/.local/state): the pre-image of a file
replaced or removed is a copy there, not a hard link into the journal, and
its rewind brings it back as a new inode. Each workload runs in a mount
namespace of its own, with a tmpfs at the workspace (tmpfs never reuses an
inode number, which on ext4 could hide a wrong inode check), then is
rewound, and the tree compared in full."""
import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, TXREPLAY

SHIM = os.path.join(BUILD, "libftsbx.so")
HERE = os.path.dirname(os.path.abspath(__file__))

# Runs inside `unshare -m`: mount a tmpfs at WS, build the tree, run the
# workload under the shim with the journal at J (on the test's own
# filesystem), rewind, and print the differences (a JSON list of lines).
INSIDE = r"""
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from conftest import diff_snapshots, populate, snapshot
ws, j, shim, txreplay, script, crash = sys.argv[2:8]
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", ws], check=True)
populate(os.fsencode(ws))
subprocess.run(["sh", "-c", "echo hello > f; echo hi > top; ln top top2; mkdir -p d/e; ln top d/e/far; "
                "touch -d 2001-01-01 f top . d d/e"], cwd=ws, check=True)
before = snapshot(os.fsencode(ws))
env = dict(os.environ, LD_PRELOAD=shim, FTSBX_JOURNAL=j, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b",
           GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b")
for k in ("FTSBX_TXN", "FTSBX_ROOT"):
    env.pop(k, None)
run = subprocess.run(["bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True, errors="replace",
                     timeout=120)
killed = None
if int(crash):           # a rewind killed after its CRASH-th undo, then run again
    killed = subprocess.run([txreplay, "rewind", j], capture_output=True, timeout=120,
                            env=dict(os.environ, FTSBX_REWIND_CRASH_AFTER=crash)).returncode
rew = subprocess.run([txreplay, "rewind", j], capture_output=True, text=True, errors="replace", timeout=120)
print(json.dumps({"killed": killed, "run": run.returncode, "err": run.stderr[-2000:], "rewind": rew.returncode,
                  "rewind_err": rew.stderr[-2000:], "diff": diff_snapshots(before, snapshot(os.fsencode(ws)))}))
"""

WORKLOADS = {
    "sed-twice": "sed -i s/hello/a/ f && sed -i s/a/b/ f && sed -i s/b/c/ f",
    "replace-loop": "python3 -c \"import os\nfor i in range(5):\n"
                    "    open('t', 'w').write(str(i)); os.replace('t', 'f')\"",
    "git": "git init -q g && cd g && echo a > a && git add a && git commit -qm one && echo b >> a && "
           "git commit -qam two && git gc -q",
    "mv-over": "cp f f2 && mv f2 f && mv top f && ln -f top2 f",
    "hardlink-rm": "rm top && rm d/e/far",
    "hardlink-mv-away": "mkdir -p /tmp/ftsbx-crossfs-$$ && mv top /tmp/ftsbx-crossfs-$$/ && "
                        "rm -rf /tmp/ftsbx-crossfs-$$",
    "rm-rf": "rm -rf ./*",
}


def unshare_mount_works():
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def run_inside(tmp_path, name, crash=0):
    ws = tmp_path / "ws"
    ws.mkdir()
    return subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", INSIDE, HERE, str(ws),
                           str(tmp_path / "j"), SHIM, TXREPLAY, WORKLOADS[name], str(crash)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not unshare_mount_works(), reason="no mount namespace with a tmpfs here (not root)")
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_workspace_on_another_filesystem_rewinds_exactly(tmp_path, name):
    r = run_inside(tmp_path, name)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["run"] == 0, out["err"]
    assert out["rewind"] == 0 and not out["diff"], "\n".join(out["diff"]) + out["rewind_err"]


@pytest.mark.skipif(not unshare_mount_works(), reason="no mount namespace with a tmpfs here (not root)")
@pytest.mark.parametrize("crash", [1, 2, 3])
@pytest.mark.parametrize("name", ["sed-twice", "hardlink-rm", "mv-over"])
def test_a_rewind_killed_midway_finishes_exactly_when_run_again(tmp_path, name, crash):
    """The new inodes an interrupted rewind brought back are found again
    from its marks by the next run."""
    r = run_inside(tmp_path, name, crash)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["run"] == 0, out["err"]
    assert out["killed"] == -9, out
    assert out["rewind"] == 0 and not out["diff"], "\n".join(out["diff"]) + out["rewind_err"]
