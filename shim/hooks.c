/*
 * hooks.c - the wrappers generated from hooks.def, and the pre-change
 * checks they call: resolve the path, keep the journal directory off
 * limits, and journal the undo record (journal/capture.c) before the real
 * call. A path the kernel will not find anyway (ENOENT, ENOTDIR) is left
 * to the real call to fail; any other failure to journal refuses the call:
 * nothing changes unjournaled.
 */
#include <string.h>
#include <unistd.h>
#include "shim.h"

/* Paths under these are not files a rewind could restore. */
static bool untracked(const char *p)
{
	return path_under(p, "/dev", 4) || path_under(p, "/proc", 5) || path_under(p, "/sys", 4);
}

static int off_limits(const char *op, const char *p)
{
	if (!path_under(p, shim.journal, shim.journal_len))
		return 0;
	return shim_refuse(op, p, NULL, NULL, "the journal directory is off limits", EACCES);
}

/* Follow a final symlink (at most 40 of them), as the call will. */
static int follow_final(char p[PATH_MAX])
{
	char t[PATH_MAX], joined[PATH_MAX];
	struct stat st;

	for (int hops = 0; hops < 40; hops++) {
		ssize_t n;
		if (lstat(p, &st) < 0 || !S_ISLNK(st.st_mode))
			return 0;
		n = readlink(p, t, sizeof(t) - 1);
		if (n < 0)
			return 0;
		t[n] = 0;
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
	}
	return -ELOOP;
}

/* Journal the change OP of the absolute path P. */
static int capture(const char *p, enum jcap_op op)
{
	struct jseg *g;
	int err;

	if (untracked(p))
		return 0;
	err = shim_segment(&g);
	if (!err)
		err = jcap_path(g, shim.txn, p, op);
	return err;
}

static int refuse_unjournaled(const char *p, int err);

static int capture_remove(const char *p)
{
	struct jseg *g;
	int err;

	if (untracked(p))
		return 0;
	err = shim_segment(&g);
	if (!err)
		err = jcap_remove(g, shim.txn, p);
	return err ? refuse_unjournaled(p, err) : 0;
}

static int refuse_unjournaled(const char *p, int err)
{
	if (err == -ENOENT || err == -ENOTDIR)
		return 0;               /* the real call fails the same way */
	shim_say("cannot journal a change of", p, -err, "refused: nothing changes unjournaled");
	return -err;
}

static int check(const char *opname, char p[PATH_MAX], enum jcap_op op, bool follow)
{
	int err = 0;

	if (follow)
		err = follow_final(p);
	if (!err && (err = off_limits(opname, p)))
		return err;
	if (!err)
		err = capture(p, op);
	return err ? refuse_unjournaled(p, err) : 0;
}

static bool writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
}

HIDDEN int pre_open(int dirfd, const char *path, int flags)
{
	char p[PATH_MAX];

	return pre_open_abs(dirfd, path, flags, p);
}

HIDDEN int pre_open_abs(int dirfd, const char *path, int flags, char p[PATH_MAX])
{
	int err = path_abs(p, dirfd, path);

	if (err)
		p[0] = 0;
	if (err)
		return writes(flags) ? refuse_unjournaled(path, err) : 0;
	if (!writes(flags) || (flags & __O_TMPFILE) == __O_TMPFILE)
		return off_limits("open", p);
	return check("open", p, (flags & O_TRUNC) ? JC_TRUNC : (flags & O_APPEND) ? JC_APPEND : JC_WRITE,
		     !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL));
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
	return pre_open(dirfd, path, fopen_flags(mode));
}

HIDDEN int pre_freopen(const char *path, const char *mode, FILE *f)
{
	int flags = fopen_flags(mode);

	if (path)
		return pre_open(AT_FDCWD, path, flags);
	if (!writes(flags) || !f)
		return 0;
	return pre_fd(fileno(f), (flags & O_TRUNC) ? JC_TRUNC : (flags & O_APPEND) ? JC_APPEND : JC_WRITE);
}

HIDDEN int pre_remove(int dirfd, const char *path, int flags)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	(void)flags;
	if (err)
		return refuse_unjournaled(path, err);
	fdcache_forget(p);
	if ((err = off_limits("remove", p)))
		return err;
	return capture_remove(p);
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
	if ((err = off_limits("rename", from)) || (err = off_limits("rename", to)))
		return err;
	fdcache_forget(from);
	fdcache_forget(to);
	if (untracked(from) && untracked(to))
		return 0;
	err = shim_segment(&g);
	if (!err)
		err = jcap_rename(g, shim.txn, from, to, flags);
	return err ? refuse_unjournaled(from, err) : 0;
}

HIDDEN int pre_create(int dirfd, const char *path)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	if (err)
		return refuse_unjournaled(path, err);
	struct jseg *g;

	if ((err = off_limits("create", p)))
		return err;
	if (untracked(p))
		return 0;
	err = shim_segment(&g);
	if (!err)
		err = jcap_create(g, shim.txn, p);
	return err ? refuse_unjournaled(p, err) : 0;
}

HIDDEN int pre_path(int dirfd, const char *path, enum jcap_op op, int follow)
{
	char p[PATH_MAX];
	int err = path_abs(p, dirfd, path);

	if (err)
		return refuse_unjournaled(path, err);
	return check("change", p, op, follow);
}

HIDDEN int pre_pathat(int dirfd, const char *path, enum jcap_op op, int atflags)
{
	if (!path || ((atflags & AT_EMPTY_PATH) && !*path))
		return pre_fd(dirfd, op);
	return pre_path(dirfd, path, op, !(atflags & AT_SYMLINK_NOFOLLOW));
}

HIDDEN int pre_fd(int fd, enum jcap_op op)
{
	char p[PATH_MAX];
	size_t n;

	if (path_fd(p, fd))
		return 0;               /* a pipe, a socket: nothing to restore */
	n = strlen(p);
	if (n > 10 && !strcmp(p + n - 10, " (deleted)"))
		return 0;               /* no name left to restore it under */
	return check("change", p, op, false);
}

#define HOOK(ret, name, params, args, fail, pre)   \
	EXPORT ret name params                     \
	{                                          \
		struct hook_ctx c;                 \
		int err;                           \
		if (!hook_enter(&c))               \
			return REAL(name) args;    \
		err = (pre);                       \
		if (err) {                         \
			hook_refuse(&c, err);      \
			return fail;               \
		}                                  \
		hook_leave(&c);                    \
		return REAL(name) args;            \
	}
#include "hooks.def"
#undef HOOK
