/*
 * fetched.c - downloads carry a mark, as a browser's carry their quarantine
 * attribute: a file a fetcher ([fetch-and-run] fetchers: curl, wget ...)
 * writes gets the extended attribute user.ftsbx.fetched (the fetcher's
 * name) as it closes the file, and so does a regular file that a fetcher's
 * standard output is redirected to (curl URL > i.sh), when the fetcher
 * starts and again when it exits. An exec that would
 * run a marked file is refused as fetch-and-run (guard.c): the file as the
 * program (chmod +x i.sh; ./i.sh), as an interpreter's script (bash i.sh,
 * python3 get.py) or as its standard input (sh < i.sh). The mark goes with
 * the inode, through a rename and into later tool calls, which no look at
 * one command line sees: `curl -o i.sh URL` in one tool call, `bash i.sh`
 * in the next. Each mark is journaled as a change of the file's attributes
 * (a file made or truncated for the download has its whole pre-image in
 * the journal already), so a rewind takes it away with the download.
 * Where the filesystem keeps no user xattrs no mark is made, and the
 * checks of whole command lines remain (policy/shell.c).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include "shim.h"

#define MARK "user.ftsbx.fetched"

/* Whether this process's program is a fetcher: -1 not known yet. A fork
 * child runs the same program; an exec starts again at -1. */
HIDDEN int fetched_self = -1;
static char fetcher_name[32];

static bool is_fetcher(void)
{
	if (__builtin_expect(fetched_self < 0, 0)) {
		const char *fn = (const char *)getauxval(AT_EXECFN), *base = fn ? strrchr(fn, '/') : NULL;
		base = base ? base + 1 : fn;
		fetched_self = 0;       /* a close while the policy is read is not a download */
		if (base && guard_fetcher(base)) {
			snprintf(fetcher_name, sizeof(fetcher_name), "%s", base);
			fetched_self = 1;
		}
	}
	return fetched_self;
}

/* Mark FD, written by NAME, if it is a regular file opened to write:
 * through the shim's fsetxattr (a hook, which journals the change), or
 * from inside a hook (the exec's), with its pre-image journaled here. */
static void mark(int fd, const char *name, bool in_hook)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL), err;

	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	if (!in_hook) {
		(void)fsetxattr(fd, MARK, name, strlen(name), 0);
		return;
	}
	/* made or truncated for the fetcher: its pre-image is in the journal;
	 * appended to: its metadata now (a vfork child writes no record) */
	if (fl & O_APPEND) {
		if (txn_vfork_child())
			return;
		err = pre_fd(fd, JC_META);
		shim_unlock();
		if (err)
			return;
	}
	(void)REAL(fsetxattr)(fd, MARK, name, strlen(name), 0);
}

/* FD is about to be closed (close, fclose) in a process that may be a
 * fetcher (shim.h's fetched_closing asks): what it wrote there is a
 * download. */
HIDDEN void fetched_close_slow(int fd)
{
	if (fd >= 0 && shim_ready && is_fetcher()) {
		int e = errno;
		mark(fd, fetcher_name, false);
		errno = e;
	}
}

/* A fetcher NAME is about to be run with its standard output on this
 * process's descriptor 1. */
HIDDEN void fetched_stdout(const char *name)
{
	int e = errno;

	mark(1, name, true);
	errno = e;
}

/* This process exits: a fetcher (known as one by a close before) marks
 * what its standard output went to, appended to as well (curl URL >>
 * i.sh). Others are not asked now: the policy is not read for that. */
HIDDEN void fetched_exit(void)
{
	if (fetched_self == 1 && shim_ready) {
		int e = errno;
		mark(1, fetcher_name, false);
		errno = e;
	}
}

/* Whether PATH (FD when PATH is NULL) is marked; BY: who fetched it. */
HIDDEN bool fetched_marked(const char *path, int fd, char by[32])
{
	int e = errno;
	ssize_t n = path ? getxattr(path, MARK, by, 31) : fgetxattr(fd, MARK, by, 31);

	errno = e;
	if (n < 0)
		return false;
	by[n] = 0;
	return true;
}
