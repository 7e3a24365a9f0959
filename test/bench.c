/*
 * bench.c - `make bench`: figures, never pass/fail. Each figure is a ratio
 * against the plain operation on the same bytes in the same run, taken in
 * alternating rounds (these machines are small and noisy), the median kept.
 *   - journal records per second against plain write(2)s of the same bytes;
 *   - pre-image capture (jcap_content: read, compress, hash, append) of
 *     source text against a plain copy of the same files;
 *   - the journal's size for those pre-images against their bytes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../journal/journal.h"

#define ROUNDS 5

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static char scratch[64];
static char *files[4096];
static size_t nfiles;
static unsigned long long src_bytes;

static void pick_sources(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)) && nfiles < 2000) {
		char p[1024];
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (lstat(p, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < 3)
			pick_sources(p, depth + 1);
		else if (S_ISREG(st.st_mode) && strstr(e->d_name, ".h") && st.st_size < 200000) {
			files[nfiles++] = strdup(p);
			src_bytes += (unsigned long long)st.st_size;
		}
	}
	if (d)
		closedir(d);
}

static void open_fresh(struct jsession *s, struct jseg *g, int round)
{
	char dir[128];
	char *argv[] = { "bench", NULL };
	struct jsession_info info = { .argv = argv };

	snprintf(dir, sizeof(dir), "%s/j%d", scratch, round);
	if (jsession_open(s, dir, &info) || jseg_open(g, s, argv)) {
		fprintf(stderr, "bench: cannot open a journal in %s\n", dir);
		exit(1);
	}
}

static unsigned long long du(const char *dir)
{
	char cmd[256];
	unsigned long long n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "du -sb --apparent-size '%s'", dir);
	p = popen(cmd, "r");
	if (p && fscanf(p, "%llu", &n) != 1)
		n = 0;
	if (p)
		pclose(p);
	return n;
}

static void bench_records(void)
{
	enum { N = 100000 };
	double tj[ROUNDS], tp[ROUNDS];
	uint8_t buf[512];
	size_t reclen = 0;

	for (int r = 0; r < ROUNDS; r++) {
		struct jsession s;
		struct jseg g;
		struct jbuild b;
		char *argv[] = { "cc", "-c", "-O2", "src/file.c", "-o", "obj/file.o", NULL };
		char plain[128];
		double t0;
		int fd;

		open_fresh(&s, &g, r);
		t0 = now();
		for (int i = 0; i < N; i++) {
			jb_init(&b, buf, sizeof(buf), J_EXEC, 0, 1);
			jb_str(&b, F_PATH, "/usr/bin/cc");
			jb_argv(&b, F_ARGV, argv);
			jseg_append(&g, &b, NULL);
		}
		tj[r] = now() - t0;
		reclen = b.len;
		jseg_close(&g);
		jsession_close(&s);
		snprintf(plain, sizeof(plain), "%s/plain%d", scratch, r);
		fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
		t0 = now();
		for (int i = 0; i < N; i++)
			if (write(fd, buf, reclen) < 0)
				break;
		tp[r] = now() - t0;
		close(fd);
	}
	double j = median(tj, ROUNDS), p = median(tp, ROUNDS);
	printf("%-44s %12.0f rec/s  plain write: %10.0f rec/s  ratio %.2f  (%zu-byte records)\n",
	       "journal records (exec, framed+crc+chain)", N / j, N / p, j / p, reclen);
}

static void bench_preimages(void)
{
	double tj[ROUNDS], tp[ROUNDS];
	unsigned long long jbytes = 0;
	static char buf[1 << 16];

	for (int r = 0; r < ROUNDS; r++) {
		struct jsession s;
		struct jseg g;
		char dir[128], dst[1100];
		double t0;

		open_fresh(&s, &g, 100 + r);
		t0 = now();
		for (size_t i = 0; i < nfiles; i++)
			if (jcap_content(&g, (uint32_t)i + 1, files[i])) {
				fprintf(stderr, "bench: jcap_content %s failed\n", files[i]);
				exit(1);
			}
		tj[r] = now() - t0;
		jseg_close(&g);
		jsession_close(&s);
		snprintf(dir, sizeof(dir), "%s/j%d", scratch, 100 + r);
		jbytes = du(dir);
		snprintf(dir, sizeof(dir), "%s/copy%d", scratch, r);
		mkdir(dir, 0700);
		t0 = now();
		for (size_t i = 0; i < nfiles; i++) {
			int in = open(files[i], O_RDONLY), out;
			ssize_t n;
			snprintf(dst, sizeof(dst), "%s/%zu", dir, i);
			out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			while ((n = read(in, buf, sizeof(buf))) > 0)
				if (write(out, buf, (size_t)n) != n)
					break;
			close(in);
			close(out);
		}
		tp[r] = now() - t0;
	}
	double j = median(tj, ROUNDS), p = median(tp, ROUNDS);
	printf("%-44s %12.1f MB/s   plain copy: %9.1f MB/s   ratio %.2f  (%zu files, %.1f MB)\n",
	       "pre-images of source text (jcap_content)", src_bytes / j / 1e6, src_bytes / p / 1e6, j / p,
	       nfiles, src_bytes / 1e6);
	printf("%-44s %11.1f %%  of the pre-image bytes (%llu of %llu bytes)\n",
	       "journal size for those pre-images", 100.0 * (double)jbytes / (double)src_bytes, jbytes,
	       src_bytes);
}

int main(void)
{
	char cmd[128];

	strcpy(scratch, "/tmp/ftsbx-bench-XXXXXX");
	if (!mkdtemp(scratch))
		return 1;
	pick_sources("/usr/include", 0);
	printf("ftsbx bench: medians of %d alternating rounds; ratio = ftsbx time / plain time\n", ROUNDS);
	bench_records();
	if (nfiles)
		bench_preimages();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	return system(cmd) ? 1 : 0;
}
