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
 *
 * A carrier ([fetch-and-run] carriers: cp, tar, cat, gunzip ...) passes a
 * download's bytes on into files of its own, which get the mark too: a
 * file it has open to write while it holds a marked file open to read
 * (cp's copy, tar x's members, tar c's archive, gzip's output: only the
 * copies of downloads in a `cp -r`) or while it reads its standard input
 * from a marked file or from a pipe a fetcher writes (`curl URL | tar x`);
 * its redirected standard output, if it read a download at all (`cat dl.sh
 * > x.sh`). One fgetxattr per file it opens to read, in carriers only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include "shim.h"

#define MARK "user.ftsbx.fetched"

/* Whether this process's program is a fetcher (1) or a carrier (2): -1
 * not known yet. A fork child runs the same program; an exec starts again
 * at -1. */
enum { NEITHER, FETCHER, CARRIER };
HIDDEN int fetched_self = -1;
static char fetcher_name[32];   /* a fetcher's own name; a carrier's source's mark */
static off_t stdout_then = -1;  /* its standard output's size when it was known as one */

/* A carrier's sources: the marked files it has open to read (a few: cp
 * one, tar one, cat one at a time), whether it read one at all, and the
 * inode of the pipe its standard input is (0: none) */
static int sources[8], nsources;
static bool carried;
static uint64_t stdin_pipe;
/* the files it has open to write, not marked yet (a marked source that
 * opens marks them) */
static int copies[16], ncopies;

/* The program's name as the exec named it (a script's own, for a
 * stand-in), else as the kernel found it (a symlink to curl): a fetcher's
 * or a carrier's? */
static int named(const char *p)
{
	const char *base = p ? strrchr(p, '/') : NULL;

	base = base ? base + 1 : p;
	if (!base)
		return NEITHER;
	if (guard_fetcher(base)) {
		size_t n = strnlen(base, sizeof(fetcher_name) - 1);
		memcpy(fetcher_name, base, n);
		fetcher_name[n] = 0;
		return FETCHER;
	}
	return guard_carrier(base) ? CARRIER : NEITHER;
}

/* Whether tar run as ARGV reads its archive from standard input: the
 * archive of -f (a cluster -xzf, --file=, the old style's bundle of
 * letters, `tar xzf -`, each letter with a value taking the next word) is
 * "-", or there is none and it does not create one (`curl URL | tar xz`:
 * Debian's tar reads stdin by default). */
static bool tar_reads_stdin(char *const argv[])
{
	bool create = false;
	int next = 1;           /* the next word a letter's value is */

	for (int i = 1; argv[i]; i++) {
		const char *a = argv[i];
		if (i < next)
			continue;
		if (!strcmp(a, "--"))
			break;
		if (!strncmp(a, "--file", 6) && (a[6] == '=' || !a[6]))
			return a[6] ? !strcmp(a + 7, "-") : argv[i + 1] && !strcmp(argv[i + 1], "-");
		if (!strcmp(a, "--create"))
			create = true;
		if (a[0] == '-' && a[1] == '-')
			continue;
		if (a[0] != '-' && i > 1)
			continue;       /* an operand */
		next = i + 1;
		for (const char *o = a + (a[0] == '-'); *o; o++) {
			if (*o == 'c')
				create = true;
			if (*o == 'f') {
				const char *v = a[0] == '-' && o[1] ? o + 1 : argv[next];
				return v && !strcmp(v, "-");
			}
			if (strchr("bCgHKLNTVX", *o)) {
				if (a[0] == '-' && o[1])
					break;          /* -Cdir: the rest is its value */
				next++;
			}
		}
	}
	return !create;
}

/* Whether a carrier run as ARGV (PROG: its program, NULL for ARGV[0])
 * reads its standard input: tee and cpio always; tar as tar_reads_stdin
 * says; dd without if=; the others with no file operand, or "-" (cat,
 * gunzip -c). A cp in a loop that reads a file line by line (`while read
 * l; do cp ...; done < urls`) does not. */
HIDDEN bool fetched_reads_stdin(const char *prog, char *const argv[])
{
	const char *base;
	bool operand = false;

	if (!argv || !argv[0])
		return false;
	prog = prog ? prog : argv[0];
	base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	if (!strcmp(base, "tee") || !strcmp(base, "cpio"))
		return true;
	if (!strcmp(base, "tar") || !strcmp(base, "bsdtar"))
		return tar_reads_stdin(argv);
	if (!strcmp(base, "tr"))
		return true;            /* its operands are sets */
	/* a filter's first operand is its script or pattern, unless an
	 * option gave it (-e, -f); the short options that take a value, in a
	 * group (-n5, -d,) or the next word */
	static const struct { const char *name, *script, *valued; } filters[] = {
		{ "sed", "ef", "efl" }, { "grep", "ef", "efmABCdD" }, { "egrep", "ef", "efmABCdD" },
		{ "fgrep", "ef", "efmABCdD" }, { "awk", "f", "fvF" }, { "gawk", "f", "fvF" }, { "mawk", "f", "fvF" },
		{ "nawk", "f", "fvF" }, { "cut", NULL, "dfbc" }, { "sort", NULL, "tkoST" }, { "uniq", NULL, "fsw" },
		{ "head", NULL, "nc" }, { "tail", NULL, "ncs" }, { "iconv", NULL, "fto" }, { "base64", NULL, "w" },
		{ "xxd", NULL, "cglosn" }, { "fold", NULL, "w" }, { "tac", NULL, "s" },
	};
	/* long options that take the next word as their value */
	static const char long_valued[] = " expression file regexp max-count after-context before-context context "
					  "delimiter fields bytes characters output-delimiter key field-separator "
					  "output buffer-size temporary-directory parallel from-code to-code lines "
					  "wrap width skip-fields skip-chars check-chars separator sleep-interval pid "
					  "label include exclude exclude-dir directories devices cols len seek ";
	const char *script = NULL, *valued = "";
	for (size_t k = 0; k < sizeof(filters) / sizeof(filters[0]); k++)
		if (!strcmp(base, filters[k].name))
			script = filters[k].script, valued = filters[k].valued;
	bool dd = !strcmp(base, "dd"), given = false;
	for (int i = 1; argv[i]; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-"))
			return true;
		if (dd) {
			operand |= !strncmp(a, "if=", 3);
			continue;
		}
		if (!strcmp(a, "--")) {
			operand |= argv[i + 1] && (!script || given || argv[i + 2]);
			break;
		}
		if (a[0] == '-' && a[1] && a[1] != '-') {
			for (const char *o = a + 1; *o; o++) {
				given |= script && strchr(script, *o);
				if (strchr(valued, *o)) {
					if (!o[1] && argv[i + 1])
						i++;    /* its value, the next word */
					break;          /* the rest is its value */
				}
			}
			continue;
		}
		if (a[0] == '-') {      /* --long, --long=value, --long value */
			size_t n = strcspn(a + 2, "=");
			bool known = false;
			for (const char *w = strstr(long_valued, " "); w && w[1]; w = strchr(w + 1, ' '))
				if (!strncmp(w + 1, a + 2, n) && w[1 + n] == ' ')
					known = true;
			given |= script && (!strncmp(a, "--expression", 12) || !strncmp(a, "--file", 6) ||
					    !strncmp(a, "--regexp", 8));
			if (known && !a[2 + n] && argv[i + 1])
				i++;
			continue;
		}
		if (script && !given) {
			given = true;   /* the script itself */
			continue;
		}
		operand = true;
	}
	return !operand;
}

/* A carrier's standard input, if it reads it: a download (tee x.sh <
 * dl.sh) is a source it holds open; a pipe is remembered, to be looked for
 * among fetchers' ones when the carrier writes (curl starts after tar
 * maybe, but before tar has any of its bytes). */
static void stdin_of_carrier(const char *prog)
{
	struct stat st;

	/* (PROG: the program's name that made it a carrier, as the kernel
	 * keeps it: tee writes over its argv[0], and a symlink t to tee is tee) */
	if (!fetched_reads_stdin(prog, shim.argv) || fstat(0, &st) < 0)
		return;
	if (S_ISFIFO(st.st_mode))
		stdin_pipe = (uint64_t)st.st_ino;
	else if (S_ISREG(st.st_mode) && fetched_marked(NULL, 0, fetcher_name))
		sources[nsources++] = 0, carried = true;
}

/* Whether the kernel's name of the program (/proc/self/exe) may end in
 * another name than EXECFN, the path the exec was given: when that is a
 * symlink (to curl: readlink of it succeeds), a script (the kernel ran its
 * interpreter, maybe through further scripts: state.c saw the path among
 * the arguments), or not a path that can be looked at (none, relative to a
 * directory since left, /dev/fd/N of fexecve). Else the readlink of
 * /proc/self/exe is not needed: the first look into /proc costs a new
 * process 50-150 us here, and every program that closes or opens a file
 * got here. errno is kept: this runs inside the hooks of calls that
 * succeed. */
static bool exe_differs(const char *execfn)
{
	char one;
	int e = errno;
	bool differs;

	if (shim.execfn_in_argv || !execfn || execfn[0] != '/' || !strncmp(execfn, "/dev/fd/", 8) ||
	    !strncmp(execfn, "/proc/", 6))
		return true;
	differs = readlink(execfn, &one, 1) >= 0 || errno != EINVAL;
	errno = e;
	return differs;
}

static int kind(void)
{
	if (__builtin_expect(fetched_self < 0, 0)) {
		const char *execfn = (const char *)getauxval(AT_EXECFN);
		char exe[PATH_MAX];
		ssize_t n;
		struct stat st;
		int k;

		if (!shim.argv)         /* a library's constructor before ours (libselinux's) */
			return NEITHER;
		fetched_self = NEITHER;  /* a close while the policy is read is not a download */
		const char *prog = execfn;
		k = named(execfn);
		if (k == NEITHER && exe_differs(execfn)) {
			n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
			if (n <= 0)
				return NEITHER;
			exe[n] = 0;
			k = named(prog = exe);
		}
		if (k == NEITHER)
			return NEITHER;
		if (fstat(1, &st) == 0 && S_ISREG(st.st_mode))
			stdout_then = st.st_size;
		if (k == CARRIER)
			stdin_of_carrier(prog);
		fetched_self = k;
	}
	return fetched_self;
}

/* Set around the shim's own fsetxattr of the mark. Volatile: glibc
 * declares fsetxattr a leaf, which lets the compiler drop stores it
 * thinks nothing there can see; the hook it reaches does. */
static __thread volatile bool marking __attribute__((tls_model("initial-exec")));

/* Mark FD, written by the fetcher (or a carrier of a download), if it is a
 * regular file opened to write, through the shim's fsetxattr (a hook: it
 * journals the change). */
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
 * is NULL): 0, or the errno that refuses. Taking the mark off would make a
 * download runnable (setfattr -x); setting it, to any value, leaves the
 * file marked (fetched_marked asks only whether it is there), and is how a
 * copy keeps it: cp -a, cp --preserve=xattr, mv to another filesystem,
 * rsync -X, tar --xattrs, again over an earlier copy too. */
HIDDEN int fetched_xattr(const char *path, int fd, const char *name, bool set)
{
	(void)fd;
	if (marking || set || !name || strcmp(name, MARK))
		return 0;
	return guard_mark(path ? path : "(descriptor)");
}

/* Whether the carrier writes a download now: it holds one open, or its
 * standard input comes from a fetcher's pipe. */
static bool carrying(void)
{
	if (nsources)
		return true;
	if (stdin_pipe && guard_fetch_pipe(stdin_pipe)) {
		snprintf(fetcher_name, sizeof(fetcher_name), "a fetcher's pipe");
		sources[nsources++] = 0;        /* for good: the pipe stays */
		carried = true;
	}
	return nsources;
}

/* FD is about to be closed (close, fclose) in a process that may be a
 * fetcher or a carrier (shim.h's fetched_closing asks): what a fetcher
 * wrote there is a download, and what a carrier of one wrote. Not the
 * shim's own closes (of the journal's files), nor a vfork child's. */
HIDDEN void fetched_close_slow(int fd)
{
	int e = errno, k;

	if (fd < 0 || !shim_ready || shim_busy || txn_vfork_child())
		return;
	k = kind();
	if (k == CARRIER) {
		for (int i = 0; i < ncopies; i++)
			if (copies[i] == fd)
				copies[i] = copies[--ncopies];
		for (int i = 0; i < nsources; i++)
			if (sources[i] == fd) {         /* a source it is done with */
				sources[i] = sources[--nsources];
				errno = e;
				return;
			}
	}
	/* its standard output: whatever it read of a download went there */
	if (k == FETCHER || (k == CARRIER && (carrying() || (fd == 1 && carried))))
		mark(fd);
	errno = e;
}

/* FD was opened in a process that may be a carrier: to WRITE, a file it
 * makes while it holds a download is marked at once (cp, gzip, tar x: its
 * source is open; so only the copies of downloads are, in a cp -r); to
 * read, a download is a source, and its standard output, if a pipe, one
 * that fetched code may flow through (guard_carried_pipe). 0, or the errno
 * that refuses the open (the caller closes FD). */
HIDDEN int fetched_opened_slow(int fd, bool writes)
{
	int e = errno, err = 0;
	char by[32];
	struct stat st;

	if (fd < 0 || !shim_ready || shim_busy || txn_vfork_child() || kind() != CARRIER)
		return 0;
	if (writes) {
		if (carrying())
			mark(fd);
		else if (ncopies < (int)(sizeof(copies) / sizeof(copies[0])))
			copies[ncopies++] = fd;
	} else if (nsources < (int)(sizeof(sources) / sizeof(sources[0])) && fetched_marked(NULL, fd, by)) {
		if (fstat(1, &st) == 0 && S_ISFIFO(st.st_mode)) {
			char path[PATH_MAX];
			if (path_fd(path, fd))
				snprintf(path, sizeof(path), "a download");
			err = guard_carried_pipe((uint64_t)st.st_ino, path, by);
		}
		if (!err) {
			sources[nsources++] = fd;
			carried = true;
			memcpy(fetcher_name, by, sizeof(by));
			while (ncopies)         /* what it writes now has the download in it */
				mark(copies[--ncopies]);
		}
	}
	errno = err ? err : e;
	return err;
}

/* This process, known as a fetcher by a close before (or as a carrier
 * that read a download), exits: it marks the regular file its standard
 * output went to (curl URL > i.sh, >> too; cat dl.sh > x.sh) if that grew
 * meanwhile: `(echo a; curl -o f URL) > s.sh` fetched nothing into s.sh.
 * The shim's own closes that follow mark nothing. */
HIDDEN void fetched_exit(void)
{
	struct stat st;
	int e = errno;

	if (shim_ready && !shim_busy && fstat(1, &st) == 0 && S_ISREG(st.st_mode) &&
	    st.st_size > (stdout_then < 0 ? 0 : stdout_then) && (fetched_self == FETCHER || carrying() || carried))
		mark(1);
	fetched_self = NEITHER;
	errno = e;
}

/* Whether PATH (FD when PATH is NULL) is marked; BY: who fetched it. A
 * mark of any value is one (a program may set its own: a longer one than
 * BY holds too). */
HIDDEN bool fetched_marked(const char *path, int fd, char by[32])
{
	int e = errno;
#ifdef SHIM_RAW   /* (an exec's check in a shell's fork child: shim.h) */
	ssize_t n = path ? shim_raw6(SYS_getxattr, (long)path, (long)MARK, (long)by, 31, 0, 0)
			 : fgetxattr(fd, MARK, by, 31);
	if (n < 0 && !path)
		n = -errno;
	bool marked = n >= 0 || n == -ERANGE;
#else
	ssize_t n = path ? getxattr(path, MARK, by, 31) : fgetxattr(fd, MARK, by, 31);
	bool marked = n >= 0 || errno == ERANGE;
#endif

	if (n <= 0)     /* no snprintf: three pages of libc in a fork child */
		n = marked ? (ssize_t)strlen(strcpy(by, "a fetcher")) : 0;
	by[n] = 0;
	errno = e;
	return marked;
}
