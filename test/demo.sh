#!/bin/sh
# demo.sh - `make demo`: an unmodified agent session wrapped by ftsbx.
# A scripted agent loop (test/demo_agent.py, plain Python that knows nothing
# of ftsbx) runs its tool calls under LD_PRELOAD=libftsbx.so: edits, a
# destructive mistake, a command that is refused, a call that fails and is
# rewound automatically. Then the forensic timeline, a verify, an undo of the
# mistake alone, and a rewind of the whole session back to the start, checked
# against a full listing of the tree taken before.
set -eu
B=$(cd "${1:-build}" && pwd)
D=$(cd "$(dirname "$0")" && pwd)
T=$B/txreplay
W=$(mktemp -d /tmp/ftsbx-demo-XXXXXX)
trap 'rm -rf "$W"' EXIT
J=$W/journal
ws=$W/workspace
mkdir -p "$ws/src" "$ws/tests" "$W/home"
printf 'def add(a, b):\n    return a + b\n' > "$ws/src/calc.py"
printf 'import sys\nsys.path.insert(0, "src")\nfrom calc import add\nassert add(2, 2) == 4\nprint("tests pass")\n' \
	> "$ws/tests/test_calc.py"
printf '# demo project\n' > "$ws/README.md"
listing() { (cd "$ws" && find . -printf '%y %m %s %T@ %p\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(listing)

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say "the agent runs, wrapped: LD_PRELOAD=libftsbx.so FTSBX_ON_FAILURE=rewind python3 demo_agent.py"
(cd "$ws" && HOME=$W/home LD_PRELOAD=$B/libftsbx.so FTSBX_JOURNAL=$J FTSBX_ON_FAILURE=rewind \
	/usr/bin/python3 "$D/demo_agent.py")
say "the transactions: one per tool call (txreplay list)"
$T list "$J"
say "the forensic timeline, changes and refusals (txreplay log)"
$T log "$J" | awk '$7 !~ /^(segment|exec|session|rewound|undoing)$/'
say "the programs the tool calls ran (txreplay log, exec records)"
$T log "$J" | awk '$7 == "exec"' | head -12
say "verify: every record, its checksum, the hash chain and every saved pre-image"
$T verify "$J"
mistake=$($T list "$J" --json | /usr/bin/python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if "rm -rf src" in " ".join(r["argv"] or []): print(r["txn"])')
say "undo the destructive mistake alone (txreplay rewind --txn $mistake)"
$T rewind "$J" --txn "$mistake" | tail -1
ls -l "$ws/src"
say "rewind the whole session (txreplay rewind)"
$T rewind "$J" | tail -1
after=$(listing)
if [ "$before" = "$after" ]; then
	say "the workspace is as it started: every file, byte, mode and mtime"
else
	say "MISMATCH after rewind"
	printf '%s\n' "$before" > "$W/a"; printf '%s\n' "$after" > "$W/b"; diff "$W/a" "$W/b" || true
	exit 1
fi
