/*
 * policy.h - the policy engine (issue 6): an INI policy (policies/README.md,
 * ftsbx-policy(5)) compiled into one flat, position-independent block, and
 * the decisions the shim asks of it on every file, exec, signal and connect
 * call of the wrapped program.
 *
 * Two halves with different rules:
 * - Loading (policy_load) parses with inih, expands ~ and $VAR, and may
 *   allocate: it runs once, in the constructor of a session's first process.
 *   Its result is one block of bytes (offsets, never pointers; a size and a
 *   64-bit hash) that the first process can write into the session directory
 *   (policy_blob) and later processes map (policy_from_blob, no allocation).
 * - Deciding (policy_path, policy_exec, policy_signal, policy_connect and the
 *   accessors) never allocates, never uses stdio and takes no lock: it reads
 *   the block only, so it is safe in a vfork child, between fork and exec of a
 *   threaded parent, and from any thread. Large sh -c strings are scanned in
 *   an mmap'd buffer, never on the heap.
 *
 * The WHY strings a decision returns point into the block or are static
 * strings: valid as long as the policy is. They name the rule ("[paths]
 * hidden = ~/.ssh", "[commands] git-push-force = git push -f|--force") or
 * the built-in reason ("outside the writable roots").
 *
 * Mode (enforce, audit, off) is the caller's business: the decisions always
 * say what the policy refuses; in audit mode the shim records the refusal and
 * lets the call through, in off mode it does not ask at all.
 */
#ifndef FTSBX_POLICY_H
#define FTSBX_POLICY_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

enum pverdict {
	PV_ALLOW,       /* allowed (writes: journaled) */
	PV_UNTRACKED,   /* writes: allowed, not journaled (caches, devices) */
	PV_DENY,        /* refused: EACCES for paths, EPERM for the rest */
};

enum pmode { PM_ENFORCE, PM_AUDIT, PM_OFF };
enum pdurability { PD_PROCESS, PD_POWER };          /* survive a kill / also power loss (fsync) */
enum plandlock { PL_OFF, PL_AUTO, PL_REQUIRE };     /* auto: on where the kernel has it */
enum popaque_kind { PO_STATIC, PO_SETUID, PO_GO, PO_LDSO, PO_KINDS };
enum popaque { PO_REFUSE, PO_WARN };                /* warn: allow, say so, record it */

/* Which failures of a transaction rewind it (a bit mask). */
#define PR_NONZERO      1u      /* exited with a non-zero status */
#define PR_SIGNAL       2u      /* killed by a signal */
#define PR_REFUSAL      4u      /* the policy refused one of its calls */

/*
 * A loaded or mapped policy. B points to the compiled block; OWNED is the
 * allocation policy_load made (NULL for a mapped block). The journal
 * directory is not part of the block (it is known only once the session
 * exists): policy_set_journal points here to it (the caller keeps the
 * string), and every path under it is refused, reads and writes alike.
 * Small: a process writes all of it at start.
 */
struct policy {
	const struct pol_hdr *b;
	size_t n;
	void *owned;
	/* Filters worked out when the block is taken up, per path kind: the
	 * bytes every literal prefix of the kind starts with (a path that
	 * does not start with them has none of them as an ancestor), and
	 * whether any glob of the kind is anchored. */
	uint32_t lcp[4];
	bool anchored[4];
	const char *journal;            /* JOURNAL_LEN bytes (no trailing '/') */
	size_t journal_len;
	/* The read check's filter (decide.c: reads ask only the hidden
	 * rules), kept here so that a path no hidden rule can match is
	 * answered without a look at the block: the first bytes of the
	 * hidden globs that float (the block's firstbits), and the first
	 * bytes of the hidden prefixes' common prefix as a word (HEAD, under
	 * HEAD_MASK; HEAD_MASK 0: no hidden prefix). */
	uint64_t hidden_first[4];
	uint64_t hidden_head, hidden_mask;
	/* The bytes of hidden_first when it has 4 or fewer (a path's bytes
	 * are compared with each, 16 at a time); HIDDEN_NFIRST 255: more. */
	unsigned char hidden_firstc[4];
	unsigned char hidden_nfirst;
	/* The parts of the block checked (bit P) and found damaged (bit
	 * 8 + P) so far (internal.h: pol_part), updated atomically. */
	uint32_t parts;
};

/* The reason a question gets when the part of the block it needs is
 * damaged (the answer is a refusal): compare the pointer. */
extern const char policy_damaged[];

/* Load FILE (NULL: the built-in default, policies/default.ini). 0, or -1 with
 * "FILE:LINE: what is wrong" (or "FILE: why" for an unreadable file) in ERR.
 * The workspace is FTSBX_WORKSPACE or, unset, the current directory. */
int policy_load(struct policy **out, const char *file, char *err, size_t errlen);
/* The same from LEN bytes of TEXT, named NAME in messages. */
int policy_load_text(struct policy **out, const char *name, const char *text, size_t len, char *err,
		     size_t errlen);
void policy_free(struct policy *pol);

/* The compiled block, to be written out as is. */
void policy_blob(const struct policy *pol, const void **p, size_t *n);
/* Use a block of N bytes at P (mapped; it must stay mapped) as the policy
 * POL. Checks magic, version, size, and the core's hash and offsets: 0 or
 * -EINVAL. The other parts are checked when first needed: a question whose
 * part is damaged is refused with policy_damaged as the reason. No
 * allocation. */
int policy_from_blob(struct policy *pol, const void *p, size_t n);
/* Every part of POL's block checked: false when one is damaged. */
bool policy_intact(const struct policy *pol);
uint64_t policy_hash(const struct policy *pol);
/* DIR must stay valid as long as POL is used. */
void policy_set_journal(struct policy *pol, const char *dir);

/* Settings. */
enum pmode policy_mode(const struct policy *pol);
enum pdurability policy_durability(const struct policy *pol);
enum plandlock policy_landlock(const struct policy *pol);
enum popaque policy_opaque(const struct policy *pol, enum popaque_kind kind);
unsigned policy_rewind_on(const struct policy *pol);            /* PR_* bits */
/* True when a failure of ARGV does not count for rewind-on-failure (the
 * [rewind] except rules: test runners, whose failing is their job). */
bool policy_rewind_exempt(const struct policy *pol, char *const argv[]);
bool policy_signals_session(const struct policy *pol);       /* signals = session */
bool policy_net_record(const struct policy *pol);               /* record every connect */
const char *policy_workspace(const struct policy *pol);
const char *policy_source(const struct policy *pol);            /* the file, or "<built-in>" */
/* The I-th writable root (untracked ones too: what Landlock must allow),
 * NULL past the last. Only literal absolute roots are listed. */
const char *policy_root(const struct policy *pol, size_t i);
/* Is ABS a directory on the way to a writable or untracked root (a proper
 * ancestor of one, not "/")? */
bool policy_root_ancestor(const struct policy *pol, const char *abs);
/* Is ABS a writable or untracked root itself, whose own entry lies in a
 * directory outside every root (~/.npm in HOME, /tmp in /)? */
bool policy_root_entry_outside(const struct policy *pol, const char *abs);

/*
 * ABS is an absolute, normalised path (no "//", ".", ".."; symlinks already
 * resolved by the caller where it matters). Reads: refused under hidden
 * paths and the journal directory. Writes (anything that creates, changes or
 * removes): refused under hidden or protected paths, on block devices and
 * outside the writable roots; untracked paths, the character devices of
 * policy_devices (/dev/null, the terminals under /dev/pts), fifos and
 * sockets under /dev and /proc are PV_UNTRACKED; other devices PV_DENY.
 *
 * TYPE is the file type (st_mode & S_IFMT) if the caller knows it, 0 if not;
 * policy_path passes 0 and then stats only paths under /dev and /proc.
 * *WHY: the reason of a refusal; for an allowed or untracked write, the
 * rule's text where the block's texts were read already (always in a
 * policy compiled in this process), else "a rule of the policy".
 */
enum pverdict policy_path_typed(const struct policy *pol, const char *abs, bool write, mode_t type,
				const char **why);
enum pverdict policy_path(const struct policy *pol, const char *abs, bool write, const char **why);

/*
 * The character devices under /dev a session may write with no rule naming
 * them (names relative to /dev; "x/" a directory, "x*" a prefix): the bit
 * buckets, randomness, terminals and accelerators. Any other (mem, port,
 * watchdog, sg, nvme controllers, rtc, msr, uinput, kmsg ...) is refused
 * unless a rule allows it (untracked = /dev/fuse). NULL-terminated.
 */
extern const char *const policy_devices[];
bool policy_device_ok(const char *name);        /* NAME relative to /dev/ */
bool policy_device_here(const char *name);      /* ... or the virtual console this process runs at */
/* The virtual consoles (tty0 ... tty63: character major 4) the standard
 * descriptors of this process are, as a mask of their numbers: the
 * terminal the agent runs at, if it runs at one; and NAME's number, if it
 * names one (-1). */
uint64_t policy_own_consoles(void);
int policy_console_number(const char *name);

/*
 * An exec of FILE (the program execve is given; NULL: ARGV[0], resolved
 * through PATH_VALUE as execvp would) with ARGV. Wrappers (env, nice,
 * nohup, timeout, stdbuf, ionice, chrt, setsid, xargs, time, ld.so,
 * busybox) are seen through; the [commands] rules match the program and its
 * arguments; sh -c / bash -c strings are split into simple commands, each
 * checked the same way, and scanned for fetch-and-run pipelines. PV_ALLOW or
 * PV_DENY. No allocation; a few stat/readlink calls to resolve the program.
 */
enum pverdict policy_exec(const struct policy *pol, const char *file, char *const argv[],
			  const char *path_value, const char **why);
/* What the program of an exec (FILE and ARGV as for policy_exec) does with
 * a stream, for the shim's look at a pipeline one process at a time, where
 * no shell string shows it whole (`$(command -v curl) URL | sh`, a pipeline
 * the session's root runs): PS_FETCHER, a fetcher, whose standard output
 * (*FD = 1) is what it fetched; PS_RUNS, an interpreter that reads its
 * program from descriptor *FD (standard input, or a /dev/fd/N operand);
 * PS_NONE (also when [fetch-and-run] action = allow). */
enum { PS_NONE, PS_FETCHER, PS_RUNS };
int policy_stream_role(const struct policy *pol, const char *file, char *const argv[], int *fd);
/* The script an interpreter of that exec runs from a file (python3 get.py,
 * bash -e i.sh), or NULL: no interpreter, code given (-c), a program read
 * from a stream, or fetch-and-run allowed. The shim looks for the mark a
 * fetcher left on its downloads there (shim/fetched.c). */
const char *policy_script_of(const struct policy *pol, const char *file, char *const argv[]);
/* The -c string a shell started with ARGV (ARGC words) runs (bash -c S,
 * -lc S, -l -c S, -o pipefail -c S, -c -- S), or NULL. */
const char *policy_shell_string(char *const argv[], int argc);
/* Whether the program named NAME (a base name) is one of [fetch-and-run]
 * fetchers, with fetch-and-run refused. */
bool policy_fetcher(const struct policy *pol, const char *name);
/* Whether NAME is one of [fetch-and-run] carriers (cp, tar, cat ...): a
 * program that passes a download's bytes on into files of its own, which
 * the shim marks as downloads too (shim/fetched.c). */
bool policy_carrier(const struct policy *pol, const char *name);
bool policy_fetch_run(const struct policy *pol);        /* fetch-and-run is refused */
/* The same; *ST: the file the program (FILE, else ARGV[0]) leads to through
 * its symlinks when that names it by a path (has a '/'), as stat would
 * give it; st_ino 0 when that is not known. Saves the caller (the shim's
 * look at the ELF file) a lookup of its own. */
struct stat;
enum pverdict policy_exec_stat(const struct policy *pol, const char *file, char *const argv[],
			       const char *path_value, const char **why, struct stat *st);

/* A signal SIG to TARGET (kill's pid argument: > 0 a process, 0 or < -1 a
 * process group, -1 every process). IN_SESSION: the caller found every
 * process it reaches inside the session. Signal 0 (a probe) is allowed. */
enum pverdict policy_signal(const struct policy *pol, pid_t target, int sig, bool in_session,
			    const char **why);

/* A connect() to SA. */
enum pverdict policy_connect(const struct policy *pol, const struct sockaddr *sa, socklen_t len,
			     const char **why);

/* dirlist.c: whether many paths are there (and their real paths), from
 * the listings of their directories, each read once, the fourth time the
 * directory is asked about. A listing: the directory's names, each after
 * a NUL and the last followed by one ("\0a\0b\0"), or MISSING. Mallocs:
 * not in a vfork child. */
struct dirlisting {
	char *dir;
	char *names;
	size_t len;
	bool missing;
	enum { DL_ASKED, DL_READ, DL_UNKNOWN } state;
	unsigned asked;
};
struct dirlist {
	struct dirlisting l[32];
	size_t n;
};
bool dirlist_real_path(struct dirlist *d, const char *p, char out[PATH_MAX]);
/* 1: P (absolute, normalised) is there; 0: it is not; -1: cannot tell. */
int dirlist_there(struct dirlist *d, const char *p);
void dirlist_free(struct dirlist *d);

#endif
