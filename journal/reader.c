/*
 * reader.c - read a session: the session file and every segment, checked
 * frame by frame (length, crc, field layout, hash chain), merged by seq.
 * Every intact record is kept; damage is listed with its file and offset.
 * No input can crash it: every length is checked before it is used.
 * Runs in txreplay only, so it may allocate.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <sodium.h>
#include "internal.h"

/* The fuzz target builds with this so that it gets past the checksums. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define FUZZING 1
#else
#define FUZZING 0
#endif

static const char *const type_names[] = {
	[J_SESSION] = "session", [J_SEGMENT] = "segment", [J_TXN_BEGIN] = "txn-begin",
	[J_TXN_END] = "txn-end", [J_EXEC] = "exec", [J_REFUSE] = "refuse",
	[J_CREATE] = "create", [J_CONTENT] = "content", [J_APPEND] = "append",
	[J_REMOVE] = "remove", [J_RENAME] = "rename", [J_META] = "meta",
	[J_REWOUND] = "rewound", [J_UNDOING] = "undoing",
};

const char *jtype_name(unsigned type)
{
	if (type < sizeof(type_names) / sizeof(type_names[0]) && type_names[type])
		return type_names[type];
	return "unknown";
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q) {
		fputs("txreplay: out of memory\n", stderr);
		exit(1);
	}
	return q;
}

/* Room for one more element in *P (holding N of SIZE bytes), doubling. */
static void *grow(void *p, size_t n, size_t size)
{
	if (n & (n - 1) || n < 16)      /* not a power of two past 16: room left */
		return n < 16 && !p ? xrealloc(p, 16 * size) : p;
	return xrealloc(p, 2 * n * size);
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(xrealloc(NULL, n), s, n);
}

static void damage(struct jreader *r, const char *file, uint64_t off, bool tail, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	struct jdamage *d;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->dmg = xrealloc(r->dmg, (r->ndmg + 1) * sizeof(*r->dmg));
	d = &r->dmg[r->ndmg++];
	d->file = xstrdup(file);
	d->offset = off;
	d->what = xstrdup(msg);
	d->tail = tail;
}

/* Read a whole file (by name, relative to DFD). */
static int slurp(int dfd, const char *name, uint8_t **out, size_t *len)
{
	struct stat st;
	uint8_t *p;
	size_t n = 0;
	/* O_NONBLOCK: a FIFO in its place does not hold the reader up */
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		int err = errno;
		close(fd);
		return -err;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	p = xrealloc(NULL, (size_t)st.st_size + 1);
	while (n < (size_t)st.st_size) {
		ssize_t k = read(fd, p + n, (size_t)st.st_size - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	*out = p;
	*len = n;
	return 0;
}

/* Decode the fields of a framed body into C. False when they do not fill
 * the body exactly. */
static bool decode_fields(struct jrecord *c, const uint8_t *body, uint32_t len)
{
	uint16_t nf;
	size_t off = J_BODY_FIXED, end = len - J_LINK_LEN;

	memset(c->f, 0, sizeof(c->f));
	memcpy(&nf, body + 2, 2);
	for (uint16_t i = 0; i < nf; i++) {
		uint16_t tag;
		uint32_t n;

		if (end - off < J_FIELD_HDR)
			return false;
		memcpy(&tag, body + off, 2);
		memcpy(&n, body + off + 2, 4);
		off += J_FIELD_HDR;
		if (n > end - off)
			return false;
		if (tag <= F_TAG_MAX && !c->f[tag].present) {
			c->f[tag].p = body + off;
			c->f[tag].n = n;
			c->f[tag].present = true;
		}
		off += n;
	}
	return off == end;
}

static void decode_fixed(struct jrecord *c, const uint8_t *body, uint32_t len)
{
	c->type = body[0];
	c->flags = body[1];
	memcpy(&c->txn, body + 4, 4);
	memcpy(&c->seq, body + 8, 8);
	memcpy(&c->time_ns, body + 16, 8);
	c->body = body;
	c->len = len;
}

static void hexlink(char *out, const uint8_t link[J_LINK_LEN])
{
	for (int i = 0; i < J_LINK_LEN; i++)
		sprintf(out + 2 * i, "%02x", link[i]);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Walk the records of one file. Returns the number kept. */
static size_t scan(struct jreader *r, const char *name, const uint8_t *p, size_t n,
		   uint32_t seed, const uint8_t salt[J_SALT_LEN], unsigned kind)
{
	uint8_t link[J_LINK_LEN];
	size_t off = J_FILE_HDR, kept = 0;
	uint32_t pid = 0, ppid = 0;
	bool chain_ok = true;
	char hex[2 * J_LINK_LEN + 1];

	jchain_start(link, salt, p);
	while (off < n) {
		uint32_t crc, len;
		struct jrecord c;
		const uint8_t *body;

		if (kind == J_KIND_SEGMENT && p[off] == 0 && all_zero(p + off, n - off))
			break;  /* room a writer reserved (format.h): the end, not damage */
		if (n - off < J_FRAME_HDR) {
			damage(r, name, off, true, "torn record: %zu stray bytes at the end", n - off);
			break;
		}
		memcpy(&crc, p + off, 4);
		memcpy(&len, p + off + 4, 4);
		if (len < J_REC_MIN || len > J_REC_MAX) {
			damage(r, name, off, true, "corrupt record: impossible length %u", len);
			break;
		}
		if (len > n - off - J_FRAME_HDR) {
			damage(r, name, off, true, "torn record: %u bytes framed, %zu present",
			       len, n - off - J_FRAME_HDR);
			break;
		}
		if (!FUZZING && jcrc_unmask(crc) != jcrc32c(seed, p + off + 4, (size_t)len + 4)) {
			damage(r, name, off, true, "corrupt record: checksum mismatch");
			break;
		}
		body = p + off + J_FRAME_HDR;
		memset(&c, 0, sizeof(c));
		decode_fixed(&c, body, len);
		if (!decode_fields(&c, body, len)) {
			damage(r, name, off, true, "corrupt record: fields do not fit its length");
			break;
		}
		jhash(link, link, J_LINK_LEN, body, len - J_LINK_LEN);
		if (!FUZZING && chain_ok && memcmp(link, body + len - J_LINK_LEN, J_LINK_LEN)) {
			damage(r, name, off, false, "hash chain broken at seq %llu: a record was edited, "
			       "removed or reordered", (unsigned long long)c.seq);
			chain_ok = false;
		}
		if (!chain_ok)      /* follow the chain as written, report once */
			memcpy(link, body + len - J_LINK_LEN, J_LINK_LEN);
		if (c.type == 0 || (c.type > J_TYPE_MAX && c.type < J_SKIPPABLE)) {
			damage(r, name, off, false, "record type %u is unknown (written by a newer ftsbx?)",
			       c.type);
			off += J_FRAME_HDR + len;
			continue;
		}
		if (kind == J_KIND_SEGMENT && kept == 0 && c.type != J_SEGMENT)
			damage(r, name, off, false, "segment does not start with a segment record");
		if (kind == J_KIND_SEGMENT && c.type == J_SEGMENT) {
			/* a shared segment holds one run of records per writer */
			jrec_u32(&c, F_PID, &pid);
			jrec_u32(&c, F_PPID, &ppid);
		}
		c.pid = pid;
		c.ppid = ppid;
		c.segment = name;
		c.offset = off;
		off += J_FRAME_HDR + len;
		kept++;
		if (kind == J_KIND_SESSION) {
			r->session = c;
			break;
		}
		if (c.type >= J_SKIPPABLE)
			continue;
		if (r->nrec == r->caprec) {
			r->caprec = r->caprec ? 2 * r->caprec : 256;
			r->rec = xrealloc(r->rec, r->caprec * sizeof(*r->rec));
		}
		r->rec[r->nrec++] = c;
	}
	if (kind == J_KIND_SEGMENT) {
		char *h = xrealloc(NULL, strlen(name) + sizeof(hex) + 2);
		hexlink(hex, link);
		sprintf(h, "%s %s", name, hex);
		r->heads = grow(r->heads, r->nheads, sizeof(*r->heads));
		r->heads[r->nheads++] = h;
	}
	return kept;
}

static void keep_map(struct jreader *r, void *p, size_t n)
{
	r->maps = grow(r->maps, r->nmaps, sizeof(*r->maps));
	r->maplens = grow(r->maplens, r->nmaps, sizeof(*r->maplens));
	r->maps[r->nmaps] = p;
	r->maplens[r->nmaps++] = n;
}

static char *keep_name(struct jreader *r, const char *name)
{
	char *s = xstrdup(name);

	keep_map(r, s, 0);
	return s;
}

static int cmp_seq(const void *a, const void *b)
{
	const struct jrecord *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether the shared page of a JI_LAZYDIRS session says log/ was made. */
static bool log_was_made(const struct jreader *r)
{
	uint32_t made = 0;
	int fd = openat(r->dirfd, "shared", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return true;    /* no telling: a missing log/ is reported */
	if (pread(fd, &made, sizeof(made), JL_DIRS_MADE) != (ssize_t)sizeof(made))
		made = JL_MADE_LOG;
	close(fd);
	return made & JL_MADE_LOG;
}

/* An empty segment NAME, that a writer made (O_EXCL) and has not written
 * its header into yet: SEQ-PID.ftj whose writer lives, or lane-K.ftj whose
 * length the shared table still has as nothing written (a taker between
 * making it and its header, or one that died there: the lane is never
 * taken again). Otherwise its records were lost or removed. */
static bool empty_is_young(struct jreader *r, const char *name)
{
	unsigned long long seq;
	uint64_t end = 1;
	int pid, k, fd;
	char tail[8];

	if (sscanf(name, "%llu-%d.ft%1[j]", &seq, &pid, tail) == 3 && pid > 0)
		return kill(pid, 0) == 0 || errno == EPERM;
	if (sscanf(name, "lane-%d.ft%1[j]", &k, tail) != 2 || k < 0 || k >= JL_LANES)
		return false;
	fd = openat(r->dirfd, r->features & JI_SHARED ? "shared" : "locks", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (pread(fd, &end, sizeof(end), (off_t)(JL_LANE_AT(r->features & JI_SHARED, k) + offsetof(struct jlane, end))) !=
	    (ssize_t)sizeof(end))
		end = 1;
	close(fd);
	return end == 0;
}

static int read_segments(struct jreader *r, const uint8_t salt[J_SALT_LEN], uint32_t seed)
{
	/* the mark is read first: a writer may make log/ and set it meanwhile */
	bool made = !(r->features & JI_LAZYDIRS) || log_was_made(r);
	int lfd = openat(r->dirfd, "log", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char **names = NULL;
	size_t nn = 0;
	struct dirent *e;
	DIR *d;

	if (lfd < 0 && errno == ENOENT && !made)
		return 0;       /* nothing was ever written */
	if (lfd < 0)
		return -errno;
	d = fdopendir(lfd);
	if (!d) {
		close(lfd);
		return -errno;
	}
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || strcmp(e->d_name + l - 4, ".ftj"))
			continue;
		names = grow(names, nn, sizeof(*names));
		names[nn++] = xstrdup(e->d_name);
	}
	if (nn)
		qsort(names, nn, sizeof(*names), cmp_name);
	for (size_t i = 0; i < nn; i++) {
		char rel[300];
		uint8_t *p, s2[J_SALT_LEN];
		uint32_t features;
		size_t n;
		int err;

		snprintf(rel, sizeof(rel), "log/%s", names[i]);
		err = slurp(dirfd(d), names[i], &p, &n);
		/* Gone since the listing (a writer that removed it again on a
		 * full disk), or empty while a writer may be between making it
		 * and writing its header: no record in it, nothing lost. */
		if (err && err != -ENOENT)
			damage(r, rel, 0, true, "cannot read: %s", strerror(-err));
		else if (!err && n == 0 && !empty_is_young(r, names[i]))
			damage(r, rel, 0, true, "empty segment: its writer is gone (records lost, or emptied)");
		if (err || n == 0) {
			if (!err)
				free(p);
			free(names[i]);
			continue;
		}
		keep_map(r, p, n);
		err = jfile_header_check(p, n, J_KIND_SEGMENT, s2, &features);
		if (err == -EPROTONOSUPPORT)
			damage(r, rel, 0, false, "segment of another format version or with unknown features");
		else if (!err && features != r->features)
			damage(r, rel, 0, false, "segment with features %#x in a session with %#x",
			       (unsigned)features, (unsigned)r->features);
		else if (err)
			damage(r, rel, 0, true, n < J_FILE_HDR ? "torn segment header" : "not a segment (bad header)");
		else if (memcmp(s2, salt, J_SALT_LEN))
			damage(r, rel, 0, false, "segment of another session (salt differs)");
		else
			scan(r, keep_name(r, rel), p, n, seed, salt, J_KIND_SEGMENT);
		free(names[i]);
	}
	free(names);
	closedir(d);
	return 0;
}

static void check_duplicates(struct jreader *r)
{
	for (size_t i = 1; i < r->nrec; i++)
		if (r->rec[i].seq == r->rec[i - 1].seq)
			damage(r, r->rec[i].segment, r->rec[i].offset, false,
			       "duplicate seq %llu (also in %s)", (unsigned long long)r->rec[i].seq,
			       r->rec[i - 1].segment);
}

static int open_reader(struct jreader *r, const char *dir, char *err, size_t errlen)
{
	uint8_t *p, salt[J_SALT_LEN];
	size_t n;
	int e;

	memset(r, 0, sizeof(*r));
	r->dir = xstrdup(dir);
	r->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->dirfd < 0) {
		e = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", dir, strerror(-e));
		return e;
	}
	e = slurp(r->dirfd, "session", &p, &n);
	if (e) {
		snprintf(err, errlen, "'%s' is not an ftsbx journal: %s", dir,
			 e == -ENOENT ? "no session file" : strerror(-e));
		return e == -ENOENT ? -EPROTO : e;
	}
	keep_map(r, p, n);
	e = jfile_header_check(p, n, J_KIND_SESSION, salt, &r->features);
	if (e == -EPROTONOSUPPORT) {
		uint16_t v;
		uint32_t f;
		memcpy(&v, p + 8, 2);
		memcpy(&f, p + 12, 4);
		if (v != J_VERSION)
			snprintf(err, errlen, "'%s' is journal format version %u; this txreplay reads version %u "
				 "(written by a newer ftsbx?)", dir, v, J_VERSION);
		else
			snprintf(err, errlen, "'%s' uses journal features %#x that this txreplay does not know "
				 "(written by a newer ftsbx?)", dir, (unsigned)(f & ~JI_KNOWN));
		return e;
	}
	if (e) {
		snprintf(err, errlen, "'%s' is not an ftsbx journal: bad session header", dir);
		return e;
	}
	scan(r, "session", p, n, jseed(salt), salt, J_KIND_SESSION);
	if (r->session.type != J_SESSION) {
		snprintf(err, errlen, "'%s': the session record is damaged", dir);
		return -EBADMSG;
	}
	e = read_segments(r, salt, jseed(salt));
	if (e) {
		snprintf(err, errlen, "'%s': cannot read log/: %s", dir, strerror(-e));
		return e;
	}
	if (r->nrec)
		qsort(r->rec, r->nrec, sizeof(*r->rec), cmp_seq);
	check_duplicates(r);
	return 0;
}

/* A reader that could not open holds nothing: the caller need not close it. */
int jreader_open(struct jreader *r, const char *dir, char *err, size_t errlen)
{
	int e = open_reader(r, dir, err, errlen);

	if (e)
		jreader_close(r);
	return e;
}

void jreader_close(struct jreader *r)
{
	for (size_t i = 0; i < r->ndmg; i++) {
		free(r->dmg[i].file);
		free(r->dmg[i].what);
	}
	for (size_t i = 0; i < r->nheads; i++)
		free(r->heads[i]);
	for (size_t i = 0; i < r->nmaps; i++)
		free(r->maps[i]);
	free(r->dmg);
	free(r->heads);
	free(r->maps);
	free(r->maplens);
	free(r->rec);
	free(r->dir);
	if (r->dirfd >= 0)
		close(r->dirfd);
	memset(r, 0, sizeof(*r));
	r->dirfd = -1;
}

const struct jrecord *jreader_find(const struct jreader *r, uint64_t seq)
{
	struct jrecord key = { .seq = seq };

	if (!r->nrec)
		return NULL;
	return bsearch(&key, r->rec, r->nrec, sizeof(*r->rec), cmp_seq);
}

void jreader_object(const struct jreader *r, uint64_t seq, const char *ext, char out[JOBJ_PATH_MAX])
{
	memcpy(out, "objects/", 8);
	jobject_name(out + 8, r->features, seq, ext);
}

bool jrec_u32(const struct jrecord *c, enum jtag t, uint32_t *v)
{
	if (t > F_TAG_MAX || !c->f[t].present || c->f[t].n != 4)
		return false;
	memcpy(v, c->f[t].p, 4);
	return true;
}

bool jrec_u64(const struct jrecord *c, enum jtag t, uint64_t *v)
{
	if (t > F_TAG_MAX || !c->f[t].present || c->f[t].n != 8)
		return false;
	memcpy(v, c->f[t].p, 8);
	return true;
}

bool jrec_stat(const struct jrecord *c, enum jtag t, struct jstat *st)
{
	if (t > F_TAG_MAX || !c->f[t].present || c->f[t].n != sizeof(*st))
		return false;
	memcpy(st, c->f[t].p, sizeof(*st));
	return true;
}

char *jrec_strdup(const struct jrecord *c, enum jtag t)
{
	char *s;

	if (t > F_TAG_MAX || !c->f[t].present)
		return NULL;
	s = xrealloc(NULL, c->f[t].n + 1);
	memcpy(s, c->f[t].p, c->f[t].n);
	s[c->f[t].n] = 0;
	return s;
}

/* Pre-image bytes: stream them to FD while hashing; check size and hash. */
struct sink {
	int fd;
	uint64_t size;
	crypto_generichash_blake2b_state h;
};

static int sink_put(struct sink *k, const void *p, size_t n)
{
	k->size += n;
	crypto_generichash_blake2b_update(&k->h, p, n);
	return k->fd >= 0 ? jwrite_all(k->fd, p, n) : 0;
}

/* Inflate into K, no further than LIMIT bytes; MORE refills the input
 * (NULL: all input is already in Z). -EBADMSG for a damaged stream, -EIO
 * when the sink cannot be written. */
static int inflate_to(struct sink *k, z_stream *z, uint64_t limit,
		      int (*more)(void *, z_stream *), void *ctx)
{
	uint8_t out[65536];
	int zr = Z_OK;

	while (zr != Z_STREAM_END) {
		if (z->avail_in == 0 && (!more || more(ctx, z) < 0))
			return -EBADMSG;    /* the stream ends early */
		z->next_out = out;
		z->avail_out = sizeof(out);
		zr = inflate(z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
			return -EBADMSG;
		if (k->size + (sizeof(out) - z->avail_out) > limit)
			return -EBADMSG;
		if (sink_put(k, out, sizeof(out) - z->avail_out) < 0)
			return -EIO;
	}
	return 0;
}

struct filein { int fd; uint8_t buf[65536]; };

static int file_more(void *ctx, z_stream *z)
{
	struct filein *f = ctx;
	ssize_t n = read(f->fd, f->buf, sizeof(f->buf));

	if (n < 0)
		return -1;
	if (n == 0)
		return -1;
	z->next_in = f->buf;
	z->avail_in = (uInt)n;
	return 0;
}

int jrec_content(const struct jreader *r, const struct jrecord *c, int fd, char *err, size_t errlen)
{
	const struct jfield *f = c->f[F_DATA].present ? &c->f[F_DATA] : &c->f[F_OBJECT];
	struct jdata d;
	struct sink k = { .fd = fd };
	uint8_t hash[32];
	z_stream z;
	int e = 0;

	if (!f->present || f->n < sizeof(d)) {
		snprintf(err, errlen, "seq %llu has no saved content", (unsigned long long)c->seq);
		return -ENODATA;
	}
	memcpy(&d, f->p, sizeof(d));
	crypto_generichash_blake2b_init(&k.h, NULL, 0, 32);
	memset(&z, 0, sizeof(z));
	if (f == &c->f[F_DATA] && d.method == JD_STORED) {
		e = sink_put(&k, f->p + sizeof(d), f->n - sizeof(d));
	} else if (f == &c->f[F_DATA] && d.method == JD_ZLIB) {
		z.next_in = (uint8_t *)f->p + sizeof(d);
		z.avail_in = f->n - (uInt)sizeof(d);
		if (inflateInit(&z) != Z_OK)
			return -ENOMEM;
		e = inflate_to(&k, &z, d.size, NULL, NULL);
		inflateEnd(&z);
	} else if (f == &c->f[F_OBJECT] && d.method == JD_GZIP) {
		char name[JOBJ_PATH_MAX];
		struct filein *in = xrealloc(NULL, sizeof(*in));

		jreader_object(r, c->seq, "gz", name);
		in->fd = openat(r->dirfd, name, O_RDONLY | O_CLOEXEC);
		if (in->fd < 0) {
			e = -errno;
			snprintf(err, errlen, "%s: %s", name, strerror(-e));
			free(in);
			return e;
		}
		if (inflateInit2(&z, 31) != Z_OK) {
			close(in->fd);
			free(in);
			return -ENOMEM;
		}
		e = inflate_to(&k, &z, d.size, file_more, in);
		inflateEnd(&z);
		close(in->fd);
		free(in);
	} else {
		snprintf(err, errlen, "seq %llu: unknown content method %u", (unsigned long long)c->seq,
			 d.method);
		return -EBADMSG;
	}
	crypto_generichash_blake2b_final(&k.h, hash, 32);
	if (e == -EIO && fd >= 0) {
		snprintf(err, errlen, "seq %llu: cannot write the content: %s", (unsigned long long)c->seq,
			 strerror(errno));
		return -EIO;
	}
	if (e || k.size != d.size || memcmp(hash, d.hash, 32)) {
		snprintf(err, errlen, "seq %llu: saved content is damaged (%s)", (unsigned long long)c->seq,
			 e ? "does not decompress" : k.size != d.size ? "wrong size" : "hash mismatch");
		return -EBADMSG;
	}
	return 0;
}
