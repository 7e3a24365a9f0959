/*
 * undo.c - undo one journal record against the filesystem (jundo). Each
 * record type has one undoer; all of them end in restore_meta(), which puts
 * back owner, mode, the exact xattr set and, last, the times (every other
 * step may touch them: DESIGN.md invariant 3, exact rewind).
 *
 * Every undoer is idempotent: run again after a crash (the rewind mark is
 * written after the undo) it finds the pre-image state and returns 1. It
 * never removes a directory that holds something: what the journal did not
 * record is not ours to delete. Runs in txreplay only, so it may allocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "internal.h"

#define BLOCK 4096      /* all-zero blocks of this size stay holes in sparse files */

/* What an undoer works with. */
struct undo {
	const struct jreader *r;
	const struct jrecord *c;
	char *path, *path2;
	struct jstat st;
	char *msg;
	size_t msglen;
	bool changed;          /* restore_meta() changed something */
	const struct jundo_hints *h;   /* never NULL */
};

/* Say "cannot WHAT 'PATH': strerror" and return ERR (negative). */
static int fail(struct undo *u, int err, const char *what, const char *path)
{
	snprintf(u->msg, u->msglen, "cannot %s '%s': %s", what, path, strerror(-err));
	return err;
}

/* Say anything and return ERR. */
static int failf(struct undo *u, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(u->msg, u->msglen, fmt, ap);
	va_end(ap);
	return err;
}

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static struct timespec ns_ts(int64_t ns)
{
	struct timespec t = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	if (t.tv_nsec < 0) {
		t.tv_sec--;
		t.tv_nsec += 1000000000;
	}
	return t;
}

static bool same_inode(const struct stat *cur, uint64_t dev, uint64_t ino)
{
	return (uint64_t)cur->st_dev == dev && (uint64_t)cur->st_ino == ino;
}

/* ---- xattrs ------------------------------------------------------------ */

struct xattr { char *name; const uint8_t *val; uint32_t len; };

/* Split F_XATTRS into NUL-terminated names and values. An absent field is
 * the empty set. -EBADMSG when the field does not parse. */
static int parse_xattrs(const struct jrecord *c, struct xattr **out, size_t *n)
{
	const struct jfield *f = &c->f[F_XATTRS];
	size_t off = 0, k = 0;
	struct xattr *x = NULL;

	*out = NULL;
	*n = 0;
	while (f->present && off < f->n) {
		uint16_t nl;
		uint32_t vl;

		if (f->n - off < 6)
			goto bad;
		memcpy(&nl, f->p + off, 2);
		memcpy(&vl, f->p + off + 2, 4);
		off += 6;
		if (nl == 0 || nl > f->n - off || vl > f->n - off - nl || memchr(f->p + off, 0, nl))
			goto bad;
		x = realloc(x, (k + 1) * sizeof(*x));
		if (!x)
			return -ENOMEM;
		x[k].name = strndup((const char *)f->p + off, nl);
		x[k].val = f->p + off + nl;
		x[k].len = vl;
		if (!x[k++].name)
			goto bad;
		off += (size_t)nl + vl;
	}
	*out = x;
	*n = k;
	return 0;
bad:
	while (k--)
		free(x[k].name);
	free(x);
	return -EBADMSG;
}

static void free_xattrs(struct xattr *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(x[i].name);
	free(x);
}

static const struct xattr *xattr_find(const struct xattr *x, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(x[i].name, name))
			return &x[i];
	return NULL;
}

/* Errors an xattr step may meet and pass over: a filesystem without xattrs,
 * and user.* names, which Linux refuses on symlinks. */
static bool xattr_tolerable(int err, bool symlink)
{
	return err == ENOTSUP || err == ENODATA || (symlink && err == EPERM);
}

/* The names on PATH now, as a list of NUL-terminated strings. */
static int list_xattrs(const char *path, char **list, ssize_t *len)
{
	ssize_t n;

	*list = NULL;
	*len = 0;
	for (;;) {
		n = llistxattr(path, NULL, 0);
		if (n <= 0)
			return n < 0 ? -errno : 0;
		free(*list);
		*list = malloc((size_t)n);
		if (!*list)
			return -ENOMEM;
		*len = llistxattr(path, *list, (size_t)n);
		if (*len >= 0)
			return 0;
		if (errno != ERANGE)    /* ERANGE: it grew meanwhile */
			return -errno;
	}
}

static bool xattr_equal(const char *path, const struct xattr *x)
{
	char *cur = malloc(x->len ? x->len : 1);
	ssize_t n = cur ? lgetxattr(path, x->name, cur, x->len) : -1;
	bool eq = n == (ssize_t)x->len && !memcmp(cur, x->val, x->len);

	free(cur);
	return eq;
}

/* Make PATH's xattrs exactly the recorded set. */
static int restore_xattrs(struct undo *u, const char *path, bool symlink)
{
	struct xattr *x;
	size_t nx;
	char *list;
	ssize_t len;
	int err = parse_xattrs(u->c, &x, &nx);

	if (err)
		return failf(u, err, "seq %llu: malformed xattr field", (unsigned long long)u->c->seq);
	err = list_xattrs(path, &list, &len);
	if (err && !xattr_tolerable(-err, symlink)) {
		err = fail(u, err, "list the xattrs of", path);
		goto out;
	}
	err = 0;
	for (char *name = list; name && name < list + len; name += strlen(name) + 1) {
		if (xattr_find(x, nx, name))
			continue;
		if (lremovexattr(path, name) < 0 && !xattr_tolerable(errno, symlink)) {
			err = fail(u, -errno, "remove an xattr of", path);
			goto out;
		}
		u->changed = true;
	}
	for (size_t i = 0; i < nx; i++) {
		if (xattr_equal(path, &x[i]))
			continue;
		if (lsetxattr(path, x[i].name, x[i].val, x[i].len, 0) < 0) {
			if (xattr_tolerable(errno, symlink))
				continue;
			err = fail(u, -errno, "set an xattr of", path);
			goto out;
		}
		u->changed = true;
	}
out:
	free(list);
	free_xattrs(x, nx);
	return err;
}

/* ---- metadata ----------------------------------------------------------- */

/* What restore_meta() puts back: everything, everything but the xattrs
 * (a kept inode's own), or (weak J_META records) only the times. A record
 * without F_XATTRS had none, unless it says JR_INODE_XATTRS. */
enum meta { META_ALL, META_KEEP_XATTRS, META_TIMES };

/* Put back owner, mode, xattrs and times of PATH from ST, as far as WHAT
 * says. Sets u->changed when anything differed. */
static int restore_meta(struct undo *u, const char *path, const struct jstat *st, enum meta what)
{
	bool times_only = what == META_TIMES;
	struct timespec t[2];
	struct stat cur;
	int err;

	if (lstat(path, &cur) < 0)
		return fail(u, -errno, "stat", path);
	if (!times_only && (cur.st_uid != st->uid || cur.st_gid != st->gid)) {
		if (lchown(path, st->uid, st->gid) < 0)
			return fail(u, -errno, "chown", path);
		u->changed = true;
		if (lstat(path, &cur) < 0)      /* chown may clear set-id bits */
			return fail(u, -errno, "stat", path);
	}
	if (!times_only && !S_ISLNK(cur.st_mode) && (cur.st_mode & 07777) != (st->mode & 07777)) {
		if (chmod(path, st->mode & 07777) < 0)
			return fail(u, -errno, "chmod", path);
		u->changed = true;
	}
	if (what == META_ALL) {
		err = restore_xattrs(u, path, S_ISLNK(cur.st_mode));
		if (err)
			return err;
	}
	/* Last: chown, chmod and xattrs change only ctime, so CUR's times hold. */
	if (ts_ns(&cur.st_atim) == st->atime_ns && ts_ns(&cur.st_mtim) == st->mtime_ns)
		return 0;
	t[0] = ns_ts(st->atime_ns);
	t[1] = ns_ts(st->mtime_ns);
	if (utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, -errno, "set the times of", path);
	u->changed = true;
	return 0;
}

/* ---- removing and writing ---------------------------------------------- */

/* Remove whatever is at PATH (CUR is its lstat): a file, or an empty
 * directory. A directory with entries is never removed. */
static int remove_any(struct undo *u, const char *path, const struct stat *cur)
{
	if (!S_ISDIR(cur->st_mode))
		return unlink(path) < 0 ? fail(u, -errno, "unlink", path) : 0;
	if (rmdir(path) == 0)
		return 0;
	if (errno == ENOTEMPTY || errno == EEXIST)
		return failf(u, -ENOTEMPTY, "cannot remove '%s': not empty: holds entries the "
			     "journal did not record", path);
	return fail(u, -errno, "rmdir", path);
}

/* Open the regular file at PATH for rewriting; a file we own but may not
 * write (mode 0444) is made writable first: restore_meta() puts the mode
 * back. */
static int open_rewrite(struct undo *u, const char *path)
{
	struct stat cur;
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == EACCES && lstat(path, &cur) == 0 && cur.st_uid == geteuid() &&
	    chmod(path, (cur.st_mode & 07777) | S_IWUSR) == 0)
		fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? fail(u, -errno, "open", path) : fd;
}

/* Sparse files: the pre-image streams through a pipe from a thread, and
 * all-zero blocks become holes (lseek over them) instead of written zeros.
 * Memory stays constant however large the file. */
struct feed {
	const struct jreader *r;
	const struct jrecord *c;
	int wfd, err;
	char msg[256];
};

static void *feed_run(void *arg)
{
	struct feed *f = arg;

	f->err = jrec_content(f->r, f->c, f->wfd, f->msg, sizeof(f->msg));
	close(f->wfd);
	return NULL;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

/* Read one block (or what is left) from FD; returns its length, 0 at EOF. */
static ssize_t read_block(int fd, uint8_t *b)
{
	size_t n = 0;

	while (n < BLOCK) {
		ssize_t k = read(fd, b + n, BLOCK - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		n += (size_t)k;
	}
	return (ssize_t)n;
}

/* Copy blocks from RFD to FD, seeking over zero blocks; drains RFD to its
 * end even after an error, so that the feeding thread always finishes. */
static int copy_sparse(int rfd, int fd)
{
	uint8_t b[BLOCK];
	off_t off = 0;
	ssize_t n;
	int err = 0;

	while ((n = read_block(rfd, b)) > 0) {
		if (err)
			continue;
		if (all_zero(b, (size_t)n))
			err = lseek(fd, n, SEEK_CUR) < 0 ? -errno : 0;
		else
			err = jwrite_all(fd, b, (size_t)n);
		off += n;
	}
	if (n < 0 && !err)
		err = (int)n;
	if (!err && ftruncate(fd, off) < 0)
		err = -errno;
	return err;
}

static int write_sparse(struct undo *u, int fd)
{
	struct feed f = { .r = u->r, .c = u->c };
	pthread_t t;
	int p[2], err;

	if (pipe2(p, O_CLOEXEC) < 0)
		return fail(u, -errno, "write", u->path);
	f.wfd = p[1];
	err = -pthread_create(&t, NULL, feed_run, &f);
	if (err) {
		close(p[0]);
		close(p[1]);
		return fail(u, err, "write", u->path);
	}
	err = copy_sparse(p[0], fd);
	pthread_join(t, NULL);
	close(p[0]);
	if (f.err)
		return failf(u, f.err, "%s", f.msg);
	return err ? fail(u, err, "write", u->path) : 0;
}

/* Write the pre-image of u->c into the empty file FD. */
static int write_content(struct undo *u, int fd)
{
	if (u->st.blocks * 512 < u->st.size)
		return write_sparse(u, fd);
	return jrec_content(u->r, u->c, fd, u->msg, u->msglen);
}

/* Make PATH a regular file holding the pre-image: the same inode when one
 * is there (hard links keep seeing it), else a new one. */
static int rewrite_file(struct undo *u, const char *path)
{
	struct stat cur;
	int fd, err;

	/* Check the saved bytes before anything is truncated. */
	err = jrec_content(u->r, u->c, -1, u->msg, u->msglen);
	if (err)
		return err;
	if (lstat(path, &cur) == 0) {
		if (!S_ISREG(cur.st_mode) && (err = remove_any(u, path, &cur)))
			return err;
	} else if (errno != ENOENT) {
		return fail(u, -errno, "stat", path);
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST)
		fd = open_rewrite(u, path);
	else if (fd < 0)
		fd = fail(u, -errno, "create", path);
	if (fd < 0)
		return fd;
	err = ftruncate(fd, 0) < 0 ? fail(u, -errno, "truncate", path) : write_content(u, fd);
	if (close(fd) < 0 && !err)
		err = fail(u, -errno, "write", path);
	return err ? err : restore_meta(u, path, &u->st, META_ALL);
}

/* ---- one undoer per record type ---------------------------------------- */

static int undo_create(struct undo *u)
{
	struct stat cur;

	if (lstat(u->path, &cur) < 0)
		return errno == ENOENT ? 1 : fail(u, -errno, "stat", u->path);
	return remove_any(u, u->path, &cur);
}

/* A part of the file (JR_RANGE): its bytes back where they were, in the
 * file at the path (the same inode, or what an earlier undo brought back
 * there), cut to the size it had. */
static int undo_range(struct undo *u)
{
	struct stat cur;
	uint64_t off;
	int fd, err;

	if (!jrec_u64(u->c, F_OFFSET, &off) || off > (uint64_t)INT64_MAX)
		return failf(u, -EBADMSG, "seq %llu: a part of '%s' without its offset",
			     (unsigned long long)u->c->seq, u->path);
	err = jrec_content(u->r, u->c, -1, u->msg, u->msglen);  /* whole before anything changes */
	if (err)
		return err;
	if (lstat(u->path, &cur) < 0)
		return fail(u, -errno, "restore a part of", u->path);
	if (!S_ISREG(cur.st_mode))
		return failf(u, -EINVAL, "cannot restore a part of '%s': no longer a regular file", u->path);
	fd = open_rewrite(u, u->path);
	if (fd < 0)
		return fd;
	if (lseek(fd, (off_t)off, SEEK_SET) < 0)
		err = fail(u, -errno, "seek in", u->path);
	else
		err = jrec_content(u->r, u->c, fd, u->msg, u->msglen);
	if (!err && ftruncate(fd, (off_t)u->st.size) < 0)
		err = fail(u, -errno, "truncate", u->path);
	if (close(fd) < 0 && !err)
		err = fail(u, -errno, "write", u->path);
	return err ? err : restore_meta(u, u->path, &u->st, META_ALL);
}

static int undo_content(struct undo *u)
{
	if (u->c->flags & JR_RANGE)
		return undo_range(u);
	return rewrite_file(u, u->path);
}

static int undo_append(struct undo *u)
{
	struct stat cur;
	int fd, err = 0;

	if (lstat(u->path, &cur) < 0)
		return fail(u, -errno, "truncate", u->path);
	if (!S_ISREG(cur.st_mode))
		return failf(u, -EINVAL, "cannot truncate '%s': no longer a regular file", u->path);
	if ((uint64_t)cur.st_size < u->st.size)
		return failf(u, -ESTALE, "cannot truncate '%s': it is shorter (%lld bytes) than before "
			     "the append (%llu): changed by something else", u->path,
			     (long long)cur.st_size, (unsigned long long)u->st.size);
	if ((uint64_t)cur.st_size > u->st.size) {
		fd = open_rewrite(u, u->path);
		if (fd < 0)
			return fd;
		if (ftruncate(fd, (off_t)u->st.size) < 0)
			err = fail(u, -errno, "truncate", u->path);
		close(fd);
		u->changed = true;
	}
	if (!err)
		err = restore_meta(u, u->path, &u->st, META_ALL);
	return err ? err : !u->changed;
}

/* The removed thing is what is at PATH now (CUR): the preserved inode, the
 * same directory, the same symlink or special file. */
static bool is_preimage(struct undo *u, const struct stat *cur)
{
	unsigned type = u->st.mode & S_IFMT;
	uint64_t ino[2];
	char *target, buf[4096];
	ssize_t n;
	bool same;

	if ((cur->st_mode & S_IFMT) != type)
		return false;
	switch (type) {
	case S_IFDIR:
	case S_IFIFO:
	case S_IFSOCK:
		return true;
	case S_IFCHR:
	case S_IFBLK:
		return (uint64_t)cur->st_rdev == u->st.rdev;
	case S_IFLNK:
		target = jrec_strdup(u->c, F_TARGET);
		n = readlink(u->path, buf, sizeof(buf));
		same = target && n >= 0 && (size_t)n == strlen(target) && !memcmp(buf, target, (size_t)n);
		free(target);
		return same;
	default:
		/* A copy (DATA, OBJECT) was taken because the inode could not
		 * be kept: whatever is there now is another file, even when
		 * the inode number was reused. Rewriting it is idempotent. */
		if (!u->c->f[F_INODE].present || u->c->f[F_INODE].n != sizeof(ino))
			return false;
		memcpy(ino, u->c->f[F_INODE].p, sizeof(ino));
		return same_inode(cur, ino[0], ino[1]);
	}
}

/* Bring the preserved inode back: link it from objects/ to PATH, then drop
 * the object (a crash in between is caught by the "already" branch). */
static int relink_inode(struct undo *u)
{
	char obj[JOBJ_PATH_MAX];

	jreader_object(u->r, u->c->seq, "ino", obj);
	if (linkat(u->r->dirfd, obj, AT_FDCWD, u->path, 0) < 0) {
		if (errno == ENOENT)
			return failf(u, -ENOENT, "cannot restore '%s': its preserved inode %s is missing",
				     u->path, obj);
		return fail(u, -errno, "link the preserved inode to", u->path);
	}
	if (unlinkat(u->r->dirfd, obj, 0) < 0 && errno != ENOENT)
		return fail(u, -errno, "remove the object of", u->path);
	return 0;
}

/* A removed file that had other hard links, its pre-image a copy: link
 * the inode another name still holds (or the one it came back as) to the
 * path again, so that the names share it as before. False when no name
 * holds it (a copy is written instead). */
static bool relink_other_name(struct undo *u)
{
	char other[PATH_MAX];

	return u->st.nlink > 1 && u->h->other_name && u->h->other_name(u->h->ctx, &u->st, other) &&
	       link(other, u->path) == 0;
}

/* What a removal's undo restores of the metadata: everything, but the
 * xattrs of a kept inode that has its own (JR_INODE_XATTRS: the record does
 * not list them, and nothing could change them while only objects/ named
 * the inode; a change through another hard link has its own record). */
static enum meta removed_meta(const struct undo *u)
{
	if ((u->c->flags & JR_INODE_XATTRS) && u->c->f[F_INODE].present)
		return META_KEEP_XATTRS;
	return META_ALL;
}

/* The directories PATH lies in that are missing, made (0755 less the
 * umask): a directory removed where no record was written (an untracked
 * cache's, rm -rf ~/.cache/uv, whose files had names in the workspace too
 * and so were journaled) comes back for what the journal restores in it. */
static int make_parents(struct undo *u, const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	struct stat st;
	char *slash;

	if (n >= sizeof(buf))
		return 0;
	memcpy(buf, path, n + 1);
	slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return 0;
	*slash = 0;
	if (lstat(buf, &st) == 0 || errno != ENOENT)
		return 0;
	for (char *s = strchr(buf + 1, '/');; s = strchr(s + 1, '/')) {
		if (s)
			*s = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return fail(u, -errno, "make the directory", buf);
		if (!s)
			break;
		*s = '/';
	}
	return 0;
}

/* Recreate the removed thing at the (now free) path, by type. */
static int recreate(struct undo *u)
{
	unsigned type = u->st.mode & S_IFMT;
	char *target;
	int err = make_parents(u, u->path);

	if (err)
		return err;
	switch (type) {
	case S_IFREG:
		if (u->c->f[F_INODE].present)
			err = relink_inode(u);
		else if (!relink_other_name(u))
			return rewrite_file(u, u->path);
		break;
	case S_IFLNK:
		target = jrec_strdup(u->c, F_TARGET);
		if (!target)
			return failf(u, -EBADMSG, "cannot restore the symlink '%s': no target recorded",
				     u->path);
		if (symlink(target, u->path) < 0)
			err = fail(u, -errno, "create the symlink", u->path);
		free(target);
		break;
	case S_IFDIR:
		if (mkdir(u->path, 0700) < 0)
			err = fail(u, -errno, "mkdir", u->path);
		break;
	case S_IFIFO:
	case S_IFSOCK:
	case S_IFCHR:
	case S_IFBLK:
		if (mknod(u->path, type | 0600, (dev_t)u->st.rdev) < 0)
			err = fail(u, -errno, "mknod", u->path);
		break;
	default:
		return failf(u, -EBADMSG, "cannot restore '%s': unknown file type 0%o", u->path, type);
	}
	return err ? err : restore_meta(u, u->path, &u->st, removed_meta(u));
}

static int undo_remove(struct undo *u)
{
	struct stat cur;
	char obj[JOBJ_PATH_MAX];
	int err;

	if (lstat(u->path, &cur) < 0) {
		if (errno != ENOENT)
			return fail(u, -errno, "stat", u->path);
		return recreate(u);
	}
	if (!is_preimage(u, &cur)) {
		err = remove_any(u, u->path, &cur);
		return err ? err : recreate(u);
	}
	err = restore_meta(u, u->path, &u->st, removed_meta(u));
	if (err)
		return err;
	jreader_object(u->r, u->c->seq, "ino", obj);
	if (unlinkat(u->r->dirfd, obj, 0) == 0)
		u->changed = true;
	return !u->changed;
}

/* CUR is the file the rename moved: its inode, or the one a later
 * record's undo brought it back as (the hints' alias). */
static bool renamed_file(const struct undo *u, const struct stat *cur)
{
	return same_inode(cur, u->st.dev, u->st.ino) ||
	       (u->h->alias[1] && same_inode(cur, u->h->alias[0], u->h->alias[1]));
}

static int undo_rename(struct undo *u)
{
	struct stat cur;
	uint32_t flags = 0;
	int err;

	if (!u->path2)
		return failf(u, -EBADMSG, "seq %llu: rename without a target path",
			     (unsigned long long)u->c->seq);
	jrec_u32(u->c, F_FLAGS, &flags);
	if (lstat(u->path, &cur) == 0 && renamed_file(u, &cur))
		return 1;
	if (!strcmp(u->path, u->path2))
		return 1;               /* a rename onto itself changes nothing */
	if (flags & RENAME_EXCHANGE) {
		if (lstat(u->path2, &cur) < 0 && errno == ENOENT)
			return 1;       /* no second name: the exchange itself failed */
		if (renameat2(AT_FDCWD, u->path2, AT_FDCWD, u->path, RENAME_EXCHANGE) < 0)
			return fail(u, -errno, "exchange back", u->path2);
		return 0;
	}
	/* A directory, symlink or special file removed later comes back (from
	 * its J_REMOVE) as a new inode of the same type: still the renamed one.
	 * Found at the source, the rename is undone already (or the rename
	 * itself failed, after its record was written). */
	bool at_to = lstat(u->path2, &cur) == 0 &&
		     (renamed_file(u, &cur) ||
		      (!S_ISREG(cur.st_mode) && (cur.st_mode & S_IFMT) == (u->st.mode & S_IFMT)));
	struct stat src;
	if (lstat(u->path, &src) == 0 && (src.st_mode & S_IFMT) == (u->st.mode & S_IFMT) &&
	    (!at_to || !renamed_file(u, &cur)))
		return 1;
	if (!at_to)
		return failf(u, -ESTALE, "cannot rename '%s' back to '%s': renamed path is gone or "
			     "replaced", u->path2, u->path);
	if (lstat(u->path, &cur) == 0) {
		err = remove_any(u, u->path, &cur);
		if (err)
			return err;
	}
	if (rename(u->path2, u->path) < 0)
		return fail(u, -errno, "rename back", u->path2);
	return 0;
}

static int undo_meta(struct undo *u)
{
	bool weak = u->c->flags & JR_WEAK;
	struct stat cur;
	int err;

	if (lstat(u->path, &cur) < 0) {
		if (errno == ENOENT && weak) {
			snprintf(u->msg, u->msglen, "'%s' is gone: its times are not restored", u->path);
			return 1;
		}
		return fail(u, -errno, "restore the metadata of", u->path);
	}
	err = restore_meta(u, u->path, &u->st, weak ? META_TIMES : META_ALL);
	return err ? err : !u->changed;
}

/* A directory on PATH's way (not PATH itself) that is a symlink, into
 * WHICH. The journal's paths are resolved ones: each of their directories
 * was one when the path was recorded. One that is a symlink now was put
 * there since by something the journal did not see (a static program, a
 * change made outside the session), and an undo through it would act
 * wherever it points: outside the workspace, as the user running rewind.
 * The directories WAY holds were looked at already (a rewind's undoes go
 * mostly directory by directory: an lstat of each directory of each path
 * made a rewind of rm -rf 35 % slower); jundo_hinted forgets them after an
 * undo that may bring a symlink or a directory back under another name. */
static bool symlink_on_way(const char *path, struct jundo_way *way, char *which, size_t n)
{
	char buf[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t dir = slash ? (size_t)(slash - path) : 0, from = 0;
	struct stat st;

	if (dir == 0 || dir >= sizeof(buf))
		return false;
	if (way && way->len) {
		/* the directories WAY and PATH's share: their common start,
		 * back to where a name ends in both */
		while (from < dir && from < way->len && path[from] == way->dir[from])
			from++;
		while (from && !((from == dir || path[from] == '/') && (from == way->len || way->dir[from] == '/')))
			from--;
		if (from == dir)
			return false;
	}
	memcpy(buf, path, dir);
	buf[dir] = 0;
	for (char *s = strchr(buf + from + 1, '/');; s = strchr(s + 1, '/')) {
		if (s)
			*s = 0;
		if (lstat(buf, &st) < 0)
			return false;   /* nothing from here on exists */
		if (S_ISLNK(st.st_mode)) {
			snprintf(which, n, "%s", buf);
			return true;
		}
		if (!s)
			break;
		*s = '/';
	}
	if (way) {
		memcpy(way->dir, buf, dir + 1);
		way->len = dir;
	}
	return false;
}

typedef int (*undoer)(struct undo *u);

static const struct {
	undoer fn;
	bool stat;             /* needs F_STAT */
} undoers[J_TYPE_MAX + 1] = {
	[J_CREATE]  = { undo_create,  false },
	[J_CONTENT] = { undo_content, true },
	[J_APPEND]  = { undo_append,  true },
	[J_REMOVE]  = { undo_remove,  true },
	[J_RENAME]  = { undo_rename,  true },
	[J_META]    = { undo_meta,    true },
};

int jundo(const struct jreader *r, const struct jrecord *c, char *msg, size_t msglen)
{
	static const struct jundo_hints none;

	return jundo_hinted(r, c, &none, msg, msglen);
}

int jundo_hinted(const struct jreader *r, const struct jrecord *c, const struct jundo_hints *h, char *msg,
		 size_t msglen)
{
	struct undo u = { .r = r, .c = c, .msg = msg, .msglen = msglen, .h = h };
	char link[PATH_MAX];
	int ret;

	if (msglen)
		msg[0] = 0;
	if (c->type > J_TYPE_MAX || !undoers[c->type].fn)
		return 1;      /* nothing to undo */
	u.path = jrec_strdup(c, F_PATH);
	u.path2 = jrec_strdup(c, F_PATH2);
	if (!u.path || u.path[0] != '/')
		ret = failf(&u, -EBADMSG, "seq %llu: %s record without an absolute path",
			    (unsigned long long)c->seq, jtype_name(c->type));
	else if (undoers[c->type].stat && !jrec_stat(c, F_STAT, &u.st))
		ret = failf(&u, -EBADMSG, "seq %llu: %s record for '%s' without its metadata",
			    (unsigned long long)c->seq, jtype_name(c->type), u.path);
	else if (symlink_on_way(u.path, h->way, link, sizeof(link)) ||
		 (u.path2 && symlink_on_way(u.path2, h->way, link, sizeof(link))))
		ret = failf(&u, -ELOOP, "cannot undo the %s of '%s': '%s' on its way is now a symlink, which the "
			    "journal did not see made; left alone", jtype_name(c->type), u.path, link);
	else
		ret = undoers[c->type].fn(&u);
	/* a symlink brought back (a removal's undo), or a directory or a
	 * symlink renamed back: a directory already looked at may lead
	 * elsewhere now */
	if (h->way && (c->type == J_RENAME || c->type == J_REMOVE) && !S_ISREG(u.st.mode))
		h->way->len = 0;
	free(u.path);
	free(u.path2);
	return ret;
}
