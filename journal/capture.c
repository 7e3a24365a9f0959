/*
 * capture.c - save a path's pre-image before the shim lets a change through:
 * undo before do (DESIGN.md invariant 1), once per transaction (invariant 2,
 * with dedup.c), in the cheapest exact form (invariant 5): "did not exist",
 * the old size, a hard link into objects/, or a compressed copy.
 *
 * Runs inside host processes: no malloc and no stdio; scratch space is
 * mmap'd (zlib gets mmap allocators too) and unmapped before returning.
 * Every function returns 0 only once its record is written.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>              /* RENAME_* only */
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>
#include "internal.h"
#include "dedup.h"

#define CHUNK      (256u << 10)         /* streaming unit for large files */
#define ZLEVEL     Z_BEST_SPEED         /* the capture is on the host's hot path */
#define STACK_REC  8192                 /* records that fit stay on the stack */
#define MAX_HOPS   40                   /* symlinks followed, as the kernel does */
#define SKIPPED    1                    /* a capture function wrote nothing */

/* ---- scratch memory ------------------------------------------------------ */

static void *scratch(size_t n)
{
	void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void unscratch(void *p, size_t n)
{
	if (p)
		munmap(p, n ? n : 1);
}

/* zlib's allocator: mmap, with the length kept in front for munmap. */
static voidpf zmap(voidpf opaque, uInt items, uInt size)
{
	size_t n = (size_t)items * size + 16;
	uint8_t *p = scratch(n);

	(void)opaque;
	if (!p)
		return Z_NULL;
	memcpy(p, &n, sizeof(n));
	return p + 16;
}

static void zunmap(voidpf opaque, voidpf p)
{
	uint8_t *b = (uint8_t *)p - 16;
	size_t n;

	(void)opaque;
	if (!p)
		return;
	memcpy(&n, b, sizeof(n));
	munmap(b, n);
}

/*
 * Kept compressors. A process that captures many small files (a build
 * overwriting its outputs, an edit over a tree) paid each time for zlib's
 * 256 KiB of state and for the pre-image's buffer: five maps, their page
 * faults and five munmaps, each a TLB flush on every CPU the process ran
 * on (perf: most of a small capture's time). A few are kept, each taken by
 * one thread at a time with no lock (a signal handler or a fork child that
 * finds them taken makes its own, as before); once made, a kept one is
 * reset, not freed, and its buffer's pages stay.
 */
#define ZKEPT 2
static struct zkept {
	int busy;
	bool ready;                    /* z is initialised */
	z_stream z;
	uint8_t *buf;                  /* 2 * J_INLINE_MAX, made at first use */
} zkept[ZKEPT];

static struct zkept *zkept_take(void)
{
	for (int i = 0; i < ZKEPT; i++) {
		int free_ = 0;
		if (__atomic_compare_exchange_n(&zkept[i].busy, &free_, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			if (zkept[i].buf || (zkept[i].buf = scratch(2 * (size_t)J_INLINE_MAX)))
				return &zkept[i];
			__atomic_store_n(&zkept[i].busy, 0, __ATOMIC_RELEASE);
			return NULL;
		}
	}
	return NULL;
}

static void zkept_give(struct zkept *k)
{
	if (k)
		__atomic_store_n(&k->busy, 0, __ATOMIC_RELEASE);
}

/* ---- paths ----------------------------------------------------------------- */

/* Lexical normalisation in place of an absolute path: drop //, . and .. */
static void squash(char *p)
{
	char *w = p;
	const char *r = p;

	while (*r) {
		const char *e;
		size_t n;

		while (*r == '/')
			r++;
		if (!*r)
			break;
		e = strchrnul(r, '/');
		n = (size_t)(e - r);
		if (n == 2 && r[0] == '.' && r[1] == '.') {
			while (w > p && *--w != '/')
				;
		} else if (n != 1 || r[0] != '.') {
			*w++ = '/';
			memmove(w, r, n);
			w += n;
		}
		r = e;
	}
	if (w == p)
		*w++ = '/';
	*w = 0;
}

int jpath_norm(char *out, size_t cap, const char *base, const char *path)
{
	size_t pl = strlen(path), bl = 0;

	if (path[0] != '/') {
		if (!base || base[0] != '/')
			return -EINVAL;
		bl = strlen(base);
	}
	if (bl + 1 + pl + 1 > cap)
		return -ENAMETOOLONG;
	if (bl) {
		memcpy(out, base, bl);
		out[bl] = '/';
		bl++;
	}
	memcpy(out + bl, path, pl + 1);
	squash(out);
	return 0;
}

/* PATH's directory into OUT; false for "/", which has none. */
bool jpath_parent(const char *path, char out[PATH_MAX])
{
	const char *slash = strrchr(path, '/');
	size_t n;

	if (!slash || !slash[1])
		return false;
	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= PATH_MAX)
		return false;
	memcpy(out, path, n);
	out[n] = 0;
	return true;
}

/* Where an open of the symlink PATH lands: its target, made absolute
 * against the link's directory and normalised (into OUT). */
static int link_target(const char *path, char out[PATH_MAX])
{
	char t[PATH_MAX], dir[PATH_MAX];
	ssize_t n = readlink(path, t, sizeof(t) - 1);

	if (n < 0)
		return -errno;
	t[n] = 0;
	if (!jpath_parent(path, dir))
		memcpy(dir, "/", 2);
	return jpath_norm(out, PATH_MAX, dir, t);
}

/* ---- records ----------------------------------------------------------------- */

enum { XA_NONE, XA_PATH, XA_FD };

/* What goes into one record. */
struct rec {
	enum jtype type;
	unsigned rflags;
	const char *path, *path2;
	const struct stat *st;         /* F_STAT, or NULL */
	const uint32_t *flags;         /* F_FLAGS, or NULL */
	const uint64_t *offset;        /* F_OFFSET, or NULL */
	enum jtag tag;                 /* one more field, or 0: */
	const void *p1, *p2;           /* its value is P1 then P2 */
	size_t n1, n2;
	int xattrs;                    /* XA_*: F_XATTRS from PATH or from FD */
	int fd;
	uint64_t len;                  /* with OFFSET: the bytes wanted from there */
};

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static bool xattr_absent(int e)
{
	return e == ENOTSUP || e == ENODATA || e == ENOSYS;
}

static ssize_t xlist(const struct rec *r, char *buf, size_t n)
{
	return r->xattrs == XA_FD ? flistxattr(r->fd, buf, n) : llistxattr(r->path, buf, n);
}

static ssize_t xget(const struct rec *r, const char *name, void *buf, size_t n)
{
	return r->xattrs == XA_FD ? fgetxattr(r->fd, name, buf, n) : lgetxattr(r->path, name, buf, n);
}

/* Each name's entry into D (ROOM bytes); sets *USED, overflow on ERANGE. */
static int put_xattr_values(struct jbuild *b, const struct rec *r, const char *names, size_t len,
			    uint8_t *d, size_t room, size_t *used)
{
	for (const char *nm = names; nm < names + len; nm += strlen(nm) + 1) {
		size_t nl = strlen(nm), at = *used + J_FIELD_HDR + nl;
		ssize_t vl;

		if (!nl)
			continue;
		if (at >= room) {
			b->overflow = true;
			return 0;
		}
		vl = xget(r, nm, d + at, room - at);
		if (vl < 0 && errno == ENODATA)
			continue;       /* removed meanwhile */
		if (vl < 0 && errno == ERANGE) {
			b->overflow = true;
			return 0;
		}
		if (vl < 0)
			return -errno;
		put16(d + *used, (uint16_t)nl);
		put32(d + *used + 2, (uint32_t)vl);
		memcpy(d + *used + J_FIELD_HDR, nm, nl);
		*used = at + (size_t)vl;
	}
	return 0;
}

/* F_XATTRS: { u16 namelen, u32 vallen, name, value }..., the last field. */
static int put_xattrs(struct jbuild *b, const struct rec *r)
{
	char small[1024], *names = small;
	ssize_t len = xlist(r, NULL, 0);
	size_t room, used = 0, cap;
	uint8_t *d;
	int err;

	if (len < 0)
		return xattr_absent(errno) ? 0 : -errno;
	if (len == 0 || b->overflow)
		return 0;
	cap = (size_t)len;
	if (cap > sizeof(small) && !(names = scratch(cap)))
		return -ENOMEM;
	len = xlist(r, names, cap);
	if (len < 0) {
		err = errno == ERANGE ? 0 : -errno;     /* grew meanwhile: retry bigger */
		b->overflow = !err;
		goto out;
	}
	room = b->cap - b->len - J_FIELD_HDR - J_LINK_LEN;
	if (b->cap < b->len + J_FIELD_HDR + J_LINK_LEN || !(d = jb_reserve(b, F_XATTRS, room))) {
		b->overflow = true;
		err = 0;
		goto out;
	}
	err = put_xattr_values(b, r, names, (size_t)len, d, room, &used);
	jb_trim_last(b, used);
out:
	if (names != small)
		unscratch(names, cap);
	return err;
}

static int fill(struct jbuild *b, const struct rec *r)
{
	struct jstat j;

	jb_str(b, F_PATH, r->path);
	jb_str(b, F_PATH2, r->path2);
	if (r->st) {
		jstat_from(&j, r->st);
		jb_bytes(b, F_STAT, &j, sizeof(j));
	}
	if (r->flags)
		jb_u32(b, F_FLAGS, *r->flags);
	if (r->offset)
		jb_u64(b, F_OFFSET, *r->offset);
	if (r->tag) {
		uint8_t *d = jb_reserve(b, r->tag, r->n1 + r->n2);

		if (d) {
			memcpy(d, r->p1, r->n1);
			if (r->n2)
				memcpy(d + r->n1, r->p2, r->n2);
		}
	}
	return r->xattrs == XA_NONE ? 0 : put_xattrs(b, r);
}

static size_t estimate(const struct rec *r)
{
	return J_FRAME_HDR + J_REC_MIN + 8 * J_FIELD_HDR + sizeof(struct jstat) + 4 + 1024 +
	       strlen(r->path) + (r->path2 ? strlen(r->path2) : 0) + r->n1 + r->n2;
}

/* A change the journal makes itself right after its record, before any
 * other record of this process (jseg_append_then); KEPT: the record stayed. */
struct then {
	int (*change)(void *arg);
	void *arg;
	bool kept;
};

/* Build R and append it (with SEQ, or a fresh one when 0), then make T's
 * change when T is not NULL. The buffer is on the stack when it fits, else
 * mapped, and grows while xattrs overflow it. */
static int emit_then(struct jseg *g, uint32_t txn, const struct rec *r, uint64_t seq, struct then *t)
{
	uint8_t stack[STACK_REC];
	size_t cap = estimate(r);

	for (;;) {
		uint8_t *buf = cap <= sizeof(stack) ? stack : scratch(cap);
		size_t bcap = buf == stack ? sizeof(stack) : cap;
		struct jbuild b;
		bool big;
		int err;

		if (!buf)
			return -ENOMEM;
		jb_init(&b, buf, bcap, r->type, r->rflags, txn);
		err = fill(&b, r);
		big = b.overflow;
		if (!err && big)
			err = -E2BIG;
		else if (!err && t)
			err = jseg_append_then(g, &b, seq, t->change, t->arg, &t->kept);
		else if (!err)
			err = seq ? jseg_append_seq(g, &b, seq) : jseg_append(g, &b, NULL);
		if (buf != stack)
			unscratch(buf, cap);
		if (!big || bcap >= J_REC_MAX)
			return err;
		cap = bcap * 16 < J_REC_MAX ? bcap * 16 : J_REC_MAX;
	}
}

static int emit(struct jseg *g, uint32_t txn, const struct rec *r, uint64_t seq)
{
	return emit_then(g, txn, r, seq, NULL);
}

/* ---- pre-image bytes ----------------------------------------------------------- */

/* The bytes of a regular file: inline (F_DATA) or in objects/D/SEQ.gz (F_OBJECT). */
struct pre {
	struct jdata d;
	uint8_t *map;
	size_t maplen;
	const uint8_t *bytes;
	size_t n;
	uint64_t seq;                  /* 0: none taken (inline) */
	bool object;
	struct zkept *kept;            /* MAP is this kept buffer's */
};

static void pre_field(struct rec *r, const struct pre *p)
{
	r->tag = p->object ? F_OBJECT : F_DATA;
	r->p1 = &p->d;
	r->n1 = sizeof(p->d);
	r->p2 = p->bytes;
	r->n2 = p->n;
}

/* The journal's own ENOENT or ENOTDIR (objects/ gone, or something that is
 * not a directory where a subdirectory of it belongs) as an error of its
 * own: the shim takes those two for the program's own call failing, and
 * would let the change through unjournaled. */
static int journal_side(int err)
{
	return err == -ENOENT || err == -ENOTDIR ? -EIO : err;
}

/* A call that makes the object NAME (relative to objects/) failed with
 * ENOENT: make its directory, the first DIRLEN bytes of NAME (format.h),
 * made lazily so that a session that removes nothing makes none. Another
 * process may make it first (EEXIST). 0: call again, else -errno. */
static int object_dir(struct jsession *s, char *name, size_t dirlen)
{
	int err;

	if (!dirlen)
		return -EIO;            /* the flat layout: objects/ itself is gone */
	name[dirlen - 1] = 0;
	err = mkdirat(s->objfd, name, 0700) == 0 || errno == EEXIST ? 0 : journal_side(-errno);
	name[dirlen - 1] = '/';
	/* a durable session makes the directory's name durable too (even one
	 * another process made: it may not have synced it yet) */
	if (!err && (s->flags & JS_DURABLE) && fsync(s->objfd) < 0)
		err = -errno;
	return err;
}

/* fsync the directory that holds the object NAME (a durable session). */
static int sync_object_dir(struct jsession *s, char *name, size_t dirlen)
{
	int fd, err = 0;

	if (!dirlen)
		return fsync(s->objfd) < 0 ? -errno : 0;
	name[dirlen - 1] = 0;
	fd = openat(s->objfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	name[dirlen - 1] = '/';
	if (fd < 0 || fsync(fd) < 0)
		err = -errno;
	if (fd >= 0)
		close(fd);
	return err;
}

/* Forget P; DROP also removes its object (its record was not written). */
static void pre_free(struct jsession *s, struct pre *p, bool drop)
{
	char name[JOBJ_NAME_MAX];

	if (p->kept)
		zkept_give(p->kept);
	else
		unscratch(p->map, p->maplen);
	p->kept = NULL;
	p->map = NULL;
	if (drop && p->object) {
		jobject_name(name, s->features, p->seq, "gz");
		unlinkat(s->objfd, name, 0);
	}
}

static ssize_t read_at(int fd, uint8_t *buf, size_t n, off_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* compress2 without malloc: a zlib stream of SRC into DST if it comes out
 * strictly smaller than SRC, through K's compressor (NULL: a fresh one). */
static bool zshrink(struct zkept *k, uint8_t *dst, size_t *dlen, const uint8_t *src, size_t n)
{
	z_stream fresh = { .zalloc = zmap, .zfree = zunmap }, *z = k ? &k->z : &fresh;
	int rc;

	if (n < 2)
		return false;
	if (k && k->ready) {
		deflateReset(z);
	} else {
		if (k)
			*z = fresh;
		if (deflateInit(z, ZLEVEL) != Z_OK)
			return false;
		if (k)
			k->ready = true;
	}
	z->next_in = (Bytef *)src;
	z->avail_in = (uInt)n;
	z->next_out = dst;
	z->avail_out = (uInt)(n - 1);
	rc = deflate(z, Z_FINISH);
	*dlen = z->total_out;
	if (!k)
		deflateEnd(z);
	return rc == Z_STREAM_END;
}

static int pre_inline(int fd, uint64_t off, size_t size, struct pre *p)
{
	ssize_t got;
	size_t zlen;

	p->kept = zkept_take();
	p->maplen = 2 * size;
	p->map = p->kept ? p->kept->buf : scratch(p->maplen);
	if (!p->map)
		return -ENOMEM;
	got = read_at(fd, p->map, size, (off_t)off);
	if (got < 0)
		return (int)got;
	p->d.size = (uint64_t)got;
	jhash(p->d.hash, p->map, (size_t)got, NULL, 0);
	if (zshrink(p->kept, p->map + size, &zlen, p->map, (size_t)got)) {
		p->d.method = JD_ZLIB;
		p->bytes = p->map + size;
		p->n = zlen;
	} else {
		p->d.method = JD_STORED;
		p->bytes = p->map;
		p->n = (size_t)got;
	}
	return 0;
}

/* Stream LEN bytes of IN from FROM (fewer where it ends) through gzip
 * into OUT, hashing the bytes read. BUF holds 2 * CHUNK. */
static int gz_stream(int in, uint64_t from, uint64_t len, int out, uint8_t *buf, struct jdata *d)
{
	z_stream z = { .zalloc = zmap, .zfree = zunmap };
	crypto_generichash_blake2b_state h;
	uint64_t off = 0;
	int err = 0, flush;

	if (deflateInit2(&z, ZLEVEL, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	crypto_generichash_blake2b_init(&h, NULL, 0, sizeof(d->hash));
	do {
		size_t want = len - off < CHUNK ? (size_t)(len - off) : CHUNK;
		ssize_t r = read_at(in, buf, want, (off_t)(from + off));

		if (r < 0) {
			err = (int)r;
			break;
		}
		off += (uint64_t)r;
		crypto_generichash_blake2b_update(&h, buf, (unsigned long long)r);
		flush = r < (ssize_t)want || off == len ? Z_FINISH : Z_NO_FLUSH;
		z.next_in = buf;
		z.avail_in = (uInt)r;
		do {
			z.next_out = buf + CHUNK;
			z.avail_out = CHUNK;
			deflate(&z, flush);
			err = jwrite_all(out, buf + CHUNK, CHUNK - z.avail_out);
		} while (!err && z.avail_out == 0);
	} while (!err && flush != Z_FINISH);
	deflateEnd(&z);
	crypto_generichash_blake2b_final(&h, d->hash, sizeof(d->hash));
	d->method = JD_GZIP;
	d->size = off;
	return err;
}

static int pre_object(struct jsession *s, int fd, uint64_t from, uint64_t len, struct pre *p)
{
	const int fl = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	char name[JOBJ_NAME_MAX];
	size_t dirlen;
	int out, err;

	err = jsession_objfd(s);        /* objects/ made at its first need */
	if (err < 0)
		return journal_side(err);
	p->maplen = 2 * CHUNK;
	p->map = scratch(p->maplen);
	if (!p->map)
		return -ENOMEM;
	dirlen = jobject_name(name, s->features, p->seq, "gz");
	out = openat(s->objfd, name, fl, 0600);
	if (out < 0 && errno == ENOENT) {
		err = object_dir(s, name, dirlen);
		if (err)
			return err;
		out = openat(s->objfd, name, fl, 0600);
	}
	if (out < 0)
		return journal_side(-errno);
	p->object = true;
	err = gz_stream(fd, from, len, out, p->map, &p->d);
	if (!err && (s->flags & JS_DURABLE))
		err = fsync(out) < 0 ? -errno : sync_object_dir(s, name, dirlen);
	close(out);
	return err;
}

/* The pre-image of the regular file FD of size SIZE, or (PART) of SIZE
 * bytes of it from OFF. SEQ names an object when one is needed; 0 takes a
 * fresh one then. On error P is freed. */
static int pre_image(struct jsession *s, int fd, bool part, uint64_t off, uint64_t size, uint64_t seq,
		     struct pre *p)
{
	int err;

	memset(p, 0, sizeof(*p));
	p->seq = seq;
	if (size <= J_INLINE_MAX) {
		err = pre_inline(fd, off, (size_t)size, p);
	} else {
		if (!p->seq)
			p->seq = jsession_next_seq(s);
		err = pre_object(s, fd, off, part ? size : UINT64_MAX, p);    /* a whole file to its end */
	}
	if (err)
		pre_free(s, p, true);
	return err;
}

/* A descriptor of the file being captured that the pre-image is read from
 * instead of an open of its path, and what gives a readable one of it
 * (jcap_read_through): this thread's, for the captures it is set around.
 * read_lent: the one open_pre lent last. */
#define TLS_IE __attribute__((tls_model("initial-exec")))
static __thread int read_through TLS_IE = -1, read_lent TLS_IE = -1;
/* the length this thread's next JC_TRUNC captures cut to (jcap_cut_to),
 * and the size the last one's J_APPEND saved (jcap_cut_sized) */
static __thread uint64_t cut_to TLS_IE = JCUT_ANY, cut_sized TLS_IE = JCUT_ANY;
static __thread int (*read_reader)(int fd) TLS_IE;

void jcap_cut_to(uint64_t len)
{
	cut_to = len;
	cut_sized = JCUT_ANY;
}

uint64_t jcap_cut_sized(void)
{
	return cut_sized;
}

void jcap_read_through(int fd, int (*reader)(int fd))
{
	read_through = fd;
	read_reader = reader;
}

/* Done with FD, open_pre's: closed unless it was lent. */
static void close_pre(int fd)
{
	if (fd != read_lent)
		close(fd);
}

/* Open PATH to read its pre-image, without following a symlink, blocking
 * on a fifo or touching its atime. */
static int open_path_pre(const char *path, struct stat *st)
{
	int fl = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
	int fd = open(path, fl | O_NOATIME);

	if (fd < 0 && errno == EPERM)
		fd = open(path, fl);
	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* The same, or where the caller lent a descriptor of the same file
 * (jcap_read_through), that one: a close of any descriptor of a file drops
 * every POSIX record lock the process holds on it (fcntl, lockf), which a
 * program takes before it writes. close_pre gives it back. */
static int open_pre(const char *path, struct stat *st)
{
	struct stat ls;
	int fd;

	read_lent = -1;
	if (read_through >= 0 && fstat(read_through, st) == 0 && lstat(path, &ls) == 0 &&
	    ls.st_dev == st->st_dev && ls.st_ino == st->st_ino &&
	    (fd = read_reader ? read_reader(read_through) : read_through) >= 0)
		return read_lent = fd;
	return open_path_pre(path, st);
}

/* Write R (a J_CONTENT or J_REMOVE with R->st set) with the bytes of the
 * open regular file FD. */
static int emit_with_bytes(struct jseg *g, uint32_t txn, struct rec *r, int fd, uint64_t seq)
{
	struct pre p;
	int err = r->offset ? pre_image(g->s, fd, true, *r->offset, r->len, seq, &p)
			    : pre_image(g->s, fd, false, 0, (uint64_t)r->st->st_size, seq, &p);

	if (err)
		return err;
	pre_field(r, &p);
	r->xattrs = XA_FD;
	r->fd = fd;
	err = emit(g, txn, r, p.seq);
	pre_free(g->s, &p, err != 0);
	return err;
}

/* ---- the records, one function each ------------------------------------------- */

/* One capture: write a record for PATH and return 0, or return SKIPPED
 * when there is nothing to remember (no record, or one that must not stop
 * the next). ARG is the function's own. */
typedef int (*capture_fn)(struct jseg *g, uint32_t txn, const char *path, const void *arg);

/* Run FN unless PATH already has a record of LEVEL in this transaction at
 * GEN (invariant 2); the claim is marked done only once the record is on
 * disk. */
static int once(struct jseg *g, uint32_t txn, const char *path, uint64_t gen, unsigned level,
		capture_fn fn, const void *arg)
{
	struct dclaim c;
	int err;

	if (dedup_claim(g->s, txn, gen, path, level, &c))
		return 0;
	err = fn(g, txn, path, arg);
	dedup_done(&c, err == 0);
	return err == SKIPPED ? 0 : err;
}

/* A creation in a directory that is not there fails, and the program will
 * likely make the directory and try again: the record is written but not
 * remembered, so that the retry gets a record above the directory's own
 * J_CREATE (rewind empties a directory before removing it). */
static int rec_create(struct jseg *g, uint32_t txn, const char *path, const void *arg)
{
	struct rec r = { .type = J_CREATE, .path = path };
	char dir[PATH_MAX];
	struct stat st;
	int err;

	(void)arg;
	err = emit(g, txn, &r, 0);
	if (!err && jpath_parent(path, dir) && lstat(dir, &st) < 0)
		return SKIPPED;
	return err;
}

/* J_META; ARG points to the weak flag. A weak one (a parent directory's
 * times) of a path that is not there records nothing. */
static int rec_meta(struct jseg *g, uint32_t txn, const char *path, const void *arg)
{
	bool weak = *(const bool *)arg;
	struct stat st;
	struct rec r = {
		.type = J_META, .rflags = weak ? JR_WEAK : 0, .path = path, .st = &st,
		.xattrs = weak ? XA_NONE : XA_PATH,
	};

	if (lstat(path, &st) < 0)
		return weak && (errno == ENOENT || errno == ENOTDIR) ? SKIPPED : -errno;
	return emit(g, txn, &r, 0);
}

static const bool strong = false, weak = true;

static int rec_append(struct jseg *g, uint32_t txn, const char *path, const void *arg)
{
	struct stat st;
	struct rec r = { .type = J_APPEND, .path = path, .st = &st, .xattrs = XA_PATH };

	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return rec_meta(g, txn, path, &strong);
	(void)arg;
	return emit(g, txn, &r, 0);
}

/* J_CONTENT of the regular file PATH as it is now: all of it, or (WANT)
 * the part WANT names, its bytes up to where the file ends, with its whole
 * stat (WANT says then what the record holds). Not a regular file: its
 * metadata (never open a device or a fifo). */
static int rec_bytes(struct jseg *g, uint32_t txn, const char *path, struct jrange *want)
{
	struct stat st;
	struct rec r = { .type = J_CONTENT, .rflags = want ? JR_RANGE : 0, .path = path, .st = &st };
	uint64_t off = 0, size;
	int fd, err;

	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return rec_meta(g, txn, path, &strong);
	fd = open_pre(path, &st);
	if (fd < 0)
		return fd;
	if (!S_ISREG(st.st_mode)) {
		close_pre(fd);
		return rec_meta(g, txn, path, &strong);
	}
	size = (uint64_t)st.st_size;
	if (want) {
		off = want->off < size ? want->off : size;
		r.offset = &off;
		r.len = want->len < size - off ? want->len : size - off;
	}
	err = emit_with_bytes(g, txn, &r, fd, 0);
	close_pre(fd);
	if (!err && want) {
		want->off = off;
		want->len = r.len;
		want->size = size;
		want->saved = true;
	}
	return err;
}

static int rec_content(struct jseg *g, uint32_t txn, const char *path, const void *arg)
{
	(void)arg;
	return rec_bytes(g, txn, path, NULL);
}

/* Where the system calls of a removal find the file: the program's own
 * directory descriptor and entry name when it gave a plain name (a lookup of
 * one component instead of the whole path), else AT_FDCWD and the absolute
 * path. Either way it is the file the record names by its absolute path. */
struct at {
	int fd;
	const char *name;
};

/* A regular file about to go: keep its inode as objects/D/SEQ.ino (a hard
 * link: no bytes copied, and the record is written only once the link is
 * there), or a copy of its bytes when it cannot be linked there (another
 * filesystem, a file the caller may not link). The program's own call then
 * removes the name. A kept inode keeps its xattrs too: the record lists
 * them only in a session whose readers would take no list for none. */
/* R (a J_REMOVE) with a copy of the bytes of the regular file at its path
 * (no hard link could keep the inode, or it must not be kept); R->st is
 * ST, what the copy was taken of. */
static int emit_copy(struct jseg *g, uint32_t txn, struct rec *r, uint64_t seq, struct stat *st)
{
	int fd = open_pre(r->path, st), err;

	if (fd < 0)
		return fd;
	r->st = st;
	err = S_ISREG(st->st_mode) ? emit_with_bytes(g, txn, r, fd, seq) : -EAGAIN;
	close_pre(fd);
	return err;
}

static int remove_file(struct jseg *g, uint32_t txn, struct rec *r, const struct at *at)
{
	struct jsession *s = g->s;
	uint64_t seq = jsession_next_seq(s), ino[2] = { r->st->st_dev, r->st->st_ino };
	struct stat st;
	char name[JOBJ_NAME_MAX];
	size_t dirlen = jobject_name(name, s->features, seq, "ino");
	int err = jsession_objfd(s);

	if (err < 0)
		return journal_side(err);
	err = linkat(at->fd, at->name, s->objfd, name, 0) == 0 ? 0 : -errno;
	if (err == -ENOENT && dirlen && (err = object_dir(s, name, dirlen)) == 0)
		err = linkat(at->fd, at->name, s->objfd, name, 0) == 0 ? 0 : -errno;
	/* ENOENT, ENOTDIR: the file is gone (the program's call fails too),
	 * or objects/ is what failed, when the file is still there */
	if ((err == -ENOENT || err == -ENOTDIR) && fstatat(at->fd, at->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		err = journal_side(err);
	if (!err) {
		r->tag = F_INODE;
		r->p1 = ino;
		r->n1 = sizeof(ino);
		if (s->features & JI_INODE_XATTRS) {
			r->rflags |= JR_INODE_XATTRS;
			r->xattrs = XA_NONE;
		}
		if (s->flags & JS_DURABLE)
			err = sync_object_dir(s, name, dirlen);
		if (!err)
			err = emit(g, txn, r, seq);
		if (err)
			unlinkat(s->objfd, name, 0);
		return err;
	}
	if (err != -EXDEV && err != -EPERM && err != -EMLINK)
		return err;
	return emit_copy(g, txn, r, seq, &st);
}

/* A regular file removed by the journal itself: its record first (the one
 * remove_file writes: the inode kept as objects/D/SEQ.ino), then its name
 * renamed to that object, in place of a hard link and the program's own
 * unlink (one system call where there were two, and no inode's link count
 * raised then dropped). Invariant 1 holds: the record is in the segment
 * before the name is gone; a process killed between the two leaves the
 * file in place, the very inode the record names, which its undo finds
 * already there (undo.c: is_preimage), the missing object being the
 * rename that never happened. The rename looks the file up as the
 * program's unlink would (its own DIRFD and name, a trailing slash and
 * all) and fails wherever that unlink fails (ENOENT, EACCES, EPERM in a
 * sticky directory or on an immutable file, EBUSY, EROFS: the kernel's
 * may_delete checks both the same way); where it fails for a reason of
 * its own (another mount: EXDEV, objects/ in trouble), the record is cut
 * off again and the link path and the program's own call decide, so that
 * the program always sees its unlink's own error. */
#define FALLBACK 2

struct move {
	const struct at *at;
	struct jsession *s;
	char *name;                    /* objects/D/SEQ.ino, relative to objects/ */
	size_t dirlen;
	int err;                       /* the rename's, once tried (1: not tried) */
};

static int move_to_object(void *arg)
{
	struct move *m = arg;

	m->err = renameat(m->at->fd, m->at->name, m->s->objfd, m->name) == 0 ? 0 : -errno;
	if (m->err == -ENOENT && m->dirlen) {
		/* the first object of its subdirectory */
		m->err = object_dir(m->s, m->name, m->dirlen);
		if (!m->err)
			m->err = renameat(m->at->fd, m->at->name, m->s->objfd, m->name) == 0 ? 0 : -errno;
	}
	return m->err;
}

/* The last directory (by its path) where this thread's rename into
 * objects/ failed with EXDEV (on the journal's filesystem, but another
 * mount of it: a bind mount): its next files go the link path straight
 * away, as those of another filesystem do, instead of each writing a
 * record the failed rename cuts off again. */
static __thread struct {
	uint8_t salt[J_SALT_LEN];
	char dir[256];
} other_mount __attribute__((tls_model("initial-exec")));

static bool in_other_mount(const struct jsession *s, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	return other_mount.dir[0] && n < sizeof(other_mount.dir) && !strncmp(other_mount.dir, path, n) &&
	       !other_mount.dir[n] && !memcmp(other_mount.salt, s->salt, J_SALT_LEN);
}

static void remember_other_mount(const struct jsession *s, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	other_mount.dir[0] = 0;
	if (!n || n >= sizeof(other_mount.dir))
		return;
	memcpy(other_mount.dir, path, n);
	other_mount.dir[n] = 0;
	memcpy(other_mount.salt, s->salt, J_SALT_LEN);
}

/* Whether the regular file ST can be renamed into objects/: on its
 * filesystem (objects/' device looked up once), not in a directory known
 * to be another mount of it. */
static bool movable(struct jsession *s, const char *path, const struct stat *st)
{
	struct stat o;

	if (!s->objdev_known) {
		if (jsession_objfd(s) < 0 || fstat(s->objfd, &o) < 0)
			return false;
		s->objdev = o.st_dev;
		s->objdev_known = true;
	}
	return st->st_dev == s->objdev && !in_other_mount(s, path);
}

/* JCAP_DONE: removed; FALLBACK: not, and no record left; else -errno. */
static int move_file(struct jseg *g, uint32_t txn, struct rec *r, const struct at *at)
{
	struct jsession *s = g->s;
	uint64_t seq = jsession_next_seq(s), ino[2] = { r->st->st_dev, r->st->st_ino };
	char name[JOBJ_NAME_MAX];
	struct move m = { at, s, name, jobject_name(name, s->features, seq, "ino"), 1 };
	struct then t = { move_to_object, &m, false };
	int err;

	r->tag = F_INODE;
	r->p1 = ino;
	r->n1 = sizeof(ino);
	r->rflags |= JR_INODE_XATTRS;
	r->xattrs = XA_NONE;
	err = emit_then(g, txn, r, seq, &t);
	if (!err)
		return JCAP_DONE;
	if (t.kept)             /* not removed, and its record could not be cut off */
		return -EIO;
	if (m.err == -EXDEV)
		remember_other_mount(s, r->path);
	return m.err != 1 ? FALLBACK : err;
}

/* KNOWN: the file's lstat taken just before, or NULL. */
static int rec_remove(struct jseg *g, uint32_t txn, const char *path, const struct at *at,
		      const struct stat *known)
{
	struct stat st;
	char target[PATH_MAX];
	ssize_t n;
	struct rec r = { .type = J_REMOVE, .path = path, .st = &st, .xattrs = XA_PATH };

	if (known)
		st = *known;
	else if (fstatat(at->fd, at->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;    /* nothing to keep: the call fails too */
	if (S_ISREG(st.st_mode))
		return remove_file(g, txn, &r, at);
	if (S_ISLNK(st.st_mode)) {
		n = readlinkat(at->fd, at->name, target, sizeof(target));
		if (n < 0)
			return -errno;
		r.tag = F_TARGET;
		r.p1 = target;
		r.n1 = (size_t)n;
	}
	return emit(g, txn, &r, 0);
}

/* The last directory whose weak J_META this thread knows is in the journal
 * for a transaction of a session (by its salt). Weak keys never go stale
 * (DEDUP_WEAK_GEN), so the next entry changed in that directory, an rm -rf's
 * usual case, needs neither a key hash nor a probe of the shared table. */
static __thread struct {
	uint8_t salt[J_SALT_LEN];
	uint32_t txn;
	uint64_t rewinds;
	char dir[256];
} known_parent __attribute__((tls_model("initial-exec")));

static bool parent_known(const struct jsession *s, uint32_t txn, const char *dir)
{
	return known_parent.dir[0] && known_parent.txn == txn && !strcmp(known_parent.dir, dir) &&
	       !memcmp(known_parent.salt, s->salt, J_SALT_LEN) && known_parent.rewinds == dedup_rewinds(s);
}

static void parent_remember(const struct jsession *s, uint32_t txn, const char *dir)
{
	size_t n = strlen(dir);

	known_parent.dir[0] = 0;
	if (n >= sizeof(known_parent.dir))
		return;
	memcpy(known_parent.salt, s->salt, J_SALT_LEN);
	known_parent.txn = txn;
	known_parent.rewinds = dedup_rewinds(s);
	memcpy(known_parent.dir, dir, n + 1);
}

/* The weak J_META of PATH's directory, before an entry in it is added,
 * removed or renamed, so that rewind restores its times. */
static int parent_meta(struct jseg *g, uint32_t txn, const char *path)
{
	char dir[PATH_MAX];
	struct dclaim c;
	int err;

	if (!jpath_parent(path, dir) || parent_known(g->s, txn, dir))
		return 0;
	if (dedup_claim(g->s, txn, DEDUP_WEAK_GEN, dir, DL_META, &c)) {
		parent_remember(g->s, txn, dir);
		return 0;
	}
	err = rec_meta(g, txn, dir, &weak);
	dedup_done(&c, err == 0);
	if (err == 0)
		parent_remember(g->s, txn, dir);
	return err == SKIPPED ? 0 : err;
}

static int create_absent(struct jseg *g, uint32_t txn, const char *path)
{
	int err = parent_meta(g, txn, path);

	if (err)
		return err;
	return once(g, txn, path, dedup_generation(g->s), DL_FULL, rec_create, NULL);
}

/* ---- the API --------------------------------------------------------------------- */

int jcap_create(struct jseg *g, uint32_t txn, const char *path)
{
	struct stat st;
	int err;

	/* Something is there: the call will fail (EEXIST) and change
	 * nothing, so nothing is recorded (a J_CREATE would have rewind remove
	 * it; a metadata record would claim a change, and a directory shared
	 * with others, /tmp after mkdir -p, would then look drifted). */
	if (lstat(path, &st) == 0)
		return 0;
	if (errno != ENOENT)
		return -errno;
	/* Not remembered: the new name may be a hard link to an inode with
	 * bytes in it (link), whose next write needs its own pre-image. */
	err = parent_meta(g, txn, path);
	if (!err)
		err = rec_create(g, txn, path, NULL);
	return err == SKIPPED ? 0 : err;
}

int jcap_content(struct jseg *g, uint32_t txn, const char *path)
{
	return once(g, txn, path, dedup_generation(g->s), DL_FULL, rec_content, NULL);
}

/* A cut of PATH to ARG (a uint64_t: cut_to) bytes: J_APPEND where the
 * file, as this lstat finds it and records it, is no longer (SIZED), else
 * its content. Decided on the very stat recorded: a writer through a
 * descriptor opened before (no lock held) may make it longer meanwhile,
 * and a J_APPEND of a size the cut then goes below cannot be undone. */
#define SIZED 2
static int rec_cut(struct jseg *g, uint32_t txn, const char *path, const void *arg)
{
	struct stat st;
	struct rec r = { .type = J_APPEND, .path = path, .st = &st, .xattrs = XA_PATH };
	int err;

	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || *(const uint64_t *)arg < (uint64_t)st.st_size)
		return rec_content(g, txn, path, NULL);
	err = emit(g, txn, &r, 0);
	if (!err)
		cut_sized = (uint64_t)st.st_size;
	return err ? err : SIZED;
}

/* rec_cut once per transaction (ALWAYS: each time, a file with other
 * names); a J_APPEND marks the size level only. */
static int cut(struct jseg *g, uint32_t txn, const char *path, bool always_)
{
	struct dclaim c;
	int err;

	if (always_) {
		err = rec_cut(g, txn, path, &cut_to);
		return err == SIZED || err == SKIPPED ? 0 : err;
	}
	if (dedup_claim(g->s, txn, dedup_generation(g->s), path, DL_FULL, &c))
		return 0;
	err = rec_cut(g, txn, path, &cut_to);
	if (err == SIZED)
		c.level = DL_APPEND;
	dedup_done(&c, err == 0 || err == SIZED);
	return err == SIZED || err == SKIPPED ? 0 : err;
}

int jcap_range(struct jseg *g, uint32_t txn, const char *path, struct jrange *want)
{
	struct dclaim c;
	struct stat st;
	int err;

	want->saved = false;
	if (!(g->s->features & JI_RANGES))
		return -ENOTSUP;
	if (lstat(path, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) && st.st_nlink > 1)     /* each change of those is recorded */
		return rec_bytes(g, txn, path, want);
	if (dedup_claim(g->s, txn, dedup_generation(g->s), path, DL_FULL, &c))
		return 0;       /* the whole file is this transaction's already */
	err = rec_bytes(g, txn, path, want);
	/* the path's last record is this transaction's, and saved its
	 * metadata (not its size: a later J_APPEND is still written) */
	c.level = DL_META;
	dedup_done(&c, err == 0);
	return err;
}

int jcap_append(struct jseg *g, uint32_t txn, const char *path)
{
	return once(g, txn, path, dedup_generation(g->s), DL_APPEND, rec_append, NULL);
}

int jcap_parent_meta(struct jseg *g, uint32_t txn, const char *path)
{
	return parent_meta(g, txn, path);
}

int jcap_meta(struct jseg *g, uint32_t txn, const char *path, bool is_weak)
{
	if (is_weak)
		return once(g, txn, path, DEDUP_WEAK_GEN, DL_META, rec_meta, &weak);
	return once(g, txn, path, dedup_generation(g->s), DL_META, rec_meta, &strong);
}

static int remove_known(struct jseg *g, uint32_t txn, const char *path, int dirfd, const char *name,
			const struct stat *known)
{
	struct at at = { dirfd, name };
	int err;

	if (!name || !*name || strchr(name, '/'))
		at = (struct at){ AT_FDCWD, path };
	dedup_bump(g->s);       /* the name will stand for another inode, or none */
	err = parent_meta(g, txn, path);
	return err ? err : rec_remove(g, txn, path, &at, known);
}

/* What move_file needs of a session: subdirectories for its objects, and
 * kept inodes that keep their own xattrs (no listing in the record). A
 * durable session keeps the link path, which syncs the object's name before
 * its record: a rename on an ext4 without a journal may reach the disk with
 * one of its two directory blocks and not the other. */
#define MOVE_FEATURES (JI_OBJDIRS | JI_INODE_XATTRS)

int jcap_unlinkat(struct jseg *g, uint32_t txn, const char *path, int dirfd, const char *name)
{
	struct jsession *s = g->s;
	struct at own = { dirfd, name }, at = own;
	struct stat st;
	bool plain;
	int err;

	if (!name || !*name || (s->flags & JS_DURABLE) || (s->features & MOVE_FEATURES) != MOVE_FEATURES)
		return remove_known(g, txn, path, dirfd, name, NULL);
	plain = !strchr(name, '/');
	if (!plain)
		at = (struct at){ AT_FDCWD, path };
	dedup_bump(s);          /* the name will stand for another inode, or none */
	err = parent_meta(g, txn, path);
	if (err)
		return err;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;    /* nothing to keep: the call fails too */
	if (S_ISREG(st.st_mode) && movable(s, path, &st)) {
		struct rec r = { .type = J_REMOVE, .path = path, .st = &st };

		err = move_file(g, txn, &r, &own);
		if (err != FALLBACK)
			return err;
	}
	/* the link path; the lstat serves it when it looked the file up the same way */
	return rec_remove(g, txn, path, &at, plain ? &st : NULL);
}

/* ---- a removed directory kept as one of objects/' next subdirectories ---- */

/* EACH of the entries of the directory open as FD, until it says stop
 * (false): true when every entry was read and none stopped it. */
static bool dir_each(int fd, bool (*each)(const char *name, void *arg), void *arg)
{
	char buf[1024] __attribute__((aligned(8)));
	ssize_t n;

	while ((n = getdents64(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			const struct dirent64 *d = (const struct dirent64 *)(buf + off);

			off += d->d_reclen;
			if (!each(d->d_name, arg))
				return false;
		}
	return n == 0;
}

/* ---- a kept inode's name in objects/ ------------------------------------- */

struct kfind {
	int dirfd;
	dev_t dev;
	ino_t ino;
	char name[256];
	uint64_t top;
	bool any;
};

static bool newest_dir(const char *name, void *arg)
{
	struct kfind *k = arg;
	uint64_t v = 0;
	const char *c = name;

	for (; *c >= '0' && *c <= '9' && v < UINT64_MAX / 10; c++)
		v = v * 10 + (uint64_t)(*c - '0');
	if (c != name && !*c && (!k->any || v > k->top)) {
		k->top = v;
		k->any = true;
	}
	return true;
}

static bool same_inode(const char *name, void *arg)
{
	struct kfind *k = arg;
	size_t n = strlen(name);
	struct stat st;

	if (n < 5 || n >= sizeof(k->name) || strcmp(name + n - 4, ".ino") ||
	    fstatat(k->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != k->dev || st.st_ino != k->ino)
		return true;
	memcpy(k->name, name, n + 1);
	return false;
}

int jkept_object(struct jsession *s, dev_t dev, ino_t ino, char out[PATH_MAX])
{
	struct kfind k = { .dev = dev, .ino = ino };
	int top = openat(s->dirfd, "objects", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = -ENOENT;

	if (top < 0)
		return -ENOENT;
	if (!(s->features & JI_OBJDIRS)) {
		k.dirfd = top;
		if (!dir_each(top, same_inode, &k) && k.name[0])
			err = snprintf(out, PATH_MAX, "objects/%s", k.name) < PATH_MAX ? 0 : -ENAMETOOLONG;
		close(top);
		return err;
	}
	dir_each(top, newest_dir, &k);
	/* the newest subdirectory first: the removal a program writes after
	 * is a recent one (a missing number: another removal's kept dir) */
	for (uint64_t d = k.top; k.any && err == -ENOENT; d--) {
		char sub[JOBJ_NAME_MAX];

		jobject_dir(sub, d);
		k.dirfd = openat(top, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (k.dirfd >= 0 && !dir_each(k.dirfd, same_inode, &k) && k.name[0])
			err = snprintf(out, PATH_MAX, "objects/%s/%s", sub, k.name) < PATH_MAX ? 0 : -ENAMETOOLONG;
		if (k.dirfd >= 0)
			close(k.dirfd);
		if (!d)
			break;
	}
	close(top);
	return err;
}

static bool dot_or_dotdot(const char *name, void *arg)
{
	(void)arg;
	return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

/* Whether the directory NAME in DIRFD lists nothing but . and .. */
static bool dir_empty(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	bool none = fd >= 0 && dir_each(fd, dot_or_dotdot, NULL);

	if (fd >= 0)
		close(fd);
	return none;
}

struct unheld {
	const struct stat *st;
	int fd, seen;
};

/* One entry of /proc/self/fd: not a descriptor on U->st. */
static bool fd_elsewhere(const char *name, void *arg)
{
	struct unheld *u = arg;
	struct stat o;
	int k = 0;

	if (name[0] < '0' || name[0] > '9')
		return true;
	for (const char *c = name; *c; c++)
		k = k * 10 + (*c - '0');
	return ++u->seen <= 64 && (k == u->fd || fstat(k, &o) < 0 || o.st_ino != u->st->st_ino ||
				   o.st_dev != u->st->st_dev);
}

/* No descriptor of this process is open on the directory ST: each of
 * /proc/self/fd looked at (a few in a program that removes trees; more
 * than 64, or no /proc: taken for one). A removed directory held open
 * reads as removed (no links, nothing made in it), where a kept one would
 * lead into the journal. */
static bool dir_unheld(const struct stat *st)
{
	struct unheld u = { st, open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC), 0 };
	bool unheld = u.fd >= 0 && dir_each(u.fd, fd_elsewhere, &u);

	if (u.fd >= 0)
		close(u.fd);
	return unheld;
}

/* Subdirectories of objects/ taken ahead of the seqs that need them. */
#define DIRS_AHEAD 8

static void note_dir(struct jsession *s, uint64_t d)
{
	uint64_t was = __atomic_load_n(&s->dirs_taken, __ATOMIC_RELAXED);

	while (was < d && !__atomic_compare_exchange_n(&s->dirs_taken, &was, d, true, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
}

/*
 * The directory AT (ST: its lstat), whose removal is in the journal now,
 * removed by renaming it to the next subdirectory of objects/ that no seq
 * has needed yet, instead of the program's rmdir: its inode is kept (its
 * block is not freed, and the subdirectory is not made by a mkdir, each of
 * which costs ext4 a scan of the inodes it freed last) and its objects go
 * in there. Only a directory of one block that is the caller's own (no
 * other user may keep a way into the journal: a process standing in it)
 * and that this process holds no descriptor on.
 * rmdir's semantics hold: a directory that is not empty is not taken (the
 * program's rmdir fails ENOTEMPTY); it is moved first to a name of this
 * thread's in objects/ and looked at there, so that an entry made in it
 * meanwhile (by a process outside the session: those of the session wait
 * on the path's locks) is found, and the directory put back (ENOTEMPTY),
 * before any object of the session can be in it; only then it becomes
 * objects/D. With no D left to take, the moved directory is removed.
 * Nothing of it is read back: the record holds the directory's metadata,
 * and rewind makes it anew. JCAP_DONE: removed; JCAP_NOTEMPTY: filled
 * meanwhile and its name taken since, so that it stays as objects/.keep-TID
 * (the program's call fails ENOTEMPTY); 0: the program's call goes on.
 */
static int keep_dir(struct jsession *s, const char *path, const struct at *at, const struct stat *st)
{
	uint64_t first = (__atomic_load_n(&s->ctr[0], __ATOMIC_RELAXED) + 1) / J_OBJ_FANOUT + 1;
	uint64_t d = __atomic_load_n(&s->dirs_taken, __ATOMIC_RELAXED) + 1;
	char name[JOBJ_NAME_MAX], own[JOBJ_NAME_MAX] = ".keep-";

	if (d < first)
		d = first;
	if (d >= first + DIRS_AHEAD || (s->features & MOVE_FEATURES) != MOVE_FEATURES || (s->flags & JS_DURABLE) ||
	    st->st_nlink > 2 || st->st_blocks * 512 > st->st_blksize || st->st_uid != geteuid() ||
	    !movable(s, path, st) || !dir_empty(at->fd, at->name) || !dir_unheld(st))
		return 0;
	own[6 + jdecimal(own + 6, (uint64_t)gettid())] = 0;
	if (renameat2(at->fd, at->name, s->objfd, own, RENAME_NOREPLACE) < 0)
		return 0;       /* another mount, Landlock's EXDEV ...: the rmdir decides */
	if (!dir_empty(s->objfd, own))
		return renameat2(s->objfd, own, at->fd, at->name, RENAME_NOREPLACE) == 0 ? 0 : JCAP_NOTEMPTY;
	if ((st->st_mode & 07777) == 0700 || fchmodat(s->objfd, own, 0700, 0) == 0)
		for (; d < first + DIRS_AHEAD; d++) {
			jobject_dir(name, d);
			note_dir(s, d);
			if (renameat2(s->objfd, own, s->objfd, name, RENAME_NOREPLACE) == 0)
				return JCAP_DONE;
			if (errno != EEXIST)
				break;
		}
	(void)unlinkat(s->objfd, own, AT_REMOVEDIR);    /* empty, the journal's: removed as asked */
	return JCAP_DONE;
}

int jcap_removeat(struct jseg *g, uint32_t txn, const char *path, int dirfd, const char *name, bool keep)
{
	struct at at = { dirfd, name };
	struct stat st;
	int err;

	if (!keep)
		return remove_known(g, txn, path, dirfd, name, NULL);
	if (!name || !*name || strchr(name, '/'))
		at = (struct at){ AT_FDCWD, path };
	if (fstatat(at.fd, at.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;    /* nothing to keep: the call fails too */
	err = remove_known(g, txn, path, at.fd, at.name, &st);
	return !err && S_ISDIR(st.st_mode) ? keep_dir(g->s, path, &at, &st) : err;
}

int jcap_remove(struct jseg *g, uint32_t txn, const char *path)
{
	return remove_known(g, txn, path, AT_FDCWD, path, NULL);
}

int jcap_remove_copy(struct jseg *g, uint32_t txn, const char *path)
{
	struct stat st;
	struct rec r = { .type = J_REMOVE, .path = path, .st = &st, .xattrs = XA_PATH };
	int err;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;    /* the call fails too */
	if (!S_ISREG(st.st_mode))
		return jcap_remove(g, txn, path);
	dedup_bump(g->s);       /* the name will stand for another inode, or none */
	err = parent_meta(g, txn, path);
	return err ? err : emit_copy(g, txn, &r, 0, &st);
}

static bool names_dir(const struct stat *st)
{
	return S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode);
}

/* A and B are on two mounts, which no rename crosses (EXDEV). Asked only
 * where their st_dev differ: one mount can show several (overlayfs' layers,
 * btrfs' subvolumes), and a rename across those may go through. */
static bool mounts_differ(const char *a, const char *b)
{
	struct statx x, y;

	if (statx(AT_FDCWD, a, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &x) < 0 ||
	    statx(AT_FDCWD, b, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &y) < 0)
		return false;
	return (x.stx_mask & y.stx_mask & STATX_MNT_ID) && x.stx_mnt_id != y.stx_mnt_id;
}

int jcap_rename(struct jseg *g, uint32_t txn, const char *from, const char *to, unsigned flags,
		bool *dirs)
{
	struct stat st, tst;
	uint32_t fl = flags;
	struct rec r = {
		.type = J_RENAME, .path = from, .path2 = to, .st = &st, .flags = &fl,
	};
	int err = 0;

	*dirs = true;           /* when in doubt */
	if (lstat(from, &st) < 0)
		return errno == ENOENT ? 0 : -errno;    /* the call fails too */
	*dirs = names_dir(&st);
	int terr = lstat(to, &tst) == 0 ? 0 : errno;   /* one look at the target serves all below */
	if (!terr)
		*dirs |= names_dir(&tst);
	if ((flags & RENAME_EXCHANGE) && terr)
		return terr == ENOENT ? 0 : -terr;      /* an exchange needs both */
	/* Across mounts the kernel refuses (EXDEV) and changes nothing; mv
	 * then copies and removes, each journaled on its own. A record of the
	 * rename would claim a move that never happened. */
	char dir[PATH_MAX];
	struct stat dst;
	const char *there = !terr ? to : jpath_parent(to, dir) && lstat(dir, &dst) == 0 ? dir : NULL;
	if (there && (!terr ? &tst : &dst)->st_dev != st.st_dev && mounts_differ(from, there))
		return 0;
	dedup_bump(g->s);
	if (!(flags & (RENAME_EXCHANGE | RENAME_NOREPLACE))) {
		if (!terr)
			err = remove_known(g, txn, to, AT_FDCWD, to, &tst);     /* its inode is about to vanish */
		else if (terr != ENOENT)
			err = -terr;
	}
	if (!err)
		err = parent_meta(g, txn, from);
	if (!err)
		err = parent_meta(g, txn, to);
	return err ? err : emit(g, txn, &r, 0);
}

void jcap_txn_ended(struct jsession *s, uint32_t txn)
{
	if (s->ctr)
		__atomic_store_n((uint32_t *)(void *)((char *)s->ctr + JL_RELEASED_AT) + txn % JL_RELEASED_SLOTS,
				 txn | JL_ENDED, __ATOMIC_RELEASE);
}

/* FN's record of PATH, whatever the table says. */
static int always(struct jseg *g, uint32_t txn, const char *path, capture_fn fn, const void *arg)
{
	int err = fn(g, txn, path, arg);

	return err == SKIPPED ? 0 : err;
}

/* The change about to happen to the existing PATH (lstat'd as ST).
 *
 * A file of several names is one file to its changes but several paths to
 * the table, which would let a change through one name skip its record
 * after another name's record (a truncation after an append through the
 * other name, and the rewind finds the file shorter than the append's
 * record said). So every change of such a file is recorded; they are rare
 * (a workspace's files have one name; package stores' links are read). */
static int capture_present(struct jseg *g, uint32_t txn, const char *path, enum jcap_op op,
			   const struct stat *st)
{
	if (op == JC_TRUNC && S_ISREG(st->st_mode) && cut_to != JCUT_ANY)
		return cut(g, txn, path, st->st_nlink > 1);
	if (S_ISREG(st->st_mode) && st->st_nlink > 1 && op != JC_REMOVE)
		return always(g, txn, path, op == JC_META ? rec_meta : op == JC_APPEND ? rec_append : rec_content,
			      &strong);
	switch (op) {
	case JC_REMOVE:
		return jcap_remove(g, txn, path);
	case JC_META:
		return jcap_meta(g, txn, path, false);
	case JC_APPEND:
		return S_ISREG(st->st_mode) ? jcap_append(g, txn, path) : jcap_meta(g, txn, path, false);
	case JC_WRITE:
	case JC_TRUNC:
	case JC_RANGE:
		return S_ISREG(st->st_mode) ? jcap_content(g, txn, path) : jcap_meta(g, txn, path, false);
	}
	return -EINVAL;
}

static bool opens(enum jcap_op op)
{
	return op == JC_WRITE || op == JC_TRUNC || op == JC_APPEND;
}

int jcap_path(struct jseg *g, uint32_t txn, const char *path, enum jcap_op op)
{
	return jcap_path_known(g, txn, path, op, NULL);
}

int jcap_path_known(struct jseg *g, uint32_t txn, const char *path, enum jcap_op op,
		    const struct stat *known)
{
	char buf[2][PATH_MAX];
	int err = -ELOOP;

	/* An open follows symlinks (a dangling one creates its target), and
	 * a path that vanishes between lstat and capture is looked at again. */
	for (int hop = 0; hop < MAX_HOPS; hop++) {
		struct stat st;

		if (known && hop == 0 && known->st_mode)
			st = *known;
		else if (known && hop == 0)
			return opens(op) ? create_absent(g, txn, path) : 0;
		else if (lstat(path, &st) < 0) {
			if (errno != ENOENT)
				return -errno;
			return opens(op) ? create_absent(g, txn, path) : 0;
		}
		if (S_ISLNK(st.st_mode) && opens(op)) {
			err = link_target(path, buf[hop & 1]);
			if (err)
				return err;
			path = buf[hop & 1];
			err = -ELOOP;
			continue;
		}
		err = capture_present(g, txn, path, op, &st);
		if (err != -ENOENT)
			return err;
	}
	return err;
}
