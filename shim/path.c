/*
 * path.c - absolute paths without a system call in the common case: a
 * relative path is joined to the cached cwd (kept by the chdir and fchdir
 * hooks) or to its dirfd's path, then normalised lexically ("." and "//").
 * ".." is resolved by the kernel instead (open O_PATH, read the link in
 * /proc/self/fd), since "link/.." is not the link's directory. The common
 * path is normal already: one pass (normal_len, 16 bytes at a time) says
 * so, and it is then taken as it is (absolute) or after the cwd (relative).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include "shim.h"

/* Two buffers and an index flipped after a write, so a reader in another
 * thread never sees a half-written cwd (a chdir race at worst gives the
 * previous one, as the kernel could have too). Each with its length, so
 * that a relative path is joined to it with two copies. */
static char cwd_buf[2][PATH_MAX];
static size_t cwd_len[2];
/* Why the cwd is unknown: ENOENT (removed: a relative path fails the same
 * way), or ENAMETOOLONG (deeper than PATH_MAX: no rule can judge, no record
 * can name what is under it, so a relative path there is refused). */
static int cwd_err[2];
static int cwd_cur = -1;        /* -1: not read yet (read at first need) */
/* The session's namespace generation + 1 when the cwd was read (0: no
 * session open then). Another process may rename a directory above this
 * one's cwd (bash's `mv ../d ../e` from inside d): every such rename bumps
 * the generation, before and after it (hooks.c), and a relative path then
 * reads the cwd again instead of joining it to a name that is gone. */
static uint64_t cwd_gen;
/* Set for good (until exec) where a thread or a child in this memory may
 * have a working directory of its own (fdguard.c's parting): a relative
 * path then asks the kernel each time. */
static bool cwd_parted;

HIDDEN void cwd_distrust(void)
{
	__atomic_store_n(&cwd_parted, true, __ATOMIC_SEQ_CST);
}

static uint64_t ns_gen(void)
{
	return shim.session_open ? __atomic_load_n(&shim.s.ctr[3], __ATOMIC_ACQUIRE) + 1 : 0;
}

/* Read again when never read, or when a directory may have moved since
 * (not in a vfork child: the cache is its parent's). */
static void cwd_check(void)
{
	if (__atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE) < 0 || __atomic_load_n(&cwd_parted, __ATOMIC_ACQUIRE))
		cwd_refresh();
	else if (shim.session_open && __atomic_load_n(&cwd_gen, __ATOMIC_RELAXED) != ns_gen() &&
		 !txn_vfork_child())
		cwd_refresh();
}

/* Why getcwd failed, as a relative path would: too deep, or removed. */
static int cwd_errno(void)
{
	return errno == ENAMETOOLONG || errno == ERANGE ? ENAMETOOLONG : ENOENT;
}

HIDDEN void cwd_refresh(void)
{
	int next = __atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE) != 0 ? 0 : 1;

	__atomic_store_n(&cwd_gen, ns_gen(), __ATOMIC_RELAXED);
	cwd_err[next] = 0;
	if (!getcwd(cwd_buf[next], PATH_MAX)) {
		cwd_err[next] = cwd_errno();
		cwd_buf[next][0] = 0;
	}
	cwd_len[next] = strlen(cwd_buf[next]);
	__atomic_store_n(&cwd_cur, next, __ATOMIC_RELEASE);
}

/* The cached cwd (read now if never read), or NULL. */
HIDDEN const char *cwd_get(void)
{
	cwd_check();
	const char *c = cwd_buf[__atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE)];
	return *c ? c : NULL;
}

HIDDEN bool path_under(const char *path, const char *dir, size_t dirlen)
{
	return dirlen && !strncmp(path, dir, dirlen) && (path[dirlen] == '/' || path[dirlen] == 0);
}

/*
 * Append PATH to the N bytes of OUT (a normalised absolute directory, or
 * nothing for the root), one pass: "." components and repeated or
 * trailing slashes are dropped, ".." is kept and reported in *DOTDOT.
 * Returns the new length or -ENAMETOOLONG.
 */
static ssize_t append_normal(char out[PATH_MAX], size_t n, const char *path, bool *dotdot)
{
	const char *r = path;

	/* byte by byte: components are short, a call per one costs more */
	while (*r) {
		if (*r == '/') {
			r++;
			continue;
		}
		if (r[0] == '.' && (r[1] == '/' || !r[1])) {
			r++;
			continue;
		}
		if (r[0] == '.' && r[1] == '.' && (r[2] == '/' || !r[2]))
			*dotdot = true;
		if (n + 2 > PATH_MAX)
			return -ENAMETOOLONG;
		out[n++] = '/';
		while (*r && *r != '/') {
			if (n + 1 >= PATH_MAX)
				return -ENAMETOOLONG;
			out[n++] = *r++;
		}
	}
	if (!n)
		out[n++] = '/';
	out[n] = 0;
	return (ssize_t)n;
}

/* P[J] is '.' at the start of a component of P[0..N): is it "." or ".."? */
static inline bool dot_component(const char *p, size_t j, size_t n)
{
	return j + 1 == n || p[j + 1] == '/' || (p[j + 1] == '.' && (j + 2 == n || p[j + 2] == '/'));
}

/*
 * The length of PATH when it is normal already (the common case: no empty,
 * "." or ".." component, no trailing slash, not empty), so that it is
 * taken with one copy; -1 when append_normal must rewrite it. Where SSE2
 * is there, 16 bytes at a time: the slashes and dots of a chunk as two
 * masks, a bit per byte, and only a dot after a slash looked at (".git" or
 * ".cache" is normal). Reads no byte past PATH's end.
 */
HOT static ssize_t normal_len(const char *p)
{
	size_t n = strlen(p), at = 0;

	if (!n || (n > 1 && p[n - 1] == '/') || (p[0] == '.' && dot_component(p, 0, n)))
		return -1;
#ifdef __SSE2__
	if (n >= 16) {
		const __m128i slash = _mm_set1_epi8('/'), dot = _mm_set1_epi8('.');
		unsigned keep = ~0u, before = 0;        /* the bytes not seen yet; P[AT - 1] is '/' */

		for (;;) {
			__m128i c = _mm_loadu_si128((const void *)(p + at));
			unsigned sl = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(c, slash));
			unsigned after = (sl << 1 | before) & keep;     /* bit Q: P[AT + Q - 1] is '/' */
			if (after & sl)
				return -1;      /* "//" */
			for (unsigned m = after & (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(c, dot)); m; m &= m - 1)
				if (dot_component(p, at + (size_t)__builtin_ctz(m), n))
					return -1;
			if (n - at <= 16)
				return (ssize_t)n;
			/* the next 16 bytes, or the last 16 without the ones seen */
			size_t next = n - at >= 32 ? at + 16 : n - 16;
			keep = ~0u << (at + 16 - next);
			before = sl >> (next - 1 - at) & 1;
			at = next;
		}
	}
	if (n > 8) {
		/* 9 to 15 bytes (/dev/null, /etc/passwd): the first 8 and the
		 * last 8 as one chunk; lane Q is P[Q] below 8, P[N - 16 + Q]
		 * from 8 on. Lane 8's byte, P[N - 8], is lane N - 8's too, whose
		 * byte before is in the chunk: lane 8 is left out. */
		const __m128i slash = _mm_set1_epi8('/'), dot = _mm_set1_epi8('.');
		uint64_t lo, hi;

		memcpy(&lo, p, 8);
		memcpy(&hi, p + n - 8, 8);
		__m128i c = _mm_set_epi64x((long long)hi, (long long)lo);
		unsigned sl = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(c, slash));
		unsigned after = sl << 1 & ~0x100u;
		if (after & sl)
			return -1;      /* "//" */
		for (unsigned m = after & (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(c, dot)); m; m &= m - 1) {
			unsigned q = (unsigned)__builtin_ctz(m);
			if (dot_component(p, q < 8 ? q : n - 16 + q, n))
				return -1;
		}
		return (ssize_t)n;
	}
#endif
	for (size_t s = 1; s < n; s++)
		if (p[s - 1] == '/' && (p[s] == '/' || (p[s] == '.' && dot_component(p, s, n))))
			return -1;
	return (ssize_t)n;
}

/*
 * The paths of descriptors this process opened through a hook (directories
 * and files opened for writing), so that the *at and f* calls on them need
 * no readlink of /proc/self/fd and no other system call: an rm -rf's
 * unlinkat through its directory's descriptor costs an lstat and a rename.
 *
 * An entry is right as long as its number names the file it was opened on,
 * so it is dropped wherever a descriptor can be closed or replaced through
 * the C library: close, dup2, dup3, close_range, closefrom, glibc's exported
 * __close and __dup2, and the calls that close one inside libc, where no
 * close hook sees it: closedir (of fdopendir), fclose, _IO_fclose, pclose,
 * endmntent and fcloseall (of an fdopen'd stream), libio's exported insides
 * (_IO_proc_close, _IO_file_close, _IO_file_close_it, _IO_file_finish),
 * freopen, mq_close, daemon and login_tty (their dup2 onto 0-2), syscall()
 * of close, dup2, dup3 and close_range (fdguard.c), each also found by
 * dlsym (dlsym.c). A number glibc reuses for its own open (fopen's,
 * opendir's) was dropped when it was closed, and is looked up in /proc
 * (hostile/fdreuse.c). A vfork child, whose memory is its parent's but
 * whose descriptor table is its own, only drops entries.
 *
 * Where this memory and the descriptor table part (clone or __clone with
 * CLONE_VM but not CLONE_FILES or the other way round, unshare(CLONE_FILES),
 * close_range(CLOSE_RANGE_UNSHARE), and their syscall() forms, clone3 and
 * vfork by syscall()), one side's closes and opens are not the other's:
 * from then on every entry is checked with an fstat against the inode it
 * was opened on before use (fdcache_distrust), as one taken before is read
 * again. What is left is a descriptor closed by a raw system call (inline
 * assembly, io_uring), which changes files past every hook anyway. (Checking
 * each use with an fstat cost an rm -rf of 10,000 files one system call per
 * file, a tenth of its time here.)
 *
 * Entries are also dropped when this process removes or renames their path
 * or a directory above it. An entry taken before the session's namespace
 * generation moved on (another process renamed a directory: maybe this one,
 * or one above it) is read again from /proc. Each entry is a seqlock: a
 * reader never takes a half-written path.
 */
#define FDC_N 64
static struct fdc {
	unsigned gen;          /* odd while being written; 0: never used */
	int fd;                /* -1: empty */
	bool known;            /* dev and ino were read (the cache was distrusted) */
	bool kill;             /* a drop found the entry being written: empty it */
	dev_t dev;
	ino_t ino;
	size_t len;            /* of its path, in fdc_path */
	uint64_t ns;           /* ns_gen() when the path was taken */
} fdc[FDC_N];
/* The paths apart, so that the entries a close looks at (fd % FDC_N) lie
 * in 2 KiB, not one per page. */
static char fdc_path[FDC_N][PATH_MAX];
/* Bit I: slot I has held a path at some time. Bits are set before the
 * entry is written and never cleared (no race loses one), so a
 * forget looks at the slots ever used, not at all 64: a program uses a few
 * descriptor numbers over and over. */
static uint64_t fdc_used;
_Static_assert(FDC_N <= 64, "fdc_used has a bit per slot");
/* Set for good (until exec) where the descriptor table and this memory part. */
static bool fdc_distrusted;

HIDDEN void fdcache_distrust(void)
{
	__atomic_store_n(&fdc_distrusted, true, __ATOMIC_SEQ_CST);
}

/* P: the path of FD (with its inode in ST when the cache is distrusted),
 * or NULL: the entry emptied. A writer takes the entry by making its
 * generation odd; one that finds it taken (another thread, or the code a
 * signal handler interrupted) does not wait: a put gives up, a drop leaves
 * word that the entry be emptied when the other is done. */
static void fdc_write(struct fdc *e, int fd, const struct stat *st, const char *p)
{
	unsigned g = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE);

	do {
		if (g & 1) {
			if (!p)
				__atomic_store_n(&e->kill, true, __ATOMIC_RELEASE);
			return;
		}
	} while (!__atomic_compare_exchange_n(&e->gen, &g, g + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	if (p)
		__atomic_or_fetch(&fdc_used, 1ull << (e - fdc), __ATOMIC_ACQ_REL);
	e->fd = fd;
	if (p) {
		size_t n = strnlen(p, PATH_MAX - 1);
		e->known = st != NULL;
		if (st) {
			e->dev = st->st_dev;
			e->ino = st->st_ino;
		}
		e->len = n;
		e->ns = ns_gen();
		memcpy(fdc_path[e - fdc], p, n);
		fdc_path[e - fdc][n] = 0;
	}
	if (__atomic_exchange_n(&e->kill, false, __ATOMIC_ACQ_REL))
		e->fd = -1;
	__atomic_store_n(&e->gen, g + 2, __ATOMIC_RELEASE);
}

HIDDEN bool fdcache_distrusted(void)
{
	return __atomic_load_n(&fdc_distrusted, __ATOMIC_ACQUIRE);
}

HIDDEN void fdcache_put(int fd, const char *p)
{
	struct stat st;

	if (fd < 0 || txn_vfork_child())
		return;
	if (!__atomic_load_n(&fdc_distrusted, __ATOMIC_ACQUIRE))
		fdc_write(&fdc[fd % FDC_N], fd, NULL, p);
	else if (fstat(fd, &st) == 0)
		fdc_write(&fdc[fd % FDC_N], fd, &st, p);
}

/* An fd lives only in slot fd % FDC_N: a short range looks at its own
 * slots, a long one at every slot. */
HIDDEN void fdcache_drop_range(unsigned lo, unsigned hi)
{
	bool all = hi - lo >= FDC_N;

	for (unsigned i = all ? 0 : lo % FDC_N, n = all ? FDC_N : hi - lo + 1; n--; i = (i + 1) % FDC_N) {
		int fd = __atomic_load_n(&fdc[i].fd, __ATOMIC_RELAXED);
		if (fd >= 0 && fdc[i].gen && (unsigned)fd >= lo && (unsigned)fd <= hi)
			fdc_write(&fdc[i], -1, NULL, NULL);
	}
}

/* A close costs a load and a compare: the slot of FD holds another fd,
 * or none, nearly always. */
HOT HIDDEN void fdcache_drop(int fd)
{
	struct fdc *e = &fdc[(unsigned)fd % FDC_N];

	if (fd >= 0 && __atomic_load_n(&e->fd, __ATOMIC_RELAXED) == fd && e->gen)
		fdc_write(e, -1, NULL, NULL);
}

/* Forget every entry for PATH or below it (it is being removed or renamed). */
HIDDEN void fdcache_forget(const char *path)
{
	size_t n = strlen(path);

	for (uint64_t used = __atomic_load_n(&fdc_used, __ATOMIC_ACQUIRE); used; used &= used - 1) {
		int i = __builtin_ctzll(used);
		if (fdc[i].gen && fdc[i].fd >= 0 && path_under(fdc_path[i], path, n))
			fdc_write(&fdc[i], -1, NULL, NULL);
	}
}

HIDDEN bool path_fd_cached(int fd, char out[PATH_MAX])
{
	struct fdc *e = &fdc[(unsigned)fd % FDC_N];
	unsigned g = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE);
	struct stat st;
	size_t n;
	dev_t dev;
	ino_t ino;
	bool known;

	if (!g || (g & 1) || e->fd != fd)
		return false;
	known = e->known;
	dev = e->dev;
	ino = e->ino;
	if (shim.session_open && e->ns != ns_gen())
		return false;   /* a directory moved since: its path is read again */
	n = e->len < PATH_MAX ? e->len : PATH_MAX - 1;   /* a torn read stays in bounds */
	memcpy(out, fdc_path[e - fdc], n);
	out[n] = 0;
	if (__atomic_load_n(&e->gen, __ATOMIC_ACQUIRE) != g || e->fd != fd)
		return false;
	if (!__atomic_load_n(&fdc_distrusted, __ATOMIC_ACQUIRE))
		return true;
	return known && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* FRESH: read the link even where the cache has an entry (another
 * process may have moved the file since, which no generation here saw). */
HIDDEN int path_fd_read(char out[PATH_MAX], int fd, bool fresh)
{
	char proc[32];
	ssize_t n;

	if (!fresh && path_fd_cached(fd, out))
		return 0;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, out, PATH_MAX - 1);
	if (n < 0)
		return -errno;
	out[n] = 0;
	if (out[0] != '/')
		return -ENOENT;        /* a pipe, socket or anonymous inode */
	if (__atomic_load_n(&fdc[(unsigned)fd % FDC_N].fd, __ATOMIC_RELAXED) == fd && !txn_vfork_child())
		fdcache_put(fd, out);   /* its entry was stale: the path as it is now */
	return 0;
}

HIDDEN int path_fd(char out[PATH_MAX], int fd)
{
	return path_fd_read(out, fd, false);
}

/* Resolve the directory part of P (which holds "..") through the kernel. */
static int resolve_dotdot(char out[PATH_MAX])
{
	char dir[PATH_MAX], *slash = strrchr(out, '/');
	const char *base = slash + 1;
	int fd, err;

	if (!strcmp(base, "..") || !strcmp(base, ".")) {
		snprintf(dir, sizeof(dir), "%s", out);
		base = "";
	} else {
		size_t n = (size_t)(slash - out);
		memcpy(dir, out, n);
		dir[n] = 0;
		if (!n)
			strcpy(dir, "/");
	}
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char b[NAME_MAX + 1];
	snprintf(b, sizeof(b), "%s", base);
	err = path_fd(out, fd);
	close(fd);
	if (err)
		return err;
	if (*b && strlen(out) + strlen(b) + 2 > PATH_MAX)
		return -ENAMETOOLONG;
	if (*b) {
		if (strcmp(out, "/"))
			strcat(out, "/");
		strcat(out, b);
	}
	return 0;
}

/*
 * The absolute path of PATH (relative to DIRFD): in *ABS, which is PATH
 * itself when it is absolute and normal already (the common case of a
 * read: no copy), else OUT. 0 or -errno.
 */
HOT HIDDEN int path_abs_ref(char out[PATH_MAX], int dirfd, const char *path, const char **abs)
{
	bool dotdot = false;
	size_t n = 0;
	ssize_t r, len;

	*abs = out;
	if (!path)
		return -EFAULT;
	len = normal_len(path);
	if (path[0] == '/') {
		if (len >= PATH_MAX)
			return -ENAMETOOLONG;
		if (len >= 0) {
			*abs = path;
			return 0;
		}
	} else {
		if (dirfd == AT_FDCWD && __atomic_load_n(&cwd_parted, __ATOMIC_ACQUIRE)) {
			/* this thread's own, not the one another thread read */
			if (!getcwd(out, PATH_MAX))
				return -cwd_errno();
			n = strlen(out);
		} else if (dirfd == AT_FDCWD) {
			cwd_check();
			int i = __atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE);
			if (!cwd_buf[i][0])
				return cwd_err[i] ? -cwd_err[i] : -ENOENT;
			n = cwd_len[i];
			memcpy(out, cwd_buf[i], n + 1);
		} else {
			int err = path_fd(out, dirfd);
			if (err)
				return err == -ENOENT ? -EBADF : err;
			n = strlen(out);
		}
		/* the kernel's own name of a directory: absolute, normalised */
		if (n == 1)
			n = 0;
		if (len >= 0) {
			if (n + 1 + (size_t)len >= PATH_MAX)
				return -ENAMETOOLONG;
			out[n] = '/';
			memcpy(out + n + 1, path, (size_t)len + 1);
			return 0;
		}
	}
	r = append_normal(out, n, path, &dotdot);
	if (r < 0)
		return (int)r;
	return dotdot ? resolve_dotdot(out) : 0;
}

HIDDEN int path_abs(char out[PATH_MAX], int dirfd, const char *path)
{
	const char *abs;
	int err = path_abs_ref(out, dirfd, path, &abs);

	if (!err && abs != out)
		memcpy(out, abs, strlen(abs) + 1);      /* less than PATH_MAX */
	return err;
}

EXPORT int chdir(const char *p)
{
	shim_ensure();
	int r = REAL(chdir)(p);

	/* not in a vfork child (its guard is up): the cache is its parent's */
	if (r == 0 && shim_ready && !shim_busy) {
		int e = errno;
		cwd_refresh();
		errno = e;
	}
	return r;
}

EXPORT int fchdir(int fd)
{
	shim_ensure();
	int r = REAL(fchdir)(fd);

	if (r == 0 && shim_ready && !shim_busy) {
		int e = errno;
		cwd_refresh();
		errno = e;
	}
	return r;
}
