/*
 * writer.c - records and segments: build a record in a caller's buffer,
 * stamp it with a seq and the time, chain and frame it, append it with one
 * write(2), or, once a process has written MAP_AFTER records into a lane,
 * with a copy into a mapped window of the lane's file (no system call: an
 * rm -rf writes one record per file). Runs inside host processes: no
 * malloc, no stdio; the only lock is the segment's in-process mutex, which
 * orders seq, chain and write.
 *
 * The mapped window. The lane's file is grown by fallocate (so that a full
 * disk fails there, as a write would, and never as a SIGBUS of the host at a
 * page of the window) and mapped MAP_SHARED from the page holding the end of
 * its last record: a record copied in is in the page cache, the same pages a
 * reader reads, so it survives a kill -9 of its writer as a written one does.
 * The file then ends in zeros after the last record (at most a window):
 * format.h lets a segment end in zero bytes, which a reader takes as its end
 * and the next taker of the lane checks and cuts off, whether its last owner
 * gave it back or died holding it. A copy cut short by a kill leaves
 * non-zero bytes after the last whole record: a torn tail, as a short write
 * does. Durable sessions keep write(2) and fdatasync.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "internal.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

void jb_init(struct jbuild *b, void *buf, size_t cap, enum jtype type, unsigned flags, uint32_t txn)
{
	b->buf = buf;
	b->cap = cap;
	b->nfields = 0;
	b->overflow = cap < J_FRAME_HDR + J_REC_MIN;
	b->len = J_FRAME_HDR + J_BODY_FIXED;
	if (b->overflow)
		return;
	memset(b->buf, 0, b->len);
	b->buf[8] = (uint8_t)type;
	b->buf[9] = (uint8_t)flags;
	put32(b->buf + 12, txn);
}

void *jb_reserve(struct jbuild *b, enum jtag tag, size_t n)
{
	uint8_t *p;

	if (b->overflow || n > J_REC_MAX || b->len + J_FIELD_HDR + n + J_LINK_LEN > b->cap) {
		b->overflow = true;
		return NULL;
	}
	p = b->buf + b->len;
	put16(p, (uint16_t)tag);
	put32(p + 2, (uint32_t)n);
	b->len += J_FIELD_HDR + n;
	b->nfields++;
	return p + J_FIELD_HDR;
}

void jb_trim_last(struct jbuild *b, size_t n)
{
	uint8_t *f = b->buf + J_FRAME_HDR + J_BODY_FIXED;
	uint8_t *last = NULL;
	uint32_t m;

	if (b->overflow || !b->nfields)
		return;
	for (uint16_t i = 0; i < b->nfields; i++) {
		last = f;
		memcpy(&m, f + 2, 4);
		f += J_FIELD_HDR + m;
	}
	memcpy(&m, last + 2, 4);
	if (n > m)
		return;
	put32(last + 2, (uint32_t)n);
	b->len -= m - n;
}

void jb_bytes(struct jbuild *b, enum jtag tag, const void *p, size_t n)
{
	void *d = jb_reserve(b, tag, n);

	if (d && n)
		memcpy(d, p, n);
}

void jb_str(struct jbuild *b, enum jtag tag, const char *s)
{
	if (s)
		jb_bytes(b, tag, s, strlen(s));
}

void jb_u32(struct jbuild *b, enum jtag tag, uint32_t v) { jb_bytes(b, tag, &v, 4); }
void jb_u64(struct jbuild *b, enum jtag tag, uint64_t v) { jb_bytes(b, tag, &v, 8); }

void jb_argv(struct jbuild *b, enum jtag tag, char *const *argv)
{
	size_t n = 0;
	uint8_t *d;

	if (!argv)
		return;
	for (char *const *a = argv; *a; a++)
		n += strlen(*a) + 1;
	d = jb_reserve(b, tag, n);
	if (!d)
		return;
	for (char *const *a = argv; *a; a++) {
		size_t l = strlen(*a) + 1;
		memcpy(d, *a, l);
		d += l;
	}
}

/* Finish B: seq, time, field count, chain link (updating LINK), crc. */
int jframe(const struct jsession *s, uint8_t link[J_LINK_LEN], struct jbuild *b, uint64_t seq, int64_t t)
{
	uint8_t *body = b->buf + J_FRAME_HDR;
	size_t blen;

	if (b->overflow)
		return -E2BIG;
	put16(body + 2, b->nfields);
	put64(body + 8, seq);
	put64(body + 16, (uint64_t)t);
	blen = b->len - J_FRAME_HDR;
	jhash(link, link, J_LINK_LEN, body, blen);
	memcpy(b->buf + b->len, link, J_LINK_LEN);
	b->len += J_LINK_LEN;
	put32(b->buf + 4, (uint32_t)(b->len - J_FRAME_HDR));
	put32(b->buf, jcrc_mask(jcrc32c(s->seed, b->buf + 4, b->len - 4)));
	return 0;
}

void jfile_header(uint8_t h[J_FILE_HDR], const uint8_t salt[J_SALT_LEN], unsigned kind, uint32_t features)
{
	memset(h, 0, J_FILE_HDR);
	memcpy(h, J_MAGIC, 8);
	put16(h + 8, J_VERSION);
	put16(h + 10, (uint16_t)kind);
	put32(h + 12, features);
	memcpy(h + 16, salt, J_SALT_LEN);
	put32(h + 28, jcrc32c(0, h, 28));
}

void jchain_start(uint8_t link[J_LINK_LEN], const uint8_t salt[J_SALT_LEN], const uint8_t h[J_FILE_HDR])
{
	jhash(link, salt, J_SALT_LEN, h, J_FILE_HDR);
}

/* writev of the N buffers at IOV, all of them (IOV is used up). */
int jwritev_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int jwrite_all(int fd, const void *p, size_t n)
{
	const uint8_t *s = p;

	while (n) {
		ssize_t w = write(fd, s, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

int jfd_high(int fd)
{
	int h;

	if (fd < 0 || fd >= JFD_FLOOR)
		return fd;
	h = fcntl(fd, F_DUPFD_CLOEXEC, JFD_FLOOR);
	if (h < 0)
		return fd;      /* a low limit: keep the low one */
	close(fd);
	return h;
}

/* The J_SEGMENT record that starts this process's records (in its own
 * segment, or its run in a shared one), built into BUF. */
static void segment_record(struct jbuild *b, uint8_t *buf, size_t cap, pid_t pid, char *const *argv)
{
	jb_init(b, buf, cap, J_SEGMENT, 0, 0);
	jb_u32(b, F_PID, (uint32_t)pid);
	jb_u32(b, F_PPID, (uint32_t)getppid());
	if (argv) {
		jb_argv(b, F_ARGV, argv);
		if (b->overflow) {      /* an enormous argv: keep the program name */
			char *const a0[] = { argv[0], NULL };
			jb_init(b, buf, cap, J_SEGMENT, 0, 0);
			jb_u32(b, F_PID, (uint32_t)pid);
			jb_u32(b, F_PPID, (uint32_t)getppid());
			jb_argv(b, F_ARGV, a0);
		}
	}
}

/* "lane-%03d.ftj", without snprintf: a fork child that takes a lane would
 * fault in the pages of printf's machinery for it. */
static void lane_name(char name[32], int k)
{
	size_t n = 5;

	memcpy(name, "lane-", 5);
	for (int pad = k < 10 ? 2 : k < 100 ? 1 : 0; pad; pad--)
		name[n++] = '0';
	n += jdecimal(name + n, (unsigned)k);
	memcpy(name + n, ".ftj", 5);
}

/* Give a lane up for good (its file could not be used, or may end in a
 * partial record): nobody takes it again. */
static void lane_break(struct jlane *l)
{
	__atomic_store_n(&l->state, JL_BROKEN, __ATOMIC_RELEASE);
	__atomic_store_n(&l->owner, 0, __ATOMIC_RELEASE);
}

/* The bytes of FD from END to SIZE are zeros (the rest of a mapped window
 * its last owner left: it died holding the lane), and are cut off. */
static bool zero_tail(int fd, uint64_t end, uint64_t size)
{
	uint8_t buf[4096];

	for (uint64_t off = end; off < size;) {
		size_t want = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		ssize_t n = pread(fd, buf, want, (off_t)off);

		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i])
				return false;
		off += (uint64_t)n;
	}
	return ftruncate(fd, (off_t)end) == 0;
}

/* Open lane K, just taken, for appending: its file created with a header
 * when it has none, else its length checked against the one its last owner
 * left (zeros after it, a mapped window's rest, are cut off). A lane whose
 * owner died in the middle of a record (its file longer than that, and not
 * with zeros) is not used again: its torn tail stays where the reader expects
 * one, at the end of a file nobody appends to. On success G writes after the
 * last record, and its chain goes on from it. */
static int lane_open(struct jseg *g, struct jsession *s, int k)
{
	struct jlane *l = &s->lanes[k];
	uint8_t hdr[J_FILE_HDR];
	char name[32];
	struct stat st;
	ssize_t n;
	int fd, logfd = jsession_logfd(s);     /* open already: jseg_open */

	if (logfd < 0)
		return -EAGAIN;
	lane_name(name, k);
	if (__atomic_load_n(&l->state, __ATOMIC_ACQUIRE) == JL_NONE) {
		/* read too: a window of it is mapped MAP_SHARED */
		fd = openat(logfd, name, O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
		if (fd < 0)     /* EEXIST: a taker died before marking it open */
			return errno == EEXIST ? -EEXIST : -EAGAIN;
		fd = jfd_high(fd);
		jfile_header(hdr, s->salt, J_KIND_SEGMENT, s->features);
		if (jwrite_all(fd, hdr, sizeof(hdr)) < 0 ||
		    ((s->flags & JS_DURABLE) && (fsync(fd) < 0 || fsync(logfd) < 0))) {
			close(fd);      /* a full disk: no half-written file is left */
			unlinkat(logfd, name, 0);
			return -EAGAIN;
		}
		jchain_start(g->link, s->salt, hdr);
		g->end = sizeof(hdr);
		__atomic_store_n(&l->end, g->end, __ATOMIC_RELEASE);
		__atomic_store_n(&l->state, JL_OPEN, __ATOMIC_RELEASE);
		g->fd = fd;
		return 0;
	}
	fd = openat(logfd, name, O_RDWR | O_APPEND | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fd = jfd_high(fd);
	g->end = __atomic_load_n(&l->end, __ATOMIC_ACQUIRE);
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < g->end || g->end < J_FILE_HDR + J_LINK_LEN ||
	    ((uint64_t)st.st_size > g->end && !zero_tail(fd, g->end, (uint64_t)st.st_size))) {
		close(fd);
		return -EPROTO;
	}
	/* the last record ends with its link: the chain goes on from it */
	n = pread(fd, g->link, J_LINK_LEN, (off_t)(g->end - J_LINK_LEN));
	if (n != J_LINK_LEN) {
		close(fd);
		return -EIO;
	}
	g->fd = fd;
	return 0;
}

static uint64_t owner_known;    /* ns << 32 | the pid that found it (owner_id) */

/* Who takes a lane: this process's pid, with its pid namespace (the inode
 * of /proc/self/ns/pid; 0 without /proc), so that a process in another
 * namespace, where the same number is another process or none, never takes
 * a lane from a live writer it cannot see. */
static uint64_t owner_id(pid_t pid)
{
	/* The first look at /proc/self in a new process costs some 50 us (the
	 * kernel makes its /proc/PID entries): a fork child takes the
	 * namespace its parent found, when that parent is who getppid(2)
	 * names (a parent in another namespace is 0 there; a finder of pid 1
	 * is not trusted: its child in a namespace of its own is pid 1 too,
	 * and that child's children name a parent 1). Racing threads write
	 * the same word. */
	uint64_t k = __atomic_load_n(&owner_known, __ATOMIC_RELAXED), ns;
	struct stat st;

	if (k && (uint32_t)k != 1 && ((uint32_t)k == (uint32_t)pid || (uint32_t)getppid() == (uint32_t)k))
		ns = k >> 32;
	else
		ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
	k = ns << 32 | (uint32_t)pid;
	__atomic_store_n(&owner_known, k, __ATOMIC_RELAXED);
	return k;
}

void jseg_owner_warm(pid_t pid)
{
	(void)owner_id(pid);
}

/* In a fork child (SELF: its pid): the parent's namespace is the child's
 * when the parent found it and getppid(2) names that parent (in another
 * namespace it names 0); taken as the child's own, else forgotten. A
 * value never passes on unchecked: a process that forks and never writes
 * would otherwise hand its parent's down to descendants in a namespace an
 * unshare(CLONE_NEWPID) made, where the same pid numbers come round. */
void jseg_owner_forked(pid_t self)
{
	uint64_t k = __atomic_load_n(&owner_known, __ATOMIC_RELAXED);

	if (k && (uint32_t)k != 1 && (uint32_t)getppid() == (uint32_t)k)
		k = (k >> 32) << 32 | (uint32_t)self;
	else
		k = 0;
	__atomic_store_n(&owner_known, k, __ATOMIC_RELAXED);
}

/* The lane's owner O holds it no more: gone from this namespace, or this
 * very process (an earlier program of it held the lane before an exec). */
static bool owner_gone(uint64_t o, uint64_t me)
{
	pid_t pid = (pid_t)(uint32_t)o;

	if (o >> 32 != me >> 32)
		return false;   /* another namespace: there is no telling */
	return o == me || (kill(pid, 0) < 0 && errno == ESRCH);
}

/* Take lane K, which had owner O (0: free), as ME and open it: 0, 1 when
 * it is not to be had (taken meanwhile, or broken now), or -1 when no lane
 * is (no room for a new file). */
static int lane_try(struct jseg *g, struct jsession *s, int k, uint64_t o, uint64_t me)
{
	struct jlane *l = &s->lanes[k];

	if (!__atomic_compare_exchange_n(&l->owner, &o, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 1;
	int err = lane_open(g, s, k);
	if (!err) {
		g->owner = me;
		return 0;
	}
	if (err == -EAGAIN) {   /* no room for a new file: the lane stays as it was */
		__atomic_store_n(&l->owner, 0, __ATOMIC_RELEASE);
		return -1;
	}
	lane_break(l);
	return 1;
}

/*
 * Take a free lane (or one whose owner is gone) and open it: its index, or
 * -1 when none could be had. A lane given back is taken first, with no
 * system call: telling whether a held lane's owner is gone costs a kill(2)
 * each, and the lanes held all along (the agent's own, its engine's
 * workers') come first in the table, so that every program start of a tool
 * call asked about them again. Only when no lane is free are the held ones
 * looked at (a dead owner's taken over) and a new one made.
 */
static int lane_take(struct jseg *g, struct jsession *s)
{
	uint64_t me = owner_id(g->pid);

	/* The lanes' page is written below (a claim): touched by a write
	 * first, it is one page fault, where a read and then a write of a
	 * shared file's page are two (the kernel tracks its dirtying). Nearly
	 * every process that takes a lane is new, or a fork child, whose
	 * shared mappings start with no page mapped. */
	__atomic_fetch_or(&s->lanes[0].state, 0, __ATOMIC_RELAXED);
	for (int k = 0; k < JL_LANES; k++) {
		struct jlane *l = &s->lanes[k];
		uint32_t state = __atomic_load_n(&l->state, __ATOMIC_ACQUIRE);

		if (state == JL_NONE)
			break;          /* lanes are made in order: none is open after it */
		if (state != JL_OPEN || __atomic_load_n(&l->owner, __ATOMIC_ACQUIRE))
			continue;
		int r = lane_try(g, s, k, 0, me);
		if (r <= 0)
			return r ? -1 : k;
	}
	for (int k = 0; k < JL_LANES; k++) {
		struct jlane *l = &s->lanes[k];
		uint64_t o = __atomic_load_n(&l->owner, __ATOMIC_ACQUIRE);

		if (__atomic_load_n(&l->state, __ATOMIC_ACQUIRE) == JL_BROKEN || (o && !owner_gone(o, me)))
			continue;
		int r = lane_try(g, s, k, o, me);
		if (r <= 0)
			return r ? -1 : k;
	}
	return -1;
}

/* This process's records after G's: in a shared segment, its J_SEGMENT
 * record first; else in a new segment of its own. */
int jseg_open(struct jseg *g, struct jsession *s, char *const *argv)
{
	uint8_t hdr[J_FILE_HDR], buf[4096];
	char name[64];
	struct jbuild b;
	int fd, err, logfd;

	memset(g, 0, sizeof(*g));
	g->s = s;
	g->fd = -1;
	g->lane = -1;
	g->pid = getpid();
	logfd = jsession_logfd(s);      /* made here, in a JI_LAZYDIRS session */
	if (logfd < 0)
		return logfd;
	if (s->lanes && (g->lane = lane_take(g, s)) >= 0) {
		g->first_seq = jsession_next_seq(s);
		segment_record(&b, buf, sizeof(buf), g->pid, argv);
		err = jframe(s, g->link, &b, g->first_seq, jnow_ns());
		if (!err)
			err = jwrite_all(g->fd, b.buf, b.len);
		if (!err && (s->flags & JS_DURABLE) && fdatasync(g->fd) < 0)
			err = -errno;
		if (!err) {
			g->end += b.len;
			__atomic_store_n(&s->lanes[g->lane].end, g->end, __ATOMIC_RELEASE);
			pthread_mutex_init(&g->lock, NULL);
			return 0;
		}
		/* cut a partial record off (a full disk) and give the lane back;
		 * if even that fails, nobody appends after it */
		if (ftruncate(g->fd, (off_t)g->end) == 0)
			__atomic_store_n(&s->lanes[g->lane].owner, 0, __ATOMIC_RELEASE);
		else
			lane_break(&s->lanes[g->lane]);
		close(g->fd);
		g->fd = -1;
		g->lane = -1;
	}
	g->first_seq = jsession_next_seq(s);
	snprintf(name, sizeof(name), "%llu-%d.ftj", (unsigned long long)g->first_seq, (int)g->pid);
	fd = openat(logfd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	fd = jfd_high(fd);
	jfile_header(hdr, s->salt, J_KIND_SEGMENT, s->features);
	jchain_start(g->link, s->salt, hdr);
	segment_record(&b, buf, sizeof(buf), g->pid, argv);
	err = jframe(s, g->link, &b, g->first_seq, jnow_ns());
	if (!err)
		err = jwrite_all(fd, hdr, sizeof(hdr));
	if (!err)
		err = jwrite_all(fd, b.buf, b.len);
	if (!err && (s->flags & JS_DURABLE) && (fsync(fd) < 0 || fsync(logfd) < 0))
		err = -errno;
	if (err) {
		close(fd);
		unlinkat(logfd, name, 0);
		return err;
	}
	g->fd = fd;
	g->end = sizeof(hdr) + b.len;
	pthread_mutex_init(&g->lock, NULL);
	return 0;
}

static void unmap(struct jseg *g)
{
	if (g->map)
		munmap(g->map, g->map_len);
	g->map = NULL;
}

void jseg_close(struct jseg *g)
{
	/* The zeros after the last record stay for the next taker to check
	 * and cut off (lane_open): this runs in an exiting process's
	 * destructor too, outside any hook, where an ftruncate of the lane
	 * would pass the shim's own checks of a program's call. */
	unmap(g);
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
	if (g->lane >= 0 && g->pid == getpid()) {
		uint64_t me = g->owner;

		/* its length is current (append_locked keeps it): free it */
		__atomic_compare_exchange_n(&g->s->lanes[g->lane].owner, &me, 0, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
	}
	g->lane = -1;
}

#define MAP_AFTER  16                   /* records written with write(2) before a lane is mapped */
#define MAP_WINDOW (16u << 10)          /* bytes the first window grows the file by, */
#define MAP_WINDOW_MAX (256u << 10)     /* doubling up to this: an rm -rf of 10,000 files
					   remaps 7 times, not 100 (an munmap is a TLB
					   shootdown), and a next taker checks at most
					   this many zeros */

/* Whether the next record of G goes into a mapped window: a lane (whose
 * next taker cuts the window's zeros off) of a session that is not durable,
 * written by its owner, which has written a few records already (most
 * processes write one or two: a window is not worth its system calls and
 * its zeros to them). */
static bool mapped(const struct jseg *g)
{
	return g->map || (!g->nomap && g->lane >= 0 && g->nrec >= MAP_AFTER && !(g->s->flags & JS_DURABLE) &&
			  g->pid == getpid());
}

/* Room for N bytes at g->end in the window: a new one when they do not fit.
 * 0; 1: no window (a full disk, a filesystem without fallocate: the file is
 * at its length again and the caller writes, from now on); or -errno when
 * the zeros after the last record could not be cut off. */
static int map_room(struct jseg *g, size_t n)
{
	uint64_t page = (uint64_t)getpagesize(), off = g->end & ~(page - 1);
	size_t grow = g->map_len ? 2 * g->map_len : MAP_WINDOW;
	size_t len = (size_t)((g->end - off + n + (grow < MAP_WINDOW_MAX ? grow : MAP_WINDOW_MAX) + page - 1) &
			      ~(page - 1));
	void *p = MAP_FAILED;

	if (g->map && g->end + n <= g->map_off + g->map_len)
		return 0;
	unmap(g);
	if (fallocate(g->fd, 0, (off_t)g->end, (off_t)(off + len - g->end)) == 0)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, (off_t)off);
	/* Its pages faulted in with one call, not one trap each as the records
	 * reach them: a trap is a microsecond on a machine, 10 to 20 under a
	 * hypervisor that shadows page tables (an rm -rf of 10,000 files
	 * writes some 650 pages). The window is filled before the next one is
	 * made, so at most its last part is faulted in for nothing. Kernels
	 * before 5.14 say EINVAL: the records fault the pages in as before. */
	if (p != MAP_FAILED)
		(void)madvise(p, len, MADV_POPULATE_WRITE);
	if (p == MAP_FAILED) {
		g->nomap = true;
		return ftruncate(g->fd, (off_t)g->end) < 0 ? -errno : 1;
	}
	g->map = p;
	g->map_off = off;
	g->map_len = len;
	return 0;
}

/* Append the framed record B at g->end: copied into the window, or written. */
static int put_record(struct jseg *g, const struct jbuild *b)
{
	int err = mapped(g) ? map_room(g, b->len) : 1;

	if (err == 0)
		memcpy(g->map + (g->end - g->map_off), b->buf, b->len);
	else if (err == 1)
		err = jwrite_all(g->fd, b->buf, b->len);
	return err;
}

/* The segment's length is now END (after a record, or back before one). */
static void set_end(struct jseg *g, uint64_t end)
{
	g->end = end;           /* this process is the segment's only writer */
	if (g->lane >= 0)       /* what the lane's next taker checks its length against */
		__atomic_store_n(&g->s->lanes[g->lane].end, end, __ATOMIC_RELEASE);
}

/*
 * libsodium hashes with its portable BLAKE2b until sodium_init() picks the
 * vectorised one: about a third of an unlink's own instructions in a
 * process that writes many records. But sodium_init() costs about 8 cpuid
 * instructions (a hypervisor exit each under a VM: 37 us here) and two
 * getrandom calls, more than most writers hash in all: the shell of a tool
 * call that writes its children's exec records, or the child that writes
 * its own, writes two or three. So it runs once a process has written
 * HASH_AFTER records. The portable BLAKE2b hashes the same bytes the same.
 * Not in a vfork child (its pid is not the segment's): libsodium's state
 * is its parent's memory, and its random source could open a descriptor
 * in the child's table that the parent would then believe it has.
 * Idempotent and thread-safe; should it fail, the portable one stays.
 */
#define HASH_AFTER 16
static bool hash_picked;

static void pick_hash(const struct jseg *g)
{
	if (__atomic_load_n(&hash_picked, __ATOMIC_RELAXED) || g->pid != getpid())
		return;
	if (sodium_init() >= 0)
		__atomic_store_n(&hash_picked, true, __ATOMIC_RELAXED);
}

/* Called with g->lock held. SAVED gets the chain link before the record. */
static int append_locked(struct jseg *g, struct jbuild *b, uint64_t seq, uint8_t saved[J_LINK_LEN])
{
	int err;

	if (g->fd < 0)
		return -EBADF;
	if (__builtin_expect(g->nrec >= HASH_AFTER, 0) && !__atomic_load_n(&hash_picked, __ATOMIC_RELAXED))
		pick_hash(g);
	memcpy(saved, g->link, J_LINK_LEN);
	err = jframe(g->s, g->link, b, seq, jnow_ns());
	if (!err)
		err = put_record(g, b);
	if (!err && (g->s->flags & JS_DURABLE) && fdatasync(g->fd) < 0)
		err = -errno;
	if (err) {
		/* Never leave a partial record that a later one would follow:
		 * cut the segment back and keep the chain where it was. If
		 * even that fails, give the segment up: the caller opens a
		 * new one, and the reader sees this one's torn tail. */
		if (ftruncate(g->fd, (off_t)g->end) < 0) {
			unmap(g);
			close(g->fd);
			g->fd = -1;
		}
		memcpy(g->link, saved, J_LINK_LEN);
		return err;
	}
	g->nrec++;
	set_end(g, g->end + b->len);
	return 0;
}

int jseg_append_seq(struct jseg *g, struct jbuild *b, uint64_t seq)
{
	uint8_t saved[J_LINK_LEN];
	int err;

	pthread_mutex_lock(&g->lock);
	err = append_locked(g, b, seq, saved);
	pthread_mutex_unlock(&g->lock);
	return err;
}

/* The record just appended (B, LEN bytes, the chain's link before it in
 * SAVED) never was: the segment cut back before it. Called with g->lock
 * held, nothing appended since. false: it stays (the cut failed). */
static bool cut_last(struct jseg *g, size_t len, const uint8_t saved[J_LINK_LEN])
{
	uint64_t end = g->end - len;

	if (g->map)             /* zeros again: the end of the segment as a reader sees it */
		memset(g->map + (end - g->map_off), 0, len);
	else if (ftruncate(g->fd, (off_t)end) < 0)
		return false;
	memcpy(g->link, saved, J_LINK_LEN);
	set_end(g, end);
	return true;
}

int jseg_append_then(struct jseg *g, struct jbuild *b, uint64_t seq, int (*change)(void *arg), void *arg,
		     bool *kept)
{
	uint8_t saved[J_LINK_LEN];
	int err;

	*kept = false;
	pthread_mutex_lock(&g->lock);
	err = append_locked(g, b, seq, saved);
	if (!err) {
		*kept = true;
		err = change(arg);
		if (err && cut_last(g, b->len, saved))
			*kept = false;
	}
	pthread_mutex_unlock(&g->lock);
	return err;
}

int jseg_append(struct jseg *g, struct jbuild *b, uint64_t *seq)
{
	uint8_t saved[J_LINK_LEN];
	uint64_t n;
	int err;

	pthread_mutex_lock(&g->lock);
	n = jsession_next_seq(g->s);
	err = append_locked(g, b, n, saved);
	pthread_mutex_unlock(&g->lock);
	if (!err && seq)
		*seq = n;
	return err;
}
