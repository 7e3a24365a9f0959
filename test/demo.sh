#!/bin/sh
# demo.sh - `make demo`: a session written through the journal API by
# test/jdrive (the way the shim writes it), then read back with txreplay:
# the transactions, the timeline, a verify, a rewind of one bad transaction
# and finally of the whole session, checked against the tree as it started.
set -eu
B=${1:-build}
J=$B/test/jdrive
T=$B/txreplay
W=$(mktemp -d /tmp/ftsbx-demo-XXXXXX)
trap 'rm -rf "$W"' EXIT
S=$W/journal
ws=$W/workspace
mkdir -p "$ws/src" "$ws/docs"
printf 'int main(void) { return 0; }\n' > "$ws/src/main.c"
printf 'int helper(void) { return 1; }\n' > "$ws/src/util.c"
printf '# demo project\n' > "$ws/README.md"
printf 'notes\n' > "$ws/docs/notes.txt"
listing() { (cd "$ws" && find . -printf '%y %m %s %T@ %p\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(listing)

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say "tool call 1: the agent edits two files"
$J "$S" begin sed -i s/0/42/ src/main.c :: put "$ws/src/main.c" 'int main(void) { return 42; }
' :: append "$ws/README.md" 'Build with make.
' :: end 0
say "tool call 2: a destructive mistake, rm -rf src"
$J "$S" begin rm -rf src :: unlink "$ws/src/main.c" :: unlink "$ws/src/util.c" :: rmdir "$ws/src" :: end 0
say "tool call 3: a command the policy refuses"
$J "$S" begin git push --force :: exec git push --force origin main \
	:: refuse exec 'git push --force: rewrites history on a remote' :: end 256
say "the transactions (txreplay list)"
$T list "$S"
say "the forensic timeline (txreplay log)"
$T log "$S"
say "verify the journal (txreplay verify)"
$T verify "$S"
say "undo the mistake only (txreplay rewind --txn 2)"
$T rewind "$S" --txn 2
ls -l "$ws/src"
say "rewind the whole session (txreplay rewind)"
$T rewind "$S"
after=$(listing)
if [ "$before" = "$after" ]; then
	say "the workspace is byte for byte, mode for mode and mtime for mtime as it started"
else
	say "MISMATCH after rewind"; printf "%s\n" "$before" > "$W/a"; printf "%s\n" "$after" > "$W/b"; diff "$W/a" "$W/b" || true; exit 1
fi
