/*
 * fetched.c - downloads carry a mark, as a browser's carry their quarantine
 * attribute: a file a fetcher ([fetch-and-run] fetchers: curl, wget ...)
 * writes gets the extended attribute user.ftsbx.fetched (the fetcher's
 * name) as it closes the file, and so does a regular file that a fetcher's
 * standard output is redirected to (curl URL > i.sh) when the fetcher
 * exits, if it grew. An exec that would run a marked file is refused as
 * fetch-and-run (guard.c): the file as the program (chmod +x i.sh; ./i.sh),
 * as an interpreter's script (bash i.sh, python3 get.py) or as its
 * standard input (sh < i.sh); so is a program's removal or change of the
 * mark (setfattr -x), though not a copy's setting it anew (cp -a). The
 * mark goes with
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
static off_t stdout_then = -1;  /* its standard output's size when it was known as one */

/* The program's name as the exec named it (a script's own, for a
 * stand-in), else as the kernel found it (a symlink to curl): a fetcher's? */
static bool named_fetcher(const char *p)
{
	const char *base = p ? strrchr(p, '/') : NULL;

	base = base ? base + 1 : p;
	if (!base || !guard_fetcher(base))
		return false;
	size_t n = strnlen(base, sizeof(fetcher_name) - 1);
	memcpy(fetcher_name, base, n);
	fetcher_name[n] = 0;
	return true;
}

static bool is_fetcher(void)
{
	if (__builtin_expect(fetched_self < 0, 0)) {
		char exe[PATH_MAX];
		ssize_t n;
		struct stat st;

		fetched_self = 0;       /* a close while the policy is read is not a download */
		if (!named_fetcher((const char *)getauxval(AT_EXECFN))) {
			n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
			if (n <= 0)
				return false;
			exe[n] = 0;
			if (!named_fetcher(exe))
				return false;
		}
		if (fstat(1, &st) == 0 && S_ISREG(st.st_mode))
			stdout_then = st.st_size;
		fetched_self = 1;
	}
	return fetched_self;
}

/* Set around the shim's own fsetxattr of the mark. Volatile: glibc
 * declares fsetxattr a leaf, which lets the compiler drop stores it
 * thinks nothing there can see; the hook it reaches does. */
static __thread volatile bool marking __attribute__((tls_model("initial-exec")));

/* Mark FD, written by the fetcher, if it is a regular file opened to
 * write, through the shim's fsetxattr (a hook: it journals the change). */
static void mark(int fd)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		marking = true;
		(void)fsetxattr(fd, MARK, fetcher_name, strlen(fetcher_name), 0);
		marking = false;
	}
}

/* A program's setxattr (SET) or removexattr of NAME on PATH (FD when PATH
 * is NULL): 0, or the errno that refuses. Taking the mark off, or changing
 * it, would make a download runnable (setfattr -x); putting it on a file
 * that has none only makes that file unrunnable too, and is how a copy
 * keeps it: cp -a, cp --preserve=xattr, mv to another filesystem, rsync -X,
 * tar --xattrs. */
HIDDEN int fetched_xattr(const char *path, int fd, const char *name, bool set)
{
	char by[32];

	if (marking || !name || strcmp(name, MARK))
		return 0;
	if (set && !fetched_marked(path, fd, by))
		return 0;
	return guard_mark(path ? path : "(descriptor)");
}

/* FD is about to be closed (close, fclose) in a process that may be a
 * fetcher (shim.h's fetched_closing asks): what it wrote there is a
 * download. Not the shim's own closes (of the journal's files). */
HIDDEN void fetched_close_slow(int fd)
{
	if (fd >= 0 && shim_ready && !shim_busy && is_fetcher()) {
		int e = errno;
		mark(fd);
		errno = e;
	}
}

/* This process, known as a fetcher by a close before, exits: it marks the
 * regular file its standard output went to (curl URL > i.sh, >> too) if
 * that grew meanwhile: `(echo a; curl -o f URL) > s.sh` fetched nothing
 * into s.sh. The shim's own closes that follow mark nothing. */
HIDDEN void fetched_exit(void)
{
	struct stat st;
	int e = errno;

	if (shim_ready && !shim_busy && fstat(1, &st) == 0 && S_ISREG(st.st_mode) &&
	    st.st_size > (stdout_then < 0 ? 0 : stdout_then))
		mark(1);
	fetched_self = 0;
	errno = e;
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
