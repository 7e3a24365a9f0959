/*
 * dirlist.c - which of a policy's literal paths exist, from the listings
 * of their directories.
 *
 * Every literal path rule also counts at its real path when a symlink
 * leads there (load.c: add_path), and asking the kernel costs an open of
 * each path: the default policy names some 90 paths under HOME, nearly all
 * of them missing (~/.aws, ~/.kube ...), and those opens were a fifth of
 * the policy's compile, which `ftsbx run` waits for. A path whose name is
 * not in its directory's listing does not exist (nor does one whose
 * directory does not); the listings are read once per compile, each only
 * once its own directory is known to exist, so that ~/.pulumi/credentials.json
 * costs nothing where ~/.pulumi is not in HOME's listing. A path that is
 * there is asked of pol_real_path as before.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/vfs.h>
#include <unistd.h>
#include "internal.h"

/* Filesystems whose listing holds every name a lookup finds: not those
 * that hide names from it (ZFS's .zfs, a filer's .snapshot), mount on a
 * lookup (autofs), or answer for a server (NFS, FUSE, SMB). Case-folding
 * directories (ext4's and tmpfs's casefold) are seen in there(). */
static bool listing_whole(int fd)
{
	static const unsigned long kinds[] = {
		0xEF53,         /* ext2, ext3, ext4 */
		0x58465342,     /* xfs */
		0x9123683E,     /* btrfs */
		0x01021994,     /* tmpfs */
		0x794C7630,     /* overlayfs */
		0xF2F52010,     /* f2fs */
	};
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return false;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if ((unsigned long)sf.f_type == kinds[i])
			return true;
	return false;
}

/* Read the listing of L->dir: false where it cannot be told (an
 * unreadable directory, one of more than LIST_MAX bytes of entries, one
 * of a filesystem listing_whole does not know, no memory), for which each
 * path is asked of the kernel as before. */
#define LIST_MAX 8192
static bool read_listing(struct dirlisting *l)
{
	char buf[LIST_MAX] __attribute__((aligned(8)));
	long k = 0, got = 0, at;
	int fd = open(l->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		l->missing = errno == ENOENT || errno == ENOTDIR;
		return l->missing;
	}
	/* a directory of more entries than a buffer holds (a /tmp of
	 * thousands) would cost more to read than the opens it saves */
	if (listing_whole(fd))
		while ((k = getdents64(fd, buf + got, sizeof(buf) - (size_t)got)) > 0)
			got += k;
	else
		k = -1;
	close(fd);
	if (k < 0 || !(l->names = malloc((size_t)got + 1)))
		return false;
	for (at = 0; at < got;) {
		const struct dirent64 *e = (const void *)(buf + at);
		size_t m = strlen(e->d_name);
		at += e->d_reclen;
		l->names[l->len++] = 0;
		memcpy(l->names + l->len, e->d_name, m);
		l->len += m;
	}
	l->names[l->len++] = 0;
	return true;
}

/* /proc, /sys and /dev and what is beneath: their listings are made at
 * each read (/proc's of every process), and the paths a policy names there
 * (/proc/self, /dev/shm) are there. */
static bool kernel_made(const char *dir)
{
	static const char *const top[] = { "/proc", "/sys", "/dev" };

	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
		size_t n = strlen(top[i]);
		if (!strncmp(dir, top[i], n) && (dir[n] == 0 || dir[n] == '/'))
			return true;
	}
	return false;
}

/* The listing of DIR (its N bytes), or NULL where it is not to be used:
 * the first LIST_AFTER - 1 times a directory is asked about (a path there
 * is one open; a listing costs several, and of /proc or /dev more than a
 * dozen opens), and where it cannot be told. */
#define LIST_AFTER 4
static const struct dirlisting *list_of(struct dirlist *d, const char *dir, size_t n)
{
	struct dirlisting *l = NULL;

	for (size_t i = 0; i < d->n && !l; i++)
		if (strlen(d->l[i].dir) == n && !memcmp(d->l[i].dir, dir, n))
			l = &d->l[i];
	if (!l) {
		if (d->n == sizeof(d->l) / sizeof(d->l[0]) || !(d->l[d->n].dir = strndup(dir, n)))
			return NULL;
		l = &d->l[d->n++];
		l->names = NULL;
		l->len = 0;
		l->missing = false;
		l->state = DL_ASKED;
		l->asked = 1;
		return NULL;
	}
	if (l->state == DL_ASKED && ++l->asked == LIST_AFTER)
		l->state = !kernel_made(l->dir) && read_listing(l) ? DL_READ : DL_UNKNOWN;
	return l->state == DL_READ ? l : NULL;
}

/* Whether a case-folding directory could find NAME (N bytes) under
 * another name L holds: one equal but for ASCII case, or any name where
 * NAME has bytes beyond ASCII (whose folding is Unicode's). */
static bool folded_there(const struct dirlisting *l, const char *name, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] >= 0x80)
			return true;
	for (const char *s = l->names + 1; s < l->names + l->len; s += strlen(s) + 1)
		if (strlen(s) == n && !strncasecmp(s, name, n))
			return true;
	return false;
}

/* 1: P (N bytes, absolute, normalised) is there; 0: it is not; -1: the
 * listings cannot tell. */
static int there(struct dirlist *d, const char *p, size_t n)
{
	size_t k = n;

	if (n == 1)
		return 1;       /* "/" */
	while (k > 0 && p[k - 1] != '/')
		k--;
	if (k == 0 || k == n || (n - k <= 2 && p[k] == '.' && (n - k == 1 || p[k + 1] == '.')))
		return -1;
	size_t dn = k > 1 ? k - 1 : 1;
	int up = there(d, p, dn);
	if (up <= 0)
		return up;
	const struct dirlisting *l = list_of(d, p, dn);
	if (!l)
		return -1;
	if (l->missing)
		return 0;

	/* each name compared (glibc's memmem zeroes a table of 256 shifts
	 * for a needle this long: more than the compares) */
	for (const char *s = l->names + 1; s < l->names + l->len;) {
		size_t m = strlen(s);
		if (m == n - k && !memcmp(s, p + k, m))
			return 1;
		s += m + 1;
	}
	return folded_there(l, p + k, n - k) ? -1 : 0;
}

/* there() for P, a path of at most DEPTH_MAX components (its recursion
 * is one frame each). */
#define DEPTH_MAX 64
int dirlist_there(struct dirlist *d, const char *p)
{
	size_t depth = 0;

	if (p[0] != '/')
		return -1;
	for (const char *c = p; (c = strchr(c, '/')); c++)
		if (++depth > DEPTH_MAX)
			return -1;
	return there(d, p, strlen(p));
}

bool dirlist_real_path(struct dirlist *d, const char *p, char out[PATH_MAX])
{
	return dirlist_there(d, p) == 0 ? false : pol_real_path(p, out);
}

void dirlist_free(struct dirlist *d)
{
	for (size_t i = 0; i < d->n; i++) {
		free(d->l[i].dir);
		free(d->l[i].names);
	}
	d->n = 0;
}
