/*
 * hooks.c - the wrappers generated from hooks.def, and the pre-change
 * checks they call: resolve the path, keep the journal directory off
 * limits, and journal the undo record (journal/capture.c) before the real
 * call. A path the kernel will not find anyway (ENOENT, ENOTDIR) is left
 * to the real call to fail; any other failure to journal refuses the call:
 * nothing changes unjournaled.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>
#include <sys/uio.h>
#include "shim.h"

/* Paths under these are not files a rewind could restore; /dev/shm's
 * are, and a workspace there is journaled as anywhere (the policy's
 * untracked /dev/shm leaves it alone too). */
static bool untracked(const char *p)
{
	if (path_under(p, "/dev", 4))
		return !path_under(p, "/dev/shm", 8) || !guard_in_workspace(p);
	return path_under(p, "/proc", 5) || path_under(p, "/sys", 4);
}

/* The journal directory is off limits. The lexical test is free; the
 * inode test catches a way in through a symlinked directory or a hard link:
 * every journal file lives directly in one of the session's three
 * directories, so the parent of P is compared with them. */
/* The last parent this thread found outside the journal. It stays valid
 * while the session's namespace generation (the seq file's u64 at offset 24,
 * bumped before every rmdir, rename and symlink, in any process) is
 * unchanged: a directory cannot become a symlink into the journal without
 * one of those. */
static __thread struct {
	uint64_t gen;
	char parent[512];
} outside __attribute__((tls_model("initial-exec")));

static bool in_journal_dir(const char *p)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(p, '/');
	struct stat st;
	uint64_t gen;

	if (!slash || !shim_session())
		return false;
	size_t n = slash == p ? 1 : (size_t)(slash - p);
	memcpy(parent, p, n);
	parent[n] = 0;
	gen = __atomic_load_n(&shim.s.ctr[3], __ATOMIC_ACQUIRE);
	if (outside.gen == gen + 1 && !strcmp(outside.parent, parent))
		return false;
	if (stat(parent, &st) < 0)
		return false;
	if (shim_journal_dir(&st))
		return true;

	if (n < sizeof(outside.parent)) {
		memcpy(outside.parent, parent, n + 1);
		outside.gen = gen + 1;
	}
	return false;
}

/* Bump the session's shared counter K (the namespace generation, 3; the
 * turns, J_CTR_TURNS): the caches of every process that read it are stale. */
static void bump(unsigned k)
{
	if (shim.session_open)
		__atomic_add_fetch(&shim.s.ctr[k], 1, __ATOMIC_SEQ_CST);
}

static void bump_namespace(void)
{
	bump(3);
}

/* The path with its directory part resolved by the kernel (symlinked
 * directories followed), so that the policy and the journal guard judge
 * where a change really lands. A thread keeps the last answer while the
 * namespace generation (see in_journal_dir) stands. A missing directory
 * leaves the path as it is: the call fails anyway. true: P was rewritten. */
static __thread struct {
	uint64_t gen;
	char lex[512], canon[512];
} canon_cache __attribute__((tls_model("initial-exec")));

static bool canonical_parent(char p[PATH_MAX])
{
	char parent[PATH_MAX], real[PATH_MAX], base[PATH_MAX];
	const char *slash = strrchr(p, '/');
	uint64_t gen;
	size_t n;
	int fd;

	if (!slash || slash == p)
		return false;
	n = (size_t)(slash - p);
	/* /dev is no symlink: a mount point nearly everywhere (a rename of
	 * it fails with EBUSY), and outside the writable roots, so that no
	 * program of the session replaces it. A shell's `2>/dev/null` in each
	 * fork child saves an open, a readlink of /proc/self/fd and a close. */
	if (n == 4 && !memcmp(p, "/dev", 4))
		return false;
	memcpy(parent, p, n);
	parent[n] = 0;
	memcpy(base, slash + 1, strlen(slash + 1) + 1);        /* P holds less than PATH_MAX */
	/* without the session (a write to /dev/null needs none), no cache */
	gen = shim.session_open ? __atomic_load_n(&shim.s.ctr[3], __ATOMIC_ACQUIRE) + 1 : 0;
	if (gen && canon_cache.gen == gen && !strcmp(canon_cache.lex, parent)) {
		strcpy(real, canon_cache.canon);                /* less than 512 bytes */
	} else {
		fd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return false;
		int err = path_fd(real, fd);
		close(fd);
		if (err)
			return false;
		if (gen && n < sizeof(canon_cache.lex) && strlen(real) < sizeof(canon_cache.canon)) {
			memcpy(canon_cache.lex, parent, n + 1);
			strcpy(canon_cache.canon, real);
			canon_cache.gen = gen;
		}
	}
	if (!strcmp(real, parent))
		return false;
	size_t rl = strcmp(real, "/") ? strlen(real) : 0, bl = strlen(base);
	if (rl + bl + 2 > PATH_MAX)
		return false;
	memcpy(p, real, rl);
	p[rl] = '/';
	memcpy(p + rl + 1, base, bl + 1);
	return true;
}

static int off_limits(const char *op, const char *p)
{
	if (!path_under(p, shim.journal, shim.journal_len))
		return 0;
	return shim_refuse(op, p, NULL, NULL, "the journal directory is off limits", EACCES);
}

/* The full test, for calls that change something. */
static int off_limits_change(const char *op, const char *p)
{
	int err = off_limits(op, p);

	if (!err && in_journal_dir(p))
		err = shim_refuse(op, p, NULL, NULL, "the journal directory is off limits", EACCES);
	return err;
}

/* P is the inode of a removed file kept in objects/, as a descriptor the
 * program held open on it names it: jcap_unlinkat renames a removed file
 * there, where the kernel shows an unlinked one as "NAME (deleted)". Such a
 * file has no name left to restore it under; its pre-image is the kept
 * inode itself (as with the link it was kept by before). */
/* A descriptor's name in /proc for a file no name reaches any more */
static bool named_deleted(const char *p)
{
	size_t n = strlen(p);

	return n > 10 && !strcmp(p + n - 10, " (deleted)");
}

static bool kept_inode(const char *p)
{
	return path_under(p, shim.journal, shim.journal_len) &&
	       !strncmp(p + shim.journal_len, "/objects/", 9);
}

/* P names a descriptor (a link in /proc's fd directories, /dev/fd/N,
 * /dev/stdin...) and leads to REAL, a removed file kept in objects/: the
 * program reaches the file through its own descriptor, as it may reach an
 * unlinked one. Not a way into the journal: nobody can make such a link. */
static bool all_digits(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* P is a descriptor's own link: /dev/fd/N, /dev/std{in,out,err}, or
 * /proc/X/fd/N and /proc/X/task/Y/fd/N (X: self, thread-self or a pid).
 * Nothing else under /proc (/proc/self/root/... is the whole tree). */
static bool fd_link(const char *p)
{
	const char *fd, *x;

	if (!strcmp(p, "/dev/stdin") || !strcmp(p, "/dev/stdout") || !strcmp(p, "/dev/stderr"))
		return true;
	if (!strncmp(p, "/dev/fd/", 8))
		return all_digits(p + 8, strlen(p + 8));
	if (strncmp(p, "/proc/", 6))
		return false;
	x = p + 6;
	fd = strchr(x, '/');
	if (!fd)
		return false;
	size_t n = (size_t)(fd - x);
	if (!(n == 4 && !strncmp(x, "self", 4)) && !(n == 11 && !strncmp(x, "thread-self", 11)) &&
	    !all_digits(x, n))
		return false;
	if (!strncmp(fd, "/task/", 6)) {
		x = fd + 6;
		fd = strchr(x, '/');
		if (!fd || !all_digits(x, (size_t)(fd - x)))
			return false;
	}
	return !strncmp(fd, "/fd/", 4) && all_digits(fd + 4, strlen(fd + 4));
}

HIDDEN bool shim_fd_of_removed(const char *p, const char *real)
{
	return fd_link(p) && kept_inode(real);
}

#define FD_OF_REMOVED 1

/* A change of P, a removed file the journal keeps as the pre-image of
 * its removal, that no record would undo: refused. */
static int refuse_kept(const char *p)
{
	shim_say("cannot change", p, EACCES, "a removed file whose pre-image the journal keeps");
	return EACCES;
}

/* A change, through descriptor FD left open on it, of a removed file kept in
 * objects/ (P names it): the change is made to the pre-image itself. Where
 * FD was opened to write in place (not only to append) and its capture was
 * taken (not pending: pending.c), the whole file is journaled, and the
 * rewind puts that back over the kept inode: let through. Else (opened to read, or to append, whose record holds only the
 * size; FD -1: not this process's) refused. */
static int kept_change(int fd, const char *p)
{
	int fl = fd >= 0 && !pend_has_fd(fd) ? fcntl(fd, F_GETFL) : -1;

	if (fl >= 0 && ((fl & O_ACCMODE) == O_RDWR || ((fl & O_ACCMODE) == O_WRONLY && !(fl & O_APPEND))))
		return 0;
	return refuse_kept(p);
}

/* The descriptor number a link of this process names (/dev/fd/N,
 * /proc/self/fd/N, /proc/PID/fd/N, /dev/stdin ...), or -1. */
static int own_fd(const char *p)
{
	const char *n = strrchr(p, '/');
	char self[32];

	if (!strcmp(p, "/dev/stdin") || !strcmp(p, "/dev/stdout") || !strcmp(p, "/dev/stderr"))
		return p[8] == 'i' ? 0 : p[8] == 'o' ? 1 : 2;
	snprintf(self, sizeof(self), "/proc/%d/fd/", (int)shim_pid());
	if (!n || (strncmp(p, "/dev/fd/", 8) && strncmp(p, "/proc/self/fd/", 14) && strncmp(p, self, strlen(self))) ||
	    !all_digits(n + 1, strlen(n + 1)))
		return -1;
	return (int)strtol(n + 1, NULL, 10);
}

/* lstat P into *ST; with FOLLOW, follow a final symlink (at most 40), as
 * the call will, leaving the target in P (*MOVED then true). ST->st_mode 0:
 * nothing there. FD_OF_REMOVED: P is a descriptor's link in /proc (or
 * /dev/fd) to a removed file kept in objects/ (kept_inode), which the
 * program reaches through its own descriptor. */
static int resolve_final(char p[PATH_MAX], bool follow, struct stat *st, bool *moved)
{
	char t[PATH_MAX], joined[PATH_MAX];

	st->st_mode = 0;
	for (int hops = 0; hops < 40; hops++) {
		ssize_t n;
		if (lstat(p, st) < 0) {
			st->st_mode = 0;
			return 0;
		}
		if (!follow || !S_ISLNK(st->st_mode))
			return 0;
		n = readlink(p, t, sizeof(t) - 1);
		if (n < 0)
			return 0;
		t[n] = 0;
		if (shim_fd_of_removed(p, t))
			return FD_OF_REMOVED;
		if (t[0] == '/') {
			strcpy(joined, t);
		} else {
			char *slash = strrchr(p, '/');
			*slash = 0;
			size_t l = strlen(p);
			if (l + (size_t)n + 2 > PATH_MAX)
				return -ENAMETOOLONG;
			memcpy(joined, p, l);
			joined[l] = '/';
			memcpy(joined + l + 1, t, (size_t)n + 1);
		}
		int err = path_abs(p, AT_FDCWD, joined);
		if (err)
			return err;
		st->st_mode = 0;
		*moved = true;
	}
	return -ELOOP;
}

/* The path locks this thread holds from its capture until the real call
 * returns (journal/locks.c). */
static __thread struct jlockset held __attribute__((tls_model("initial-exec")));

static void lock_paths(struct jseg *g, const char *a, const char *b)
{
	if (!held.n)
		jlock_paths(g->s, &held, a, b);
}

/* A rename of a directory or a symlink bumps the namespace generation
 * before it and again once it is done (set here, bumped by shim_unlock
 * after the real call): a cwd read in between (path.c) is read again. */
static __thread bool bump_after __attribute__((tls_model("initial-exec")));

static void bump_namespace_around(void)
{
	bump_namespace();
	bump_after = true;
}

HIDDEN void shim_unlock(void)
{
	if (held.n || bump_after) {
		int e = errno;
		if (held.n)
			junlock(&held);
		if (bump_after) {
			bump_after = false;
			bump_namespace();
		}
		errno = e;
	}
}

/* Journal the change OP of the absolute path P. LOCK: hold P's locks
 * until the real call returns (not for a call that may block: an open of
 * a fifo or a device). */
/* An error of the journal itself (a segment that cannot be opened, log/
 * gone): never one the real call would meet, so never let through as
 * "the call fails anyway" (refuse_unjournaled). */
static int journal_err(int err)
{
	return err == -ENOENT || err == -ENOTDIR ? -EIO : err;
}

/* This process's segment for a change of P, with P's locks taken when
 * LOCK: 1 (go on, *G set), 0 (P is untracked: nothing to journal), or
 * -errno. */
static int begin_change(const char *p, bool lock, struct jseg **g)
{
	int err;

	if (untracked(p))
		return 0;
	err = shim_segment(g);
	if (err)
		return journal_err(err);
	if (lock)
		lock_paths(*g, p, NULL);
	return 1;
}

/* The part a JC_RANGE capture is of (pre_fd_range): this thread's. */
static __thread struct jrange *range_want __attribute__((tls_model("initial-exec")));
/* A JC_TRUNC check is of a cut to this length (pre_cut), -1: any. */
static __thread off_t cutting __attribute__((tls_model("initial-exec"))) = -1;

/* The next JC_TRUNC checks of this thread are of a cut to N (-1: any,
 * which the caller sets again after): the journal records only the size
 * of a file that N makes no shorter (jcap_cut_to), and the answer this
 * thread keeps is of a size only. */
HIDDEN void pre_cut(off_t n)
{
	cutting = n;
	jcap_cut_to(n < 0 ? JCUT_ANY : (uint64_t)n);
}

/* KNOWN: P's lstat, taken while P's locks were held; NULL: look again. */
static int capture(const char *p, enum jcap_op op, bool lock, const struct stat *known)
{
	struct jseg *g;
	int err = begin_change(p, lock, &g);

	if (err <= 0)
		return err;
	if (op == JC_RANGE) {
		err = jcap_range(g, shim_txn(), p, range_want);
		if (err != -ENOTSUP)
			return err;
		range_want->whole = true;       /* a session without parts */
		op = JC_WRITE;
	}
	return jcap_path_known(g, shim_txn(), p, op, known);
}

static int refuse_unjournaled(const char *p, int err);

/* An untracked entry P (a cache: not journaled) is made, removed or
 * renamed: its directory's times change all the same, and a directory that
 * is journaled gets them recorded (mkdir -p ~/.cache/x, HOME in a root). */
/* P's directory ("/a/b" for "/a/b/c") into DIR; false for none. */
static bool dir_of(const char *p, char dir[PATH_MAX])
{
	const char *slash = strrchr(p, '/');

	if (!slash || slash == p || (size_t)(slash - p) >= PATH_MAX)
		return false;
	memcpy(dir, p, (size_t)(slash - p));
	dir[slash - p] = 0;
	return true;
}

/* Are changes in P's directory journaled (not an untracked one)? */
static bool dir_journaled(const char *p)
{
	char dir[PATH_MAX];

	return dir_of(p, dir) && !untracked(dir) && guard_journaled(dir);
}

static void untracked_entry(const char *p)
{
	struct jseg *g;

	if (shim.session_open && dir_journaled(p) && shim_segment(&g) == 0)
		(void)jcap_parent_meta(g, shim_txn(), p);
}

/* The last existing file this thread journaled a change of, as check()
 * found it: the path the program named (and whether the call follows a
 * final symlink), the path it resolved to, and the level of the pre-image
 * now in the journal (1 metadata, 2 size, 3 all). It answers the next check
 * of the same path, an fchown after an open, with no system call while the
 * transaction, the copy-on-first-write generation (bumped by every remove
 * and rename), the namespace generation (every rmdir, symlink and rename
 * of a directory) and the count of paths taken over from another
 * transaction (J_CTR_TURNS: one may have been P) stand, as the shared table
 * itself would. */
static __thread struct {
	uint8_t salt[J_SALT_LEN];
	uint32_t txn;
	uint64_t cow, ns, turns;
	bool follow, is_dir, late;
	unsigned level;
	char in[256], out[256];
} seen __attribute__((tls_model("initial-exec")));

static unsigned level_of(enum jcap_op op, bool is_dir)
{
	if (op == JC_REMOVE)
		return 4;       /* never answered from here */
	if (is_dir || op == JC_META)
		return 1;       /* a directory's change journals its metadata */
	return op == JC_APPEND ? 2 : 3;
}

static bool seen_generations(void)
{
	return seen.cow == __atomic_load_n(&shim.s.ctr[2], __ATOMIC_ACQUIRE) &&
	       seen.ns == __atomic_load_n(&shim.s.ctr[3], __ATOMIC_ACQUIRE) &&
	       seen.turns == __atomic_load_n(&shim.s.ctr[J_CTR_TURNS], __ATOMIC_ACQUIRE) &&
	       seen.late == jtxn_late(&shim.s, seen.txn);      /* its transaction ended since */
}

/* The answer holds only if the generations still stand once P's locks are
 * held: a rename of another file over P bumps them under those locks, and
 * must not fall between this test and the change. On a hit, P's locks stay
 * held (for the real call); 0 or the errno of a refusal when taking them
 * failed. */
static bool seen_before(char p[PATH_MAX], enum jcap_op op, bool follow, int *err)
{
	struct jseg *g;

	if (!seen.level || !shim.session_open || held.n || seen.follow != follow || seen.txn != shim_txn() ||
	    level_of(op, seen.is_dir) > seen.level || strcmp(seen.in, p) || !seen_generations() ||
	    memcmp(seen.salt, shim.s.salt, J_SALT_LEN))
		return false;
	*err = begin_change(seen.out, true, &g);
	if (*err < 0) {
		*err = refuse_unjournaled(seen.out, *err);
		return true;
	}
	*err = 0;
	if (!seen_generations()) {
		shim_unlock();
		return false;
	}
	strcpy(p, seen.out);    /* less than 256 bytes */
	return true;
}

/* Before the lookups: the generations they are valid for. */
static void seen_begin(const char *p, bool follow, uint64_t gen[2])
{
	size_t n = strlen(p);

	seen.level = 0;
	seen.in[0] = 0;
	if (n >= sizeof(seen.in) || !shim.session_open || guard_audit())
		return;         /* audit mode records every would-be refusal */
	gen[0] = __atomic_load_n(&shim.s.ctr[2], __ATOMIC_ACQUIRE);
	gen[1] = __atomic_load_n(&shim.s.ctr[3], __ATOMIC_ACQUIRE);
	memcpy(seen.in, p, n + 1);
	seen.follow = follow;
}

/* P's locks are still held: no other transaction can have taken P since
 * the capture (a takeover of another path bumps the count too, and costs
 * the next check its shortcut). */
static void seen_end(const char *p, enum jcap_op op, mode_t type, const uint64_t gen[2])
{
	size_t n = strlen(p);

	if (!seen.in[0] || op == JC_REMOVE || n >= sizeof(seen.out) || (type != S_IFREG && type != S_IFDIR))
		return;
	memcpy(seen.out, p, n + 1);
	memcpy(seen.salt, shim.s.salt, J_SALT_LEN);
	seen.txn = shim_txn();
	seen.cow = gen[0];
	seen.ns = gen[1];
	seen.turns = __atomic_load_n(&shim.s.ctr[J_CTR_TURNS], __ATOMIC_ACQUIRE);
	seen.late = jtxn_late(&shim.s, seen.txn);
	seen.is_dir = type == S_IFDIR;
	seen.level = level_of(op, seen.is_dir);
}

/* Whether the directory P, which the program's rmdir names as PATH, may be
 * kept in the journal instead (jcap_removeat: renamed, not removed). Not
 * where rmdir fails for its name (".", ".."), and not where a process
 * likely stands in or under it: this one, its parent (the shell that ran
 * rm), the session's start (the workspace: where the agent, and the shell
 * that started it, stand; the parent of the session's root is out of
 * Landlock's reach: EACCES); nor where this process holds a descriptor on
 * it (jcap_removeat looks); nor where the session's root stands. A process
 * in a removed directory finds nothing there and can make nothing in it,
 * where one in a kept directory would see the journal's objects. Another
 * process standing there is not looked for (documented). */
static bool may_keep_dir(const char *p, const char *path, int flags)
{
	char cwd[PATH_MAX], proc[32] = "/proc/";
	size_t n = strlen(path), pn = strlen(p);
	const char *c;
	ssize_t k;

	while (n > 1 && path[n - 1] == '/')
		n--;
	if (flags != AT_REMOVEDIR || txn_vfork_child() || (n >= 1 && path[n - 1] == '.' &&
	    (n == 1 || path[n - 2] == '/' || (path[n - 2] == '.' && (n == 2 || path[n - 3] == '/')))))
		return false;
	if (!(c = cwd_get()) || path_under(c, p, pn) || guard_workspace_under(p))
		return false;
	/* the parent, and the session's root (the agent, which may have
	 * chdir'd into a directory a tool call's rm -rf removes: kept, it
	 * would stand in the journal after a rewind made the directory anew) */
	const char *root = shim_getenv("FTSBX_ROOT");
	pid_t pids[2] = { getppid(), root ? (pid_t)strtol(root, NULL, 10) : 0 };
	for (int i = 0; i < 2; i++) {
		if (pids[i] <= 0 || (i && (pids[i] == getpid() || pids[i] == pids[0])))
			continue;
		memcpy(proc + 6 + jdecimal(proc + 6, (uint64_t)pids[i]), "/cwd", 5);
		k = readlink(proc, cwd, sizeof(cwd) - 1);
		if (k < 0) {
			if (errno == EACCES || errno == ENOENT)
				continue;       /* outside the session; gone */
			return false;
		}
		cwd[k] = 0;
		if (path_under(cwd, p, pn))
			return false;
	}
	return true;
}

/* The removal of P, which the program names as PATH relative to DIRFD: the
 * journal's system calls take that plain name relative to DIRFD (a lookup
 * of one component), the record takes P. An unlink of a regular file is
 * made by the journal itself, right after its record (PRE_DONE), and so is
 * an rmdir where the journal keeps the directory. */
static int capture_remove(const char *p, int dirfd, const char *path, int flags)
{
	struct jseg *g;
	int err = begin_change(p, true, &g);

	if (err <= 0)
		return err ? refuse_unjournaled(p, err) : 0;
	if (flags == 0 || flags == REMOVE_ANY)
		err = jcap_unlinkat(g, shim_txn(), p, dirfd, path);
	else
		err = jcap_removeat(g, shim_txn(), p, dirfd, path, may_keep_dir(p, path, flags));
	if (err == JCAP_DONE)
		return PRE_DONE;
	if (err == JCAP_NOTEMPTY) {
		char kept[64] = "it is the journal's objects/.keep-";
		kept[34 + jdecimal(kept + 34, (uint64_t)gettid())] = 0;
		shim_say("rmdir (another process made an entry in it while it was removed, and its name was taken since)",
			 p, ENOTEMPTY, kept);
		return ENOTEMPTY;
	}
	return err ? refuse_unjournaled(p, err) : 0;
}

static int refuse_unjournaled(const char *p, int err)
{
	if (err == -ENOENT || err == -ENOTDIR || err == -ELOOP)
		return 0;               /* the real call fails the same way (a symlink loop too) */
	shim_say("cannot journal a change of", p, -err, "refused: nothing changes unjournaled");
	return -err;
}

/* Take P's locks before its first lstat, so that what the lstat saw still
 * holds when the capture uses it (another thread's change of P waits). */
static bool lock_first(const char *p)
{
	if (held.n || !shim.session_open || untracked(p))
		return false;
	jlock_paths(&shim.s, &held, p, NULL);
	return true;
}

/* Hold the locks of the path FD's file has (its cached name) until
 * shim_unlock: a write at a descriptor's offset reads the offset and
 * writes there with no other writer of the file, in this process or
 * another sharing the descriptor, moving it in between (pending.c). */
HIDDEN void shim_lock_fd(int fd, const struct stat *st)
{
	char p[PATH_MAX];

	if (!held.n && shim.session_open && pend_named(fd, st, p))
		lock_first(p);
}

/* A regular file with other names (ST: its lstat, 0 mode if none): a
 * change made through an untracked name of it (a cache's: ln ws/f
 * ~/.cache/x) is a change of its other names too, which may be the
 * workspace's; it is journaled as theirs would be. */
static bool other_names(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_nlink > 1;
}

/* LATER: the caller may put off an in-place write's capture (pending.c):
 * set when it did, the file a regular one the policy lets change. */
static int check(const char *opname, char p[PATH_MAX], enum jcap_op op, bool follow, bool creates, bool *later)
{
	struct stat st;
	uint64_t gen[2] = { 0, 0 };
	bool locked, moved = false;
	mode_t mode;
	int err;

	if (seen_before(p, op, follow, &err))
		return err;
	seen_begin(p, follow, gen);
	locked = lock_first(p);
	err = resolve_final(p, follow, &st, &moved);
	if (err == FD_OF_REMOVED)
		return kept_change(own_fd(p), p);
	moved |= canonical_parent(p);
	mode = st.st_mode & S_IFMT;
	if (!err && !mode && !creates)
		return 0;       /* truncate() and friends of a missing path: it fails */
	/* A character device (`> /dev/null`) changes no file: no session to
	 * open for it, and none of the journal's files is one. */
	if (!err && (err = mode == S_IFCHR ? off_limits(opname, p) : off_limits_change(opname, p)))
		return err;
	if (!err && (err = guard_write(opname, p, mode))) {
		if (err != 1 || !other_names(&st)) {
			if (err == 1 && !mode)
				untracked_entry(p);
			return err == 1 ? 0 : err;
		}
		err = 0;        /* journaled, as its other names are */
	}
	bool lock = !mode || mode == S_IFREG || mode == S_IFDIR || mode == S_IFLNK;
	if (locked && (moved || !lock)) {
		shim_unlock();  /* the locks of another path, or of a call that may block */
		locked = false;
	}
	if (!err && later && op == JC_WRITE && mode == S_IFREG) {
		*later = true;
		return 0;
	}
	if (!err)
		err = capture(p, op, lock, locked ? &st : NULL);
	if (err)
		return refuse_unjournaled(p, err);
	if ((mode != S_IFREG || st.st_nlink < 2) &&    /* each change of those is recorded */
	    (op != JC_RANGE || range_want->whole))     /* a part answers no later check */
		seen_end(p, op == JC_RANGE ? JC_WRITE : op == JC_TRUNC && cutting >= 0 ? JC_APPEND : op, mode, gen);
	return 0;
}

static bool writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
}

HIDDEN int pre_open(int dirfd, const char *path, int flags)
{
	char p[PATH_MAX];

	return pre_open_abs(dirfd, path, flags, p, NULL);
}

/* The capture an open for writing with FLAGS needs. Only a write-only
 * O_APPEND descriptor is sure to add bytes and no more (its size is
 * enough): one that also reads can be mapped MAP_SHARED and written in
 * place, and the flag can be cleared later (pre_setfl, RWF_NOAPPEND). */
static enum jcap_op open_op(int flags)
{
	if (flags & O_TRUNC)
		return JC_TRUNC;
	return (flags & O_APPEND) && (flags & O_ACCMODE) == O_WRONLY ? JC_APPEND : JC_WRITE;
}

/* fcntl(F_SETFL) clearing O_APPEND of a descriptor that writes, and
 * pwritev2(RWF_NOAPPEND) (an append-only pre-image holds only the size):
 * the whole pre-image first. */
HIDDEN int pre_setfl(int fd, int newfl)
{
	int old = fcntl(fd, F_GETFL);

	pend_setfl(fd, newfl);
	if (old < 0 || !(old & O_APPEND) || (newfl & O_APPEND) || (old & O_ACCMODE) == O_RDONLY)
		return 0;
	return pre_fd(fd, JC_WRITE);
}

/* ioctl(FD, REQ, ARG) that sets a file's inode flags (chattr's calls:
 * FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR), and the file_setattr system call
 * (Linux 6.17, FLAGS its new xflags): the journal keeps no inode flags, so
 * no rewind would put them back, and immutable or append-only ones would
 * keep a rewind from writing the file at all; chattr is refused by name
 * for the same reason. A call that changes nothing (the flags it sets are
 * the file's) goes through; one whose flags cannot be read is refused. The
 * kernel takes REQ as 32 bits. */
#define FS_IOC32_SETFLAGS_ 0x40046602u          /* _IOW('f', 2, int) */
#define FS_IOC_SETFLAGS_   0x40086602u          /* _IOW('f', 2, long) */
#define FS_IOC_GETFLAGS_   0x80086601u
#define FS_IOC_FSSETXATTR_ 0x401c5820u          /* _IOW('X', 32, struct fsxattr) */
#define FS_IOC_FSGETXATTR_ 0x801c581fu
#define FICLONE_           0x40049409u          /* _IOW(0x94, 9, int) */
#define FICLONERANGE_      0x4020940du          /* _IOW(0x94, 13, struct file_clone_range) */
#define UFFDIO_REGISTER_   0xc020aa00u          /* _IOWR(0xAA, 0x00, struct uffdio_register) */
HIDDEN bool inode_flags_request(unsigned long req)
{
	uint32_t r = (uint32_t)req;

	return r == FS_IOC_SETFLAGS_ || r == FS_IOC32_SETFLAGS_ || r == FS_IOC_FSSETXATTR_;
}

/* N bytes at ARG, read as the kernel will: a bad pointer fails the call,
 * not the shim. */
HIDDEN bool user_bytes(const void *arg, void *v, size_t n)
{
	struct iovec mine = { v, n }, theirs = { (void *)arg, n };

	return arg && process_vm_readv(getpid(), &mine, 1, &theirs, 1, 0) == (ssize_t)n;
}

/* struct fsxattr: the fields FS_IOC_FSSETXATTR sets (not nextents) */
struct fsx { uint32_t xflags, extsize, nextents, projid, cowextsize; unsigned char pad[8]; };
static bool same_fsx(const struct fsx *a, const struct fsx *b)
{
	return a->xflags == b->xflags && a->extsize == b->extsize && a->projid == b->projid &&
	       a->cowextsize == b->cowextsize;
}

HIDDEN int pre_ioctl(int fd, unsigned long req, const void *arg)
{
	struct fsx want, now;
	uint32_t flags;
	long cur = 0;

	if ((uint32_t)req == FICLONE_ || (uint32_t)req == FICLONERANGE_)
		return pend_take(fd);   /* bytes cloned into FD's file */
	if ((uint32_t)req == UFFDIO_REGISTER_) {
		/* struct uffdio_register: { u64 start, len } range, ... (mapped.c) */
		uint64_t range[2];
		return mapped_any() && user_bytes(arg, range, sizeof(range)) ?
		       mapped_take_range((uintptr_t)range[0], (size_t)range[1]) : 0;
	}
	if (!inode_flags_request(req))
		return 0;
	if ((uint32_t)req == FS_IOC_FSSETXATTR_)
		return user_bytes(arg, &want, sizeof(want)) && ioctl(fd, FS_IOC_FSGETXATTR_, &now) == 0 &&
		       same_fsx(&want, &now) ? 0 : guard_inode_flags(fd, NULL);
	return user_bytes(arg, &flags, sizeof(flags)) && ioctl(fd, FS_IOC_GETFLAGS_, &cur) == 0 &&
	       flags == (uint32_t)cur ? 0 : guard_inode_flags(fd, NULL);
}

/* file_setattr(DIRFD, PATH, ATTR, SIZE, AT_FLAGS) and its reading twin */
#define SYS_file_getattr_ 468
HIDDEN int pre_file_setattr(int dirfd, const char *path, const void *attr, size_t size, unsigned atflags)
{
	/* struct file_attr: u64 xflags; u32 extsize, nextents, projid, cowextsize */
	struct { uint64_t xflags; uint32_t extsize, nextents, projid, cowextsize; } want, now;
	char abs[PATH_MAX];

	if (path_abs(abs, dirfd, path ? path : ""))
		snprintf(abs, sizeof(abs), "%s", path ? path : "(descriptor)");
	if (size < sizeof(want) || !user_bytes(attr, &want, sizeof(want)) ||
	    syscall(SYS_file_getattr_, dirfd, path, &now, sizeof(now), atflags) < 0)
		return guard_inode_flags(-1, abs);
	return want.xflags == now.xflags && want.extsize == now.extsize && want.projid == now.projid &&
	       want.cowextsize == now.cowextsize ? 0 : guard_inode_flags(-1, abs);
}

HIDDEN int pre_open_abs(int dirfd, const char *path, int flags, char p[PATH_MAX], bool *later)
{
	int err = path_abs(p, dirfd, path);

	if (err)
		p[0] = 0;
	if (err == -ENAMETOOLONG && !writes(flags))
		return guard_unnamed("read", path);
	if (err)
		return writes(flags) ? refuse_unjournaled(path, err) : 0;
	/* in enforce mode the policy's read check covers the journal too */
	if (!writes(flags) || (flags & __O_TMPFILE) == __O_TMPFILE)
		return guard_active() ? guard_read(p) : off_limits("open", p) ?: guard_read(p);
	return check("open", p, open_op(flags),
		     !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL),
		     flags & O_CREAT, later);
}

static int fopen_flags(const char *mode)
{
	int f;

	switch (mode ? mode[0] : 'r') {
	case 'w': f = O_WRONLY | O_CREAT | O_TRUNC; break;
	case 'a': f = O_WRONLY | O_CREAT | O_APPEND; break;
	default:  f = O_RDONLY; break;
	}
	for (const char *m = mode ? mode + 1 : ""; *m && *m != ','; m++) {
		if (*m == '+')
			f = (f & ~O_ACCMODE) | O_RDWR;
		else if (*m == 'x')
			f |= O_EXCL;
	}
	return f;
}

HIDDEN int pre_fopen(int dirfd, const char *path, const char *mode)
{
	int flags = fopen_flags(mode);

	/* the lexical verdict alone would let a symlink lead to a hidden file */
	if (!writes(flags) && path && guard_active())
		return open_read_judge(dirfd, path);
	return pre_open(dirfd, path, flags);
}

HIDDEN int pre_freopen(const char *path, const char *mode, FILE *f)
{
	int flags = fopen_flags(mode);

	if (f)                  /* glibc closes its descriptor inside libc */
		fdcache_drop(fileno_unlocked(f));
	if (path)
		return pre_fopen(AT_FDCWD, path, mode);
	if (!writes(flags) || !f)
		return 0;
	return pre_fd(fileno(f), open_op(flags));
}

HIDDEN int pre_remove(int dirfd, const char *path, int flags)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	if (err)
		return refuse_unjournaled(path, err);
	if (!(flags & AT_REMOVEDIR) && (err = pend_take_inode(p)))
		return err;
	fdcache_forget(p);
	if (flags & AT_REMOVEDIR || flags == REMOVE_ANY)
		bump_namespace();
	canonical_parent(p);
	if ((err = off_limits_change("remove", p)))
		return err;
	struct stat st;
	if ((err = guard_write("remove", p, 0)) &&
	    (err != 1 || flags & AT_REMOVEDIR || lstat(p, &st) < 0 || !other_names(&st))) {
		if (err == 1)
			untracked_entry(p);
		return err == 1 ? 0 : err;
	}
	return capture_remove(p, dirfd, path, flags);
}

/* Whether renaming P (or over it) may change where other paths lead: it
 * is a directory or a symlink, or cannot be looked at. */
static bool moves_lookups(const char *p)
{
	struct stat st;

	if (lstat(p, &st) < 0)
		return errno != ENOENT;
	return S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode);
}

HIDDEN int pre_rename(int od, const char *o, int nd, const char *n, unsigned flags)
{
	char from[PATH_MAX], to[PATH_MAX];
	struct jseg *g;
	int err = path_abs(from, od, o);

	if (!err)
		err = path_abs(to, nd, n);
	if (err)
		return refuse_unjournaled(o, err);
	if ((err = pend_take_inode(to)) || ((flags & RENAME_EXCHANGE) && (err = pend_take_inode(from))))
		return err;
	canonical_parent(from);
	canonical_parent(to);
	if ((err = off_limits_change("rename", from)) || (err = off_limits_change("rename", to)))
		return err;
	int wf = guard_write("rename", from, 0), wt = wf > 1 ? 0 : guard_write("rename", to, 0);
	if (wf > 1 || wt > 1)
		return wf > 1 ? wf : wt;
	fdcache_forget(from);
	fdcache_forget(to);
	if ((wf == 1 && wt == 1) || (untracked(from) && untracked(to))) {
		if (moves_lookups(from) || moves_lookups(to))
			bump_namespace_around();
		untracked_entry(from);
		untracked_entry(to);
		return 0;       /* both untracked: not journaled */
	}
	/* a journaled directory or file into a cache, where its changes are
	 * not journaled (mv f ~/.cache/f; edit; mv back): a directory fails
	 * EXDEV (mv copies and removes, each journaled), a file's removal is
	 * recorded with a copy of its bytes, not its inode */
	struct stat fst;
	bool copied = false;
	if (wt == 1 && !wf && !untracked(from) && lstat(from, &fst) == 0) {
		if (S_ISDIR(fst.st_mode))
			return EXDEV;
		copied = S_ISREG(fst.st_mode) && !(flags & RENAME_EXCHANGE);
	}
	err = journal_err(shim_segment(&g));
	if (!err && copied) {
		lock_paths(g, from, NULL);
		err = jcap_remove_copy(g, shim_txn(), from);
		if (!err)
			untracked_entry(to);
	} else if (!err) {
		bool dirs;

		lock_paths(g, from, to);
		err = jcap_rename(g, shim_txn(), from, to, flags, &dirs);
		if (dirs)       /* a file's new name changes no other path's lookup */
			bump_namespace_around();
	}
	return err ? refuse_unjournaled(from, err) : 0;
}

/* A device node made by the session (mknod c 1 1 in a writable root) would
 * be a way to the hardware that no path rule follows: refused, whatever its
 * name. FIFOs, sockets and plain files are creations like any other. */
/* The creation of PATH (a MODE); JOURNALED: journaled even where the
 * policy leaves it untracked (a cache's new name of a workspace's file). */
static int create_node(int dirfd, const char *path, mode_t mode, bool journaled)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	if (err)
		return refuse_unjournaled(path, err);
	struct jseg *g;

	canonical_parent(p);
	if ((err = off_limits_change("create", p)))
		return err;
	if ((S_ISCHR(mode) || S_ISBLK(mode)) && (err = guard_device_node(p)))
		return err;
	if ((err = guard_create(p, S_ISDIR(mode))) && (err != 1 || !journaled)) {
		if (err == 1)
			untracked_entry(p);
		return err == 1 ? 0 : err;
	}
	if (untracked(p))
		return 0;
	err = journal_err(shim_segment(&g));
	if (!err) {
		lock_paths(g, p, NULL);
		err = jcap_create(g, shim_txn(), p);
	}
	return err ? refuse_unjournaled(p, err) : 0;
}

HIDDEN int pre_mknod(int dirfd, const char *path, mode_t mode)
{
	return create_node(dirfd, path, mode, false);
}

HIDDEN int pre_create(int dirfd, const char *path)
{
	return pre_mknod(dirfd, path, S_IFREG);
}

HIDDEN int pre_mkdir(int dirfd, const char *path)
{
	return pre_mknod(dirfd, path, S_IFDIR);
}

/* bind() of a Unix socket to a path makes a file there: a creation
 * (python's multiprocessing forkserver, a test server's socket). An
 * abstract or unnamed address, or another family, makes none. */
HIDDEN int pre_bind(const struct sockaddr *sa, socklen_t len)
{
	const struct sockaddr_un *un = (const struct sockaddr_un *)sa;
	const size_t off = offsetof(struct sockaddr_un, sun_path);
	char p[sizeof(un->sun_path) + 1];
	size_t n;

	if (!sa || len <= off || sa->sa_family != AF_UNIX || !un->sun_path[0])
		return 0;
	n = len - off < sizeof(un->sun_path) ? len - off : sizeof(un->sun_path);
	n = strnlen(un->sun_path, n);
	memcpy(p, un->sun_path, n);
	p[n] = 0;
	return pre_create(AT_FDCWD, p);
}

/* A new symlink may stand where a directory stood: it ends the cached
 * "outside the journal" verdicts, as removes and renames do. */
HIDDEN int pre_symlink(int dirfd, const char *path)
{
	bump_namespace();
	return pre_create(dirfd, path);
}

/* link: the new name is a creation; the old one must not lead into the
 * journal (a hard link to a journal file would let it be written). */
/* A new name for a file is a way to it the rules do not know: the source,
 * as the kernel resolves it (the final symlink followed only with
 * AT_SYMLINK_FOLLOW, as linkat does), must be a file the session may
 * write. Else a link made in the workspace would read a hidden file
 * (`ln .env copy`), or write a protected one or one outside the writable
 * roots through a name inside them. */
static int link_source(int od, const char *o, int flags)
{
	char real[PATH_MAX];
	struct stat st;
	int fd, err;

	if ((flags & AT_EMPTY_PATH) && o && !*o)
		fd = fcntl(od, F_DUPFD_CLOEXEC, 0);
	else
		fd = openat(od, o, O_PATH | O_CLOEXEC | ((flags & AT_SYMLINK_FOLLOW) ? 0 : O_NOFOLLOW));
	if (fd < 0)
		return 0;       /* the real call fails the same way */
	err = fstat(fd, &st) < 0 ? -1 : path_fd(real, fd);
	close(fd);
	if (err)
		return 0;       /* the real call says why, or links a file no rule can name */
	err = guard_write("link", real, st.st_mode & S_IFMT);
	return err == 1 ? 0 : err;
}

HIDDEN int pre_link(int od, const char *o, int nd, const char *n, int flags)
{
	char p[PATH_MAX];
	int err;

	if ((flags & AT_EMPTY_PATH) && o && !*o) {
		err = path_fd(p, od);
		if (!err && kept_inode(p))
			return ENOENT;  /* an unlinked file is not linked again */
	} else {
		err = path_abs(p, od, o);
	}
	if (!err && (err = off_limits_change("link", p)))
		return err;
	if ((err = link_source(od, o, flags)))
		return err;
	/* A file with a second name needs a record at each change (capture.c):
	 * no thread may answer for it from what it saw of one name. */
	bump(J_CTR_TURNS);
	/* a journaled file's new name in a cache is journaled too (its
	 * changes are, other_names), so that a rewind takes it away */
	return create_node(nd, n, S_IFREG, !err && !untracked(p) && dir_journaled(p));
}

HIDDEN int pre_path(int dirfd, const char *path, enum jcap_op op, int follow)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	if (err)
		return refuse_unjournaled(path, err);
	return check("change", p, op, follow, false, NULL);
}

HIDDEN int pre_pathat(int dirfd, const char *path, enum jcap_op op, int atflags)
{
	if (!path || ((atflags & AT_EMPTY_PATH) && !*path))
		return pre_fd(dirfd, op);
	return pre_path(dirfd, path, op, !(atflags & AT_SYMLINK_NOFOLLOW));
}

/* The first write through FD, whose capture its open put off
 * (pending.c; ST: its fstat). A file removed since is no longer anyone's
 * to journal (no link left), or is kept as a pre-image (in objects/, or
 * another name): the write would change what a rewind puts back, which no
 * capture at the open saved first. Refused; the shim takes the pre-image
 * of this process's own pending descriptors before a removal
 * (pend_take_inode), so only another process's can come here. */
static int pre_fd_pending_op(int fd, const struct stat *st, enum jcap_op op);
static int pre_pending_at_op(char p[PATH_MAX], const struct stat *st, enum jcap_op op);

HIDDEN int pre_fd_pending(int fd, const struct stat *st)
{
	return pre_fd_pending_op(fd, st, JC_WRITE);
}

/* The name of FD's file (ST: its fstat) into P: the cached one, unless
 * another process moved, replaced or removed the file since (its lstat is
 * another inode, or none): then the name the kernel has for it now, "NAME
 * (deleted)" or the journal's objects/D/S.ino. 0 or -errno. */
HIDDEN int fd_name_now(char p[PATH_MAX], int fd, const struct stat *st)
{
	struct stat ls;
	int err = path_fd(p, fd);

	if (err || lstat(p, &ls) < 0 || ls.st_dev != st->st_dev || ls.st_ino != st->st_ino)
		err = path_fd_read(p, fd, true);
	return err;
}

static int pre_fd_pending_op(int fd, const struct stat *st, enum jcap_op op)
{
	char p[PATH_MAX];
	int err = fd_name_now(p, fd, st);

	if (err)                /* no name to journal it under (deeper than PATH_MAX) */
		return refuse_unjournaled("(descriptor)", err);
	jcap_read_through(fd, pend_reader);
	err = pre_pending_at_op(p, st, op);
	jcap_read_through(-1, NULL);
	return err;
}

/* The same for the part of FD's file WANT names (jcap_range), about to be
 * written through it: WANT says what was saved. */
HIDDEN int pre_fd_range(int fd, const struct stat *st, struct jrange *want)
{
	int err;

	want->saved = want->whole = false;
	range_want = want;
	err = pre_fd_pending_op(fd, st, JC_RANGE);
	range_want = NULL;
	return err;
}

/* The same for the file P names as the kernel has it (a descriptor's or
 * a mapping's link in /proc), whose inode is ST's. */
HIDDEN int pre_pending_at(char p[PATH_MAX], const struct stat *st)
{
	return pre_pending_at_op(p, st, JC_WRITE);
}

/* A part of the removed file that the journal keeps as the pre-image of
 * another process's removal, P the descriptor's name for it (its object,
 * objects/D/S.ino, where the removal moved it there; else "NAME
 * (deleted)", a hard link kept it, whose object is looked for by its
 * inode, ST's): saved under the object's name, so that its undo (a higher
 * seq than the removal's) puts the bytes back into the kept inode before
 * the removal's undo brings the inode back to its name. A process that
 * wrote a part before the removal writes on, as it would into a file
 * nobody removed. */
static int kept_range(const char *p, const struct stat *st)
{
	char obj[PATH_MAX], rel[PATH_MAX];
	struct jseg *g;
	int err = shim_segment(&g);

	if (err)
		return refuse_unjournaled(p, journal_err(err));
	if (!kept_inode(p)) {
		if (jkept_object(&shim.s, st->st_dev, st->st_ino, rel) ||
		    (size_t)snprintf(obj, sizeof(obj), "%s/%s", shim.journal, rel) >= sizeof(obj)) {
			return refuse_kept(p);
		}
		p = obj;
	}
	lock_paths(g, p, NULL);
	err = jcap_range(g, shim_txn(), p, range_want);
	if (err == -ENOTSUP) {          /* a session without parts */
		return refuse_kept(p);
	}
	return err ? refuse_unjournaled(p, err) : 0;
}

static int pre_pending_at_op(char p[PATH_MAX], const struct stat *st, enum jcap_op op)
{
	if (kept_inode(p) || named_deleted(p)) {
		if (!st->st_nlink)
			return 0;
		if (op == JC_RANGE)
			return kept_range(p, st);
		return refuse_kept(p);
	}
	return check("change", p, op, false, false, NULL);
}

HIDDEN int pre_fd(int fd, enum jcap_op op)
{
	char p[PATH_MAX];
	struct stat fs;
	int err;

	if (path_fd(p, fd))
		return 0;               /* a pipe, a socket: nothing to restore */
	/* a change of the bytes or the size: the file's name now (its removal
	 * may keep the inode as its pre-image, or another file may have the
	 * cached name) */
	fs.st_nlink = 0;
	if (op != JC_META && fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode) && (err = fd_name_now(p, fd, &fs)))
		return refuse_unjournaled("(descriptor)", err);
	if (kept_inode(p))
		return kept_change(fd, p);
	if (named_deleted(p))           /* unlinked: nobody's pre-image, unless a name kept it */
		return op != JC_META && fs.st_nlink ? kept_change(fd, p) : 0;
	/* any bytes read through the program's own descriptor: an open and
	 * close of the path would drop its POSIX locks on the file */
	jcap_read_through(fd, pend_reader);
	err = check("change", p, op, false, false, NULL);
	jcap_read_through(-1, NULL);
	return err;
}

/* P is not NULL, where a header says it may not be (and a program passes
 * one anyway): a real test, out of the compiler's sight. */
__attribute__((noinline)) static bool given(const void *p)
{
	return p != NULL;
}

#define HOOK(ret, name, params, args, fail, pre)   \
	EXPORT ret name params                     \
	{                                          \
		struct hook_ctx c;                 \
		ret r;                             \
		int err;                           \
		if (!hook_enter(&c))               \
			return REAL(name) args;    \
		err = (pre);                       \
		if (err == PRE_DONE) {             \
			shim_unlock();             \
			hook_leave(&c);            \
			return (ret)0;             \
		}                                  \
		if (err) {                         \
			shim_unlock();             \
			hook_refuse(&c, err);      \
			return fail;               \
		}                                  \
		hook_leave(&c);                    \
		r = REAL(name) args;               \
		shim_unlock();                     \
		return r;                          \
	}
#include "hooks.def"

/* The open flags of a read-only MODE that fdopen takes as fopen does ("r"
 * and at most three of b, e, m: fdopen reads four characters of a mode,
 * fopen more), or -1: another mode, fopen's own ("rx" opens with O_EXCL). */
static int fopen_read_flags(const char *m)
{
	int f = O_RDONLY;

	if (!m || m[0] != 'r' || strlen(m) > 4)
		return -1;
	for (m++; *m; m++) {
		if (*m == 'e')
			f |= O_CLOEXEC;
		else if (*m != 'b' && *m != 'm')
			return -1;
	}
	return f;
}

/* A read-only fopen in enforce mode: the judged open is the open itself
 * (open.c's open_read: one openat2, where a look with an O_PATH descriptor
 * before glibc's own open cost two more system calls; sed opens every
 * input so), and fdopen makes the stream. NULL with errno set, or the
 * stream; *DONE false: fopen itself has to open it (judged). */
static FILE *fopen_read(struct hook_ctx *c, const char *p, const char *m, int flags, bool *done)
{
	int fd = open_read_fd(AT_FDCWD, p, flags), e;
	FILE *f;

	*done = fd != -2;
	if (fd == -1) {
		hook_refuse(c, errno);
		return NULL;
	}
	if (fd == -2) {
		hook_leave(c);
		return NULL;
	}
	f = fdopen(fd, m);
	e = errno;
	if (!f)
		close(fd);
	hook_leave(c);
	if (!f)
		errno = e;
	return f;
}

/* fopen: as the table's hooks, and after it what fetched.c asks of every
 * open (a carrier's source or copy: zstd and bzip2 open theirs so) */
static FILE *fopen_hook(FILE *(*real)(const char *, const char *), const char *p, const char *m)
{
	struct hook_ctx c;
	bool done = false;
	FILE *f;
	int err, rf;

	if (!hook_enter(&c))
		return real(p, m);
	if (p && guard_active() && (rf = fopen_read_flags(m)) >= 0) {
		f = fopen_read(&c, p, m, rf, &done);
		if (!done)
			f = real(p, m);
		else if (!f)
			return NULL;
	} else {
		err = pre_fopen(AT_FDCWD, p, m);
		if (err == PRE_DONE) {
			shim_unlock();
			hook_leave(&c);
			return NULL;
		}
		if (err) {
			shim_unlock();
			hook_refuse(&c, err);
			return NULL;
		}
		hook_leave(&c);
		f = real(p, m);
		shim_unlock();
	}
	if (f && (err = fetched_opened(fileno(f), (fopen_flags(m) & O_ACCMODE) != O_RDONLY))) {
		fclose(f);
		errno = err;
		return NULL;
	}
	return f;
}

EXPORT FILE *fopen(const char *p, const char *m) { return fopen_hook(REAL(fopen), p, m); }
EXPORT FILE *fopen64(const char *p, const char *m) { return fopen_hook(REAL(fopen64), p, m); }

/* ptrace (variadic: pid, addr and data are read whether passed or not, as
 * glibc's own wrapper does): an attach is judged as a signal is. */
EXPORT long ptrace(enum __ptrace_request req, ...)
{
	struct hook_ctx c;
	va_list ap;
	pid_t pid;
	void *addr, *data;
	long r;
	int err;

	va_start(ap, req);
	pid = va_arg(ap, pid_t);
	addr = va_arg(ap, void *);
	data = va_arg(ap, void *);
	va_end(ap);
	shim_ensure();
	if (!hook_enter(&c))
		return REAL(ptrace)(req, pid, addr, data);
	if ((err = guard_ptrace(req, pid))) {
		shim_unlock();
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	r = REAL(ptrace)(req, pid, addr, data);
	shim_unlock();
	return r;
}

/* connect: judged before (the policy's [network]); a Unix socket's peer
 * after, for tmux's and screen's clients (guard_connected): a refused one
 * is shut down, so that nothing reaches the server. */
EXPORT int connect(int fd, __CONST_SOCKADDR_ARG a, socklen_t l)
{
	const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)a.__sockaddr__;
	struct hook_ctx c;
	int err, r;

	if (!hook_enter(&c))
		return REAL(connect)(fd, a, l);
	if ((err = guard_connect(a.__sockaddr__, l))) {
		hook_refuse(&c, err);
		return -1;
	}
	hook_leave(&c);
	r = REAL(connect)(fd, a, l);
	if (r == 0 && given(un) && l > sizeof(sa_family_t) && un->sun_family == AF_UNIX && un->sun_path[0]) {
		char path[sizeof(un->sun_path) + 1];
		size_t n = l - sizeof(sa_family_t) < sizeof(un->sun_path) ? l - sizeof(sa_family_t) : sizeof(un->sun_path);
		memcpy(path, un->sun_path, n);
		path[n] = 0;
		if (hook_enter(&c)) {
			if ((err = guard_connected(fd, path))) {
				shutdown(fd, SHUT_RDWR);
				hook_refuse(&c, err);
				return -1;
			}
			hook_leave(&c);
		}
	}
	return r;
}
#undef HOOK
