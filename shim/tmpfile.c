/*
 * tmpfile.c - mkstemp and its family, and mkdtemp. glibc creates these
 * files through its internal open, which no hook sees; so the shim makes
 * the name itself and creates the file through the hooked open (or mkdir),
 * which journals the creation first, as any other.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

static void fill_random(char *x)
{
	uint8_t r[6];

	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t v = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)getpid() << 32;
		for (int i = 0; i < 6; i++, v >>= 8)
			r[i] = (uint8_t)v;
	}
	for (int i = 0; i < 6; i++)
		x[i] = letters[r[i] % (sizeof(letters) - 1)];
}

/* Returns the fd (or 0 for a directory), or -1 with errno. */
static int make_temp(char *t, int suffixlen, int flags, bool dir)
{
	size_t len = t ? strlen(t) : 0;
	char *x;

	if (suffixlen < 0 || len < (size_t)suffixlen + 6 || memcmp(t + len - suffixlen - 6, "XXXXXX", 6)) {
		errno = EINVAL;
		return -1;
	}
	x = t + len - suffixlen - 6;
	for (int tries = 0; tries < 10000; tries++) {
		int r;
		fill_random(x);
		r = dir ? mkdir(t, 0700) : open(t, (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL, 0600);
		if (r >= 0 || errno != EEXIST)
			return r;
	}
	errno = EEXIST;
	return -1;
}

EXPORT int mkstemp(char *t) { return make_temp(t, 0, 0, false); }
EXPORT int mkstemp64(char *t) { return make_temp(t, 0, 0, false); }
EXPORT int mkostemp(char *t, int fl) { return make_temp(t, 0, fl, false); }
EXPORT int mkostemp64(char *t, int fl) { return make_temp(t, 0, fl, false); }
EXPORT int mkstemps(char *t, int sl) { return make_temp(t, sl, 0, false); }
EXPORT int mkstemps64(char *t, int sl) { return make_temp(t, sl, 0, false); }
EXPORT int mkostemps(char *t, int sl, int fl) { return make_temp(t, sl, fl, false); }
EXPORT int mkostemps64(char *t, int sl, int fl) { return make_temp(t, sl, fl, false); }
EXPORT char *mkdtemp(char *t) { return make_temp(t, 0, 0, true) == 0 ? t : NULL; }
