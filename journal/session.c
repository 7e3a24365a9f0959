/*
 * session.c - open or atomically create a session directory: the session
 * file and the shared file (log/ and objects/ are made by their first
 * writer: JI_LAZYDIRS). Creation builds the whole directory under a
 * temporary name and renames it into place, so that concurrent creators
 * (the first processes of a wrapped agent) agree on one session and no
 * reader ever sees half of one; the creator that wins goes on with the
 * directory it built, without opening it again by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

uint32_t jseed(const uint8_t salt[J_SALT_LEN])
{
	return jcrc32c(0x46545342u, salt, J_SALT_LEN);
}

int jfile_header_check(const uint8_t *h, size_t n, unsigned kind, uint8_t salt[J_SALT_LEN],
		       uint32_t *features)
{
	uint16_t version, k;
	uint32_t crc, incompat;

	/* The version is checked before the crc: another version may lay out
	 * (and checksum) its header differently. */
	if (n < 10 || memcmp(h, J_MAGIC, 8))
		return -EPROTO;
	memcpy(&version, h + 8, 2);
	if (version != J_VERSION)
		return -EPROTONOSUPPORT;
	if (n < J_FILE_HDR)
		return -EPROTO;
	memcpy(&crc, h + 28, 4);
	if (crc != jcrc32c(0, h, 28))
		return -EPROTO;
	memcpy(&k, h + 10, 2);
	memcpy(&incompat, h + 12, 4);
	if (incompat & ~JI_KNOWN)
		return -EPROTONOSUPPORT;
	if (k != kind)
		return -EPROTO;
	memcpy(salt, h + 16, J_SALT_LEN);
	*features = incompat;
	return 0;
}

size_t jdecimal(char *out, uint64_t v)
{
	char digits[20];
	size_t n = 0;

	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	for (size_t i = 0; i < n; i++)
		out[i] = digits[n - 1 - i];
	return n;
}

size_t jobject_name(char out[JOBJ_NAME_MAX], uint32_t features, uint64_t seq, const char *ext)
{
	size_t dir = 0, n, e = strlen(ext);

	if (features & JI_OBJDIRS) {
		dir = jdecimal(out, seq / J_OBJ_FANOUT);
		out[dir++] = '/';
	}
	n = dir + jdecimal(out + dir, seq);
	out[n++] = '.';
	memcpy(out + n, ext, e + 1);    /* "ino" or "gz": JOBJ_NAME_MAX holds 20 + 1 + 20 + 1 + 4 */
	return dir;
}

void jobject_dir(char out[JOBJ_NAME_MAX], uint64_t d)
{
	out[jdecimal(out, d)] = 0;
}

/* mkdir -p for the parent of a session directory. */
static int mkdir_parents(const char *dir)
{
	char p[PATH_MAX];
	size_t n = strlen(dir);

	if (n >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, dir, n + 1);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

/* Creation writes no fsync: a killed creator leaves only its temporary
 * directory, and the rename publishes a complete session to every other
 * process (the page cache is shared). Power loss is the durable setting's
 * business: jsession_sync, before the first change. */
static int write_file_at(int dfd, const char *name, const void *p, size_t n)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int err;

	if (fd < 0)
		return -errno;
	err = jwrite_all(fd, p, n);
	close(fd);
	return err;
}

/* What a durable session needs on disk before its first change: its
 * files, its directories, and its own name in the parent directory. */
int jsession_sync(struct jsession *s)
{
	static const char *const files[] = { "session", "shared", "seq", "locks", "reserve", "log", "objects", ".." };
	int err = 0;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && !err; i++) {
		int fd = openat(s->dirfd, files[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (errno != ENOENT)        /* the reserve may be gone */
				err = -errno;
			continue;
		}
		if (fsync(fd) < 0)
			err = -errno;
		close(fd);
	}
	if (!err && fsync(s->dirfd) < 0)
		err = -errno;
	return err;
}

int jsession_release_reserve(struct jsession *s)
{
	if (s->features & JI_SHARED)
		return jshared_release_reserve(s);
	return unlinkat(s->dirfd, "reserve", 0) == 0 ? 0 : -errno;
}

/* Remove the files and directories a session is created with, then DIR:
 * nothing else. A session some process wrote into keeps everything: its
 * objects/ or its log/ is not empty (objects/, emptied first, is made
 * again if log/ then turns out to be in use). */
static int remove_created(const char *dir)
{
	static const char *const files[] = { "session", "shared", "seq", "reserve", "locks" };
	char p[PATH_MAX], q[PATH_MAX];

	snprintf(p, sizeof(p), "%s/objects", dir);
	if (rmdir(p) < 0 && errno != ENOENT)
		return -errno;
	snprintf(q, sizeof(q), "%s/log", dir);
	if (rmdir(q) < 0 && errno != ENOENT) {
		int err = -errno;
		mkdir(p, 0700);
		return err;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		unlink(p);
	}
	return rmdir(dir) == 0 ? 0 : -errno;
}

/* Build a complete session under a temporary name beside DIR, then rename it
 * into place. Losing the race to another creator is success (OUT->dirfd
 * stays -1); the winner gets its directory's descriptor, salt and features
 * in OUT. */
static int create_session(const char *dir, const struct jsession_info *info, struct jsession *out)
{
	char tmp[PATH_MAX];
	uint8_t salt[J_SALT_LEN], hdr[J_FILE_HDR], link[J_LINK_LEN];
	uint8_t buf[16384];
	struct jsession s;
	struct jbuild b;
	char cwd[PATH_MAX];
	int dfd = -1, err;
	uint32_t features = JI_NEW & ~info->without;

	if (!(features & JI_SHARED))
		features &= ~JI_LAZYDIRS;       /* its bits live on the shared page */

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new.%d", dir, (int)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	if (getrandom(salt, sizeof(salt), 0) != (ssize_t)sizeof(salt))
		return -errno ? -errno : -EIO;
	/* the parents are made, and a leftover of a killed creator with our
	 * pid removed, only when the first mkdir says so */
	err = mkdir(tmp, 0700) < 0 ? -errno : 0;
	if (err == -ENOENT) {
		err = mkdir_parents(dir);
		if (err)
			return err;
		err = mkdir(tmp, 0700) < 0 ? -errno : 0;
	}
	if (err == -EEXIST) {
		remove_created(tmp);
		err = mkdir(tmp, 0700) < 0 ? -errno : 0;
	}
	if (err)
		return err;
	dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		err = -errno;
		goto out;
	}
	if (!(features & JI_LAZYDIRS) && (mkdirat(dfd, "log", 0700) < 0 || mkdirat(dfd, "objects", 0700) < 0)) {
		err = -errno;
		goto out;
	}
	if (features & JI_SHARED) {
		err = jlocks_create(dfd, true, !(features & JI_LAZYDIRS));
	} else {                /* the older layout: three files */
		static const uint8_t zero[J_SEQ_FILE_SIZE];
		err = write_file_at(dfd, "seq", zero, sizeof(zero));
		if (!err)
			err = write_file_at(dfd, "reserve", NULL, 0);
		if (!err)
			err = jlocks_create(dfd, false, false);
	}
	if (err)
		goto out;
	memset(&s, 0, sizeof(s));
	memcpy(s.salt, salt, sizeof(salt));
	s.seed = jseed(salt);
	jfile_header(hdr, salt, J_KIND_SESSION, features);
	jchain_start(link, salt, hdr);
	jb_init(&b, buf + J_FILE_HDR, sizeof(buf) - J_FILE_HDR, J_SESSION, 0, 0);
	jb_u32(&b, F_PID, (uint32_t)getpid());
	jb_u32(&b, F_UID, (uint32_t)getuid());
	jb_argv(&b, F_ARGV, info->argv);
	if (info->cwd)
		jb_str(&b, F_CWD, info->cwd);
	else if (getcwd(cwd, sizeof(cwd)))
		jb_str(&b, F_CWD, cwd);
	jb_str(&b, F_POLICY, info->policy);
	if (gethostname(cwd, sizeof(cwd)) == 0) {
		cwd[sizeof(cwd) - 1] = 0;
		jb_str(&b, F_HOST, cwd);
	}
	err = jframe(&s, link, &b, 0, jnow_ns());
	if (err)
		goto out;
	memcpy(buf, hdr, J_FILE_HDR);
	err = write_file_at(dfd, "session", buf, J_FILE_HDR + b.len);
	if (err)
		goto out;
	if (rename(tmp, dir) == 0) {
		out->dirfd = dfd;       /* the same directory, under its name now */
		memcpy(out->salt, salt, sizeof(salt));
		out->seed = s.seed;
		out->features = features;
		return 0;
	}
	err = (errno == EEXIST || errno == ENOTEMPTY) ? 0 : -errno;
out:
	if (dfd >= 0)
		close(dfd);
	remove_created(tmp);
	return err;
}

static int read_session_header(struct jsession *s)
{
	uint8_t h[J_FILE_HDR];
	int fd = openat(s->dirfd, "session", O_RDONLY | O_CLOEXEC);
	ssize_t n;
	int err;

	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	n = pread(fd, h, sizeof(h), 0);
	err = n < 0 ? -errno : 0;
	close(fd);
	if (err)
		return err;
	err = jfile_header_check(h, (size_t)n, J_KIND_SESSION, s->salt, &s->features);
	if (!err)
		s->seed = jseed(s->salt);
	return err;
}

int jsession_open(struct jsession *s, const char *dir, const struct jsession_info *info)
{
	int err, fd;
	void *m;

	memset(s, 0, sizeof(*s));
	s->dirfd = s->logfd = s->objfd = -1;
	for (int tries = 0;; tries++) {
		s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (s->dirfd >= 0) {
			err = read_session_header(s);
			if (err != -ENOENT || !info || tries)
				break;
			close(s->dirfd);    /* an empty directory: fill it */
			s->dirfd = -1;
		} else if (errno != ENOENT || !info || tries) {
			return -errno;
		}
		err = create_session(dir, info, s);
		if (err)
			return err;
		if (s->dirfd >= 0)
			break;      /* made here: its header is known */
	}
	if (err == -ENOENT)
		err = -EPROTO;      /* a directory, but no session in it */
	if (err)
		goto fail;
	s->dirfd = jfd_high(s->dirfd);
	if (!(s->features & JI_LAZYDIRS)) {     /* an older session has both from the start */
		s->logfd = jfd_high(openat(s->dirfd, "log", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		s->objfd = jfd_high(openat(s->dirfd, "objects", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		if (s->logfd < 0 || s->objfd < 0) {
			err = errno == ENOENT ? -EPROTO : -errno;
			goto fail;
		}
	}
	if (s->features & JI_SHARED) {
		/* one file: the counters, the locks and the lanes */
		err = jlocks_map(s);
		if (err)
			goto fail;
		return 0;
	}
	fd = openat(s->dirfd, "seq", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		err = errno == ENOENT ? -EPROTO : -errno;
		goto fail;
	}
	m = mmap(NULL, J_SEQ_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	err = m == MAP_FAILED ? -errno : 0;
	close(fd);
	if (err)
		goto fail;
	s->ctr = m;
	jlocks_map(s);          /* optional: a session without locks still works */
	return 0;
fail:
	jsession_close(s);
	return err;
}

void jsession_close(struct jsession *s)
{
	if (s->features & JI_SHARED) {
		if (s->ctr)
			munmap(s->ctr, jshared_size());
	} else {
		if (s->ctr)
			munmap(s->ctr, J_SEQ_FILE_SIZE);
		if (s->locks)
			munmap(s->locks, jlocks_size());
	}
	s->ctr = NULL;
	s->locks = NULL;
	s->lanes = NULL;
	if (s->dirfd >= 0)
		close(s->dirfd);
	if (s->logfd >= 0)
		close(s->logfd);
	if (s->objfd >= 0)
		close(s->objfd);
	s->dirfd = s->logfd = s->objfd = -1;
}

/* SESSION/NAME, opened at its first need into *SLOT; made first in a
 * JI_LAZYDIRS session, unless the shared page says it was made already
 * (then it was removed under the session: damage, -EIO). Two threads may
 * both open it: one descriptor is kept, the other closed. */
static int subdir_fd(struct jsession *s, int *slot, const char *name, uint32_t made_bit)
{
	int fd = __atomic_load_n(slot, __ATOMIC_ACQUIRE), kept = -1;
	uint32_t *made = s->ctr ? (uint32_t *)(void *)((char *)s->ctr + JL_DIRS_MADE) : NULL;
	uint32_t was_made;

	if (fd >= 0)
		return fd;
	/* the mark is read before the directory is looked for: another
	 * writer may make both in between, which is no damage */
	was_made = made ? __atomic_load_n(made, __ATOMIC_ACQUIRE) & made_bit : 0;
	fd = openat(s->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && (s->features & JI_LAZYDIRS) && made) {
		if (was_made)
			return -EIO;
		if (mkdirat(s->dirfd, name, 0700) == 0) {
			/* the first writer: the reserve comes with log/ */
			if (made_bit == JL_MADE_LOG)
				jshared_make_reserve(s);
		} else if (errno != EEXIST) {
			return -errno;
		}
		if ((s->flags & JS_DURABLE) && fsync(s->dirfd) < 0)
			return -errno;
		__atomic_or_fetch(made, made_bit, __ATOMIC_SEQ_CST);
		fd = openat(s->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0)
		return errno == ENOENT ? -EIO : -errno;
	fd = jfd_high(fd);
	if (!__atomic_compare_exchange_n(slot, &kept, fd, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		close(fd);
		return kept;
	}
	return fd;
}

int jsession_logfd(struct jsession *s)
{
	return subdir_fd(s, &s->logfd, "log", JL_MADE_LOG);
}

int jsession_objfd(struct jsession *s)
{
	return subdir_fd(s, &s->objfd, "objects", JL_MADE_OBJECTS);
}

uint64_t jsession_next_seq(struct jsession *s)
{
	return __atomic_add_fetch(&s->ctr[0], 1, __ATOMIC_SEQ_CST);
}

uint32_t jsession_next_txn(struct jsession *s)
{
	return (uint32_t)__atomic_add_fetch(&s->ctr[1], 1, __ATOMIC_SEQ_CST);
}

void jsession_default_dir(char *out, size_t n, const char *xdg_state, const char *home)
{
	char stamp[32];
	struct timespec now;
	struct tm tm;
	time_t t;

	/* not time(): an IFUNC, whose resolver every process that loads the
	 * shim (bound at load) would run, a page of libc's code for it */
	clock_gettime(CLOCK_REALTIME, &now);
	t = now.tv_sec;

	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", gmtime_r(&t, &tm));
	if (xdg_state && *xdg_state == '/')
		snprintf(out, n, "%s/ftsbx/sessions/%s-%d", xdg_state, stamp, (int)getpid());
	else
		snprintf(out, n, "%s/.local/state/ftsbx/sessions/%s-%d", home && *home ? home : "/tmp", stamp,
			 (int)getpid());
}
