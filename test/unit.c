/*
 * unit.c - unit tests of the journal library on cmocka: checksums, record
 * round trips, framing limits, concurrent writers and session creators,
 * version and feature refusal, object names, torn tails, and a change made
 * right after its record (cut off when it fails, rewound exactly when its
 * process dies in between), each against a fresh scratch session.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <cmocka.h>
#include "../journal/journal.h"
#include "../journal/internal.h"
#include "../journal/dedup.h"

static char scratch[256];

static int setup(void **state)
{
	(void)state;
	strcpy(scratch, "/tmp/ftsbx-unit-XXXXXX");
	assert_non_null(mkdtemp(scratch));
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	/* a test that failed before reaping its children: reaped here (for
	 * up to 10 s, or a child stuck would hold up the suite), or the next
	 * test's waitpid would see them */
	for (int tries = 0; tries < 1000; tries++) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p < 0 && errno != EINTR)
			break;          /* ECHILD: none left */
		if (p == 0)
			usleep(10000);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	return system(cmd);
}

static const char *sdir(void)
{
	static char p[300];

	snprintf(p, sizeof(p), "%s/s", scratch);
	return p;
}

/* The file G writes: a shared segment (lane) or one of its own. */
static void seg_path(char *out, size_t n, const struct jseg *g)
{
	if (g->lane >= 0)
		snprintf(out, n, "%s/log/lane-%03d.ftj", sdir(), g->lane);
	else
		snprintf(out, n, "%s/log/%llu-%d.ftj", sdir(), (unsigned long long)g->first_seq, (int)g->pid);
}

static void open_session(struct jsession *s, struct jseg *g);
static void bare_session(uint32_t without);

/* A session with one segment, both closed again. */
static void made_session(void)
{
	struct jsession s;
	struct jseg g;

	open_session(&s, &g);
	jseg_close(&g);
	jsession_close(&s);
}

static void open_session(struct jsession *s, struct jseg *g)
{
	char *argv[] = { "unit", NULL };
	struct jsession_info info = { .argv = argv, .cwd = "/w" };

	assert_int_equal(jsession_open(s, sdir(), &info), 0);
	assert_int_equal(jseg_open(g, s, argv), 0);
}

/* A reader of the session finds no damage and NREC records (SIZE_MAX:
 * any number). */
static void assert_reads_clean(size_t nrec)
{
	struct jreader r;
	char err[256];

	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	if (nrec != SIZE_MAX)
		assert_int_equal(r.nrec, nrec);
	jreader_close(&r);
}

static void test_crc32c_known_vector(void **state)
{
	(void)state;
	assert_int_equal(jcrc32c(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(jcrc32c(0, "", 0), 0);
}

/* Bit by bit, from the definition: the reference for every length and
 * alignment the word-wide path splits differently, and for chaining. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
	}
	return ~crc;
}

static void test_crc32c_lengths_and_alignments(void **state)
{
	uint8_t buf[300];

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	for (size_t off = 0; off < 9; off++)
		for (size_t n = 0; off + n <= sizeof(buf); n += 1 + n / 8) {
			uint32_t want = crc32c_bitwise(0x1234u, buf + off, n);
			assert_int_equal(jcrc32c(0x1234u, buf + off, n), want);
			assert_int_equal(jcrc32c(jcrc32c(0x1234u, buf + off, n / 3), buf + off + n / 3, n - n / 3), want);
		}
}

static void test_blake2b_known_vector(void **state)
{
	static const uint8_t want[8] = { 0xbd, 0xdd, 0x81, 0x3c, 0x63, 0x42, 0x39, 0x72 };
	uint8_t out[32];

	(void)state;
	jhash(out, "ab", 2, "c", 1);
	assert_memory_equal(out, want, sizeof(want));
}

/* One record of every type, read back field by field. */
static void test_every_record_type_round_trips(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	struct jbuild b;
	uint8_t buf[4096];
	char err[256], *argv[] = { "rm", "-rf", "x y", NULL };
	struct stat st;
	struct jstat js, back;
	uint64_t seqs[J_TYPE_MAX + 1];

	(void)state;
	open_session(&s, &g);
	assert_int_equal(lstat("/", &st), 0);
	jstat_from(&js, &st);
	for (unsigned t = J_TXN_BEGIN; t <= J_TYPE_MAX; t++) {
		if (t > J_REFUSE && t < J_CREATE)
			continue;
		jb_init(&b, buf, sizeof(buf), t, t == J_META ? JR_WEAK : 0, 7);
		jb_str(&b, F_PATH, "/w/a\nb");
		jb_str(&b, F_PATH2, "/w/c");
		jb_argv(&b, F_ARGV, argv);
		jb_bytes(&b, F_STAT, &js, sizeof(js));
		jb_u32(&b, F_STATUS, 256);
		jb_u64(&b, F_SEQREF, 42);
		assert_int_equal(jseg_append(&g, &b, &seqs[t]), 0);
	}
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(r.nrec, 1 + (J_REFUSE - J_TXN_BEGIN + 1) + (J_TYPE_MAX - J_CREATE + 1));
	assert_int_equal(r.session.type, J_SESSION);
	for (unsigned t = J_TXN_BEGIN; t <= J_TYPE_MAX; t++) {
		const struct jrecord *c;
		char *p;
		uint32_t v;
		uint64_t w;

		if (t > J_REFUSE && t < J_CREATE)
			continue;
		c = jreader_find(&r, seqs[t]);
		assert_non_null(c);
		assert_int_equal(c->type, t);
		assert_int_equal(c->txn, 7);
		assert_int_equal(c->flags, t == J_META ? JR_WEAK : 0);
		assert_int_equal(c->pid, getpid());
		p = jrec_strdup(c, F_PATH);
		assert_string_equal(p, "/w/a\nb");
		free(p);
		assert_int_equal(c->f[F_ARGV].n, sizeof("rm-rfx y") + 2);
		assert_memory_equal(c->f[F_ARGV].p, "rm\0-rf\0x y", 11);
		assert_true(jrec_stat(c, F_STAT, &back));
		assert_memory_equal(&back, &js, sizeof(js));
		assert_true(jrec_u32(c, F_STATUS, &v));
		assert_int_equal(v, 256);
		assert_true(jrec_u64(c, F_SEQREF, &w));
		assert_int_equal(w, 42);
		assert_false(jrec_u64(c, F_STATUS, &w));  /* wrong width */
	}
	jreader_close(&r);
	jseg_close(&g);
	jsession_close(&s);
}

static void test_record_too_large_is_refused_and_not_written(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	uint8_t buf[128], big[512] = { 0 };

	(void)state;
	open_session(&s, &g);
	jb_init(&b, buf, sizeof(buf), J_EXEC, 0, 1);
	jb_bytes(&b, F_ARGV, big, sizeof(big));
	assert_int_equal(jseg_append(&g, &b, NULL), -E2BIG);
	assert_reads_clean(1);          /* the segment record only */
	jseg_close(&g);
	jsession_close(&s);
}

static void test_content_round_trips_stored_and_zlib(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	struct jbuild b;
	static uint8_t buf[1 << 16], text[20000], z[1 << 15];
	char err[256], path[400];
	uint64_t seq[2];
	struct jdata d;

	(void)state;
	open_session(&s, &g);
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = "the quick brown fox\n"[i % 20];
	for (int m = 0; m < 2; m++) {
		uLongf zl = sizeof(z);
		memset(&d, 0, sizeof(d));
		d.method = m ? JD_ZLIB : JD_STORED;
		d.size = sizeof(text);
		jhash(d.hash, text, sizeof(text), NULL, 0);
		jb_init(&b, buf, sizeof(buf), J_CONTENT, 0, 1);
		jb_str(&b, F_PATH, "/w/f");
		if (m) {
			assert_int_equal(compress2(z, &zl, text, sizeof(text), 6), Z_OK);
			uint8_t *p = jb_reserve(&b, F_DATA, sizeof(d) + zl);
			memcpy(p, &d, sizeof(d));
			memcpy(p + sizeof(d), z, zl);
		} else {
			uint8_t *p = jb_reserve(&b, F_DATA, sizeof(d) + sizeof(text));
			memcpy(p, &d, sizeof(d));
			memcpy(p + sizeof(d), text, sizeof(text));
		}
		assert_int_equal(jseg_append(&g, &b, &seq[m]), 0);
	}
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	for (int m = 0; m < 2; m++) {
		int fd;
		struct stat st;
		char *back = malloc(sizeof(text));

		snprintf(path, sizeof(path), "%s/out%d", scratch, m);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		assert_int_equal(jrec_content(&r, jreader_find(&r, seq[m]), fd, err, sizeof(err)), 0);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, sizeof(text));
		assert_int_equal(pread(fd, back, sizeof(text), 0), sizeof(text));
		assert_memory_equal(back, text, sizeof(text));
		free(back);
		close(fd);
	}
	jreader_close(&r);
	jseg_close(&g);
	jsession_close(&s);
}

/* jcap_range: a part inside the file, one running past its end (clipped),
 * one from past its end (no bytes), undone in decreasing seq back to the
 * original bytes and size; a session without JI_RANGES says -ENOTSUP. */
static void test_range_parts_round_trip(void **state)
{
	enum { N = 300000 };
	static uint8_t orig[N], back[N + 9000];
	struct jsession s;
	struct jseg g;
	struct jreader r;
	struct jrange want[3] = { { 4096, 8192, 0, 0, 0 }, { N - 1000, 5000, 0, 0, 0 }, { N + 20000, 50, 0, 0, 0 } };
	char err[256], msg[512], path[400];
	struct stat st;
	int fd;

	(void)state;
	for (size_t i = 0; i < N; i++)
		orig[i] = (uint8_t)(i * 7 + i / 300);
	snprintf(path, sizeof(path), "%s/f", scratch);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0640);
	assert_int_equal(write(fd, orig, N), N);
	open_session(&s, &g);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(jcap_range(&g, 1, path, &want[i]), 0);
		assert_true(want[i].saved);
		memset(back, 'A' + i, sizeof(back));    /* what was saved, and past the end */
		assert_int_equal(pwrite(fd, back, i ? 9000 : 8192, (off_t)want[i].off), i ? 9000 : 8192);
	}
	assert_int_equal(want[0].off, 4096);
	assert_int_equal(want[0].len, 8192);
	assert_int_equal(want[1].len, 1000);
	assert_int_equal(want[1].size, N);
	assert_int_equal(want[2].off, N + 8000);        /* the end the second write left */
	assert_int_equal(want[2].len, 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	size_t parts = 0;
	for (size_t i = r.nrec; i-- > 0;) {
		const struct jrecord *c = &r.rec[i];
		uint64_t off;
		if (c->type != J_CONTENT)
			continue;
		assert_true(c->flags & JR_RANGE);
		assert_true(jrec_u64(c, F_OFFSET, &off));
		assert_int_equal(off, want[2 - parts].off);
		assert_int_equal(jundo(&r, c, msg, sizeof(msg)), 0);
		parts++;
	}
	assert_int_equal(parts, 3);
	jreader_close(&r);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, N);
	assert_int_equal(pread(fd, back, sizeof(back), 0), N);
	assert_memory_equal(back, orig, N);
	assert_int_equal(st.st_mode & 07777, 0640);
	close(fd);
}

/* A session an older ftsbx made (no JI_RANGES): its readers know no
 * parts, so none is written (the shim saves the whole file). */
static void test_range_needs_its_feature(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jrange want = { 0, 10, 0, 0, 0 };
	char path[400];

	(void)state;
	snprintf(path, sizeof(path), "%s/f", scratch);
	close(open(path, O_RDWR | O_CREAT | O_TRUNC, 0600));
	bare_session(JI_RANGES);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(jseg_open(&g, &s, NULL), 0);
	assert_int_equal(jcap_range(&g, 1, path, &want), -ENOTSUP);
	assert_false(want.saved);
	jseg_close(&g);
	jsession_close(&s);
	assert_reads_clean(1);          /* the segment's own record only */
}

/* Eight processes create the same session at once and write 2000 records
 * each: one session, every record once, seqs unique, no damage. */
static void test_concurrent_creators_and_writers_agree(void **state)
{
	enum { NPROC = 8, NREC = 2000 };
	struct jreader r;
	char err[256];
	int status;

	(void)state;
	for (int i = 0; i < NPROC; i++) {
		if (fork() == 0) {
			struct jsession s;
			struct jseg g;
			struct jbuild b;
			uint8_t buf[512];

			open_session(&s, &g);
			for (int k = 0; k < NREC; k++) {
				jb_init(&b, buf, sizeof(buf), J_EXEC, 0, (uint32_t)i + 1);
				jb_u32(&b, F_PID, (uint32_t)k);
				if (jseg_append(&g, &b, NULL))
					_exit(1);
			}
			_exit(0);
		}
	}
	for (int i = 0; i < NPROC; i++) {
		assert_int_not_equal(wait(&status), -1);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(r.nrec, NPROC * (NREC + 1));
	/* shared segments: as many as ran at once, at most one per writer */
	assert_true(r.nheads >= 1 && r.nheads <= NPROC);
	for (size_t i = 1; i < r.nrec; i++)
		assert_true(r.rec[i].seq > r.rec[i - 1].seq);
	/* every record is its writer's: the pid of its run's J_SEGMENT record,
	 * and each writer's records carry its own transaction id */
	uint32_t pid_of[NPROC + 1] = { 0 };
	for (size_t i = 0; i < r.nrec; i++) {
		const struct jrecord *c = &r.rec[i];
		if (c->type != J_EXEC)
			continue;
		assert_true(c->txn >= 1 && c->txn <= NPROC);
		if (!pid_of[c->txn])
			pid_of[c->txn] = c->pid;
		assert_int_equal(c->pid, pid_of[c->txn]);
	}
	for (int i = 1; i <= NPROC; i++)
		for (int k = i + 1; k <= NPROC; k++)
			assert_int_not_equal(pid_of[i], pid_of[k]);
	jreader_close(&r);
}

/* A writer that dies holding a shared segment between two records leaves it
 * to the next one, whose records follow in the same chain; one that dies in
 * the middle of a record (the file longer than its last record) leaves a
 * torn tail nobody appends to: the next writer takes another segment. */
static void test_shared_segment_of_a_dead_writer(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	struct jreader r;
	uint8_t buf[512];
	char err[256], path[400];
	int status, lane0 = -1;

	(void)state;
	for (int round = 0; round < 2; round++) {
		int pfd[2];

		assert_int_equal(pipe(pfd), 0);
		if (fork() == 0) {
			open_session(&s, &g);
			jb_init(&b, buf, sizeof(buf), J_EXEC, 0, (uint32_t)round + 1);
			jb_str(&b, F_PATH, "/bin/true");
			if (jseg_append(&g, &b, NULL) || write(pfd[1], &g.lane, sizeof(g.lane)) != sizeof(g.lane))
				_exit(1);
			_exit(0);       /* no jseg_close: it dies holding the segment */
		}
		int lane = -2;
		assert_int_equal(read(pfd[0], &lane, sizeof(lane)), sizeof(lane));
		close(pfd[0]);
		close(pfd[1]);
		assert_int_not_equal(wait(&status), -1);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_true(lane >= 0);
		if (round == 0)
			lane0 = lane;
		else
			assert_int_equal(lane, lane0);  /* taken over from the dead writer */
	}
	/* the third dies in the middle of a record: bytes past its last one */
	snprintf(path, sizeof(path), "%s/log/lane-%03d.ftj", sdir(), lane0);
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "torn", 4), 4);
	close(fd);
	open_session(&s, &g);
	assert_true(g.lane >= 0 && g.lane != lane0);
	jb_init(&b, buf, sizeof(buf), J_EXEC, 0, 9);
	jb_str(&b, F_PATH, "/bin/false");
	assert_int_equal(jseg_append(&g, &b, NULL), 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.nrec, 6);    /* 3 segment records, 3 exec records */
	assert_int_equal(r.ndmg, 1);    /* the torn tail, and nothing else */
	assert_true(r.dmg[0].tail);
	size_t execs = 0;
	for (size_t i = 0; i < r.nrec; i++)
		if (r.rec[i].type == J_EXEC) {
			/* the dead writers' records are theirs, the last one's this process's */
			if (r.rec[i].txn == 9)
				assert_int_equal(r.rec[i].pid, (uint32_t)getpid());
			else
				assert_int_not_equal(r.rec[i].pid, (uint32_t)getpid());
			execs++;
		}
	assert_int_equal(execs, 3);
	jreader_close(&r);
}

/* A writer in another pid namespace, where the number of a live lane
 * owner is nobody (or somebody else), never takes that lane. */
static void test_shared_segment_across_pid_namespaces(void **state)
{
	struct jsession s;
	struct jseg g;
	int pfd[2], status, lane = -2;

	(void)state;
	open_session(&s, &g);           /* this process holds its lane */
	assert_true(g.lane >= 0);
	assert_int_equal(pipe(pfd), 0);
	pid_t c = fork();
	if (c == 0) {
		if (unshare(CLONE_NEWPID) < 0) {
			int skip = -3;
			_exit(write(pfd[1], &skip, sizeof(skip)) == sizeof(skip) ? 0 : 1);
		}
		pid_t gc = fork();
		if (gc == 0) {
			struct jsession s2;
			struct jseg g2;
			open_session(&s2, &g2);
			_exit(write(pfd[1], &g2.lane, sizeof(g2.lane)) == sizeof(g2.lane) ? 0 : 1);
		}
		int st;
		_exit(waitpid(gc, &st, 0) == gc && WIFEXITED(st) ? WEXITSTATUS(st) : 1);
	}
	assert_int_equal(read(pfd[0], &lane, sizeof(lane)), sizeof(lane));
	assert_int_equal(waitpid(c, &status, 0), c);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(pfd[0]);
	close(pfd[1]);
	if (lane == -3) {
		jseg_close(&g);
		jsession_close(&s);
		skip();
	}
	assert_true(lane >= 0);
	assert_int_not_equal(lane, g.lane);
	jseg_close(&g);
	jsession_close(&s);
}

/* A session with nothing written into it yet, made WITHOUT some of the
 * features of a new one (an older layout). */
static void bare_session(uint32_t without)
{
	char *argv[] = { "unit", NULL };
	struct jsession_info info = { .argv = argv, .cwd = "/w", .without = without };
	struct jsession s;

	assert_int_equal(jsession_open(&s, sdir(), &info), 0);
	jsession_close(&s);
}

/* A session made before shared segments (its locks file ends after the
 * mutexes) still takes writers: each gets a segment of its own. */
static void test_session_without_shared_segments(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	uint8_t buf[512];
	char path[400];

	(void)state;
	bare_session(JI_SHARED);
	snprintf(path, sizeof(path), "%s/locks", sdir());
	assert_int_equal(truncate(path, JL_STRIPES * sizeof(pthread_mutex_t)), 0);
	open_session(&s, &g);
	assert_int_equal(g.lane, -1);
	jb_init(&b, buf, sizeof(buf), J_EXEC, 0, 1);
	jb_str(&b, F_PATH, "/bin/true");
	assert_int_equal(jseg_append(&g, &b, NULL), 0);
	seg_path(path, sizeof(path), &g);
	assert_int_equal(access(path, F_OK), 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_reads_clean(2);
}

/* The reserve (room for rewind marks on a full disk) is given back once:
 * SESSION/shared is cut after the policy's place; the counters go on. The
 * reserve is made with log/, by the first writer (JI_LAZYDIRS): a session
 * nothing was written in has none to give. */
static void test_reserve_is_given_back_once(void **state)
{
	struct jsession s;
	struct jseg g;
	struct stat st;
	char path[400];
	uint64_t seq;

	(void)state;
	bare_session(0);
	snprintf(path, sizeof(path), "%s/shared", sdir());
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, (off_t)(jshared_size() + JL_POLICY_MAX));
	assert_int_equal(jsession_release_reserve(&s), -ENOENT);
	assert_int_equal(jseg_open(&g, &s, NULL), 0);
	jseg_close(&g);
	seq = jsession_next_seq(&s);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_size > (off_t)(jshared_size() + JL_POLICY_MAX));
	assert_true(st.st_blocks * 512 >= (off_t)J_RESERVE_SIZE);
	assert_int_equal(jsession_release_reserve(&s), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, (off_t)(jshared_size() + JL_POLICY_MAX));
	assert_int_equal(jsession_release_reserve(&s), -ENOENT);
	assert_int_equal(jsession_next_seq(&s), seq + 1);
	jsession_close(&s);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(jsession_next_seq(&s), seq + 2);
	jsession_close(&s);
}

/* One root's compiled policy in SESSION/shared: the first claim has the
 * place, its bytes after what is mapped and its length on the first page;
 * a second root is told EBUSY, a block too big EFBIG, an older session
 * ENOTSUP; the reserve given back leaves the block whole. */
static void test_policy_slot_takes_one_root(void **state)
{
	struct jseg g;
	struct jsession s;
	struct jpolicy_slot slot;
	char path[400], blob[3000], back[3000];
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(blob); i++)
		blob[i] = (char)(i * 7 + 1);
	bare_session(0);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(jshared_policy_put(&s, 4242, blob, JL_POLICY_MAX + 1), -EFBIG);
	assert_int_equal(jshared_policy_put(&s, 4242, blob, sizeof(blob)), 0);
	assert_int_equal(jshared_policy_put(&s, 4343, blob, 10), -EBUSY);
	assert_int_equal(jseg_open(&g, &s, NULL), 0);   /* the reserve comes with log/ */
	jseg_close(&g);
	assert_int_equal(jsession_release_reserve(&s), 0);
	jsession_close(&s);
	snprintf(path, sizeof(path), "%s/shared", sdir());
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &slot, sizeof(slot), JL_POLICY_SLOT), sizeof(slot));
	assert_true(slot.owner == (JL_POLICY_CLAIMED | 4242));
	assert_int_equal(slot.len, sizeof(blob));
	assert_int_equal(pread(fd, back, sizeof(back), (off_t)jshared_size()), sizeof(back));
	assert_memory_equal(back, blob, sizeof(blob));
	close(fd);
}

/* An older session has no place for it: each root writes a file. */
static void test_policy_slot_not_in_an_older_session(void **state)
{
	struct jsession s;

	(void)state;
	bare_session(JI_SHARED);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(jshared_policy_put(&s, 4242, "x", 1), -ENOTSUP);
	jsession_close(&s);
}

/* A session of the older layout: its counters in SESSION/seq go on, its
 * reserve is a file of its own, removed once. */
static void test_older_session_layout_still_works(void **state)
{
	struct jsession s;
	char path[400];
	uint64_t seq;

	(void)state;
	bare_session(JI_SHARED);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	seq = jsession_next_seq(&s);
	jsession_close(&s);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(s.features, JI_NEW & ~(JI_SHARED | JI_LAZYDIRS));
	assert_non_null(s.lanes);
	assert_true(s.logfd >= 0 && s.objfd >= 0);      /* made with the session */
	assert_int_equal(jsession_next_seq(&s), seq + 1);
	snprintf(path, sizeof(path), "%s/reserve", sdir());
	assert_int_equal(jsession_release_reserve(&s), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(jsession_release_reserve(&s), -ENOENT);
	jsession_close(&s);
}

static void rewrite_u16(const char *path, off_t off, uint16_t v)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &v, 2, off), 2);
	close(fd);
}

static void test_newer_version_is_refused_with_a_message(void **state)
{
	struct jsession s;
	struct jreader r;
	char err[256], path[400];

	(void)state;
	made_session();
	snprintf(path, sizeof(path), "%s/session", sdir());
	rewrite_u16(path, 8, J_VERSION + 1);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), -EPROTONOSUPPORT);
	snprintf(path, sizeof(path), "version %d;", J_VERSION + 1);
	assert_non_null(strstr(err, path));
	jreader_close(&r);
	assert_int_equal(jsession_open(&s, sdir(), NULL), -EPROTONOSUPPORT);
}

/* Header bytes 12..15 of FILE (a session or segment file), or set them to
 * V with the header's crc redone. */
static uint32_t header_features(const char *file)
{
	uint8_t h[J_FILE_HDR];
	uint32_t v;
	int fd = open(file, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), sizeof(h));
	close(fd);
	memcpy(&v, h + 12, 4);
	return v;
}

static void set_header_features(const char *file, uint32_t v)
{
	uint8_t h[J_FILE_HDR];
	uint32_t crc;
	int fd = open(file, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), sizeof(h));
	memcpy(h + 12, &v, 4);
	crc = jcrc32c(0, h, 28);
	memcpy(h + 28, &crc, 4);
	assert_int_equal(pwrite(fd, h, sizeof(h), 0), sizeof(h));
	close(fd);
}

static void test_new_session_and_its_segments_have_the_current_features(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256], path[400];

	(void)state;
	open_session(&s, &g);
	assert_int_equal(s.features, JI_NEW);
	seg_path(path, sizeof(path), &g);
	assert_int_equal(header_features(path), JI_NEW);
	jseg_close(&g);
	jsession_close(&s);
	snprintf(path, sizeof(path), "%s/session", sdir());
	assert_int_equal(header_features(path), JI_NEW);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.features, JI_NEW);
	assert_int_equal(r.ndmg, 0);
	jreader_close(&r);
}

static bool exists_in_session(const char *name)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", sdir(), name);
	return access(path, F_OK) == 0;
}

/* A new session has neither log/ nor objects/ (JI_LAZYDIRS): a reader
 * finds no record in it, the first segment makes log/, the first object
 * objects/; log/ removed after that is damage, which a writer refuses
 * (EIO) and a reader reports, rather than a log/ begun anew. */
static void test_log_and_objects_are_made_at_first_need(void **state)
{
	struct jsession s, s2;
	struct jseg g, g2;
	struct jreader r;
	char *argv[] = { "unit", NULL };
	char err[256], path[400];

	(void)state;
	bare_session(0);
	assert_false(exists_in_session("log"));
	assert_false(exists_in_session("objects"));
	assert_reads_clean(0);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(s.logfd, -1);
	assert_int_equal(s.objfd, -1);
	assert_int_equal(jseg_open(&g, &s, argv), 0);
	assert_true(exists_in_session("log"));
	assert_false(exists_in_session("objects"));
	assert_true(jsession_objfd(&s) >= 0);
	assert_true(exists_in_session("objects"));
	assert_int_equal(jsession_objfd(&s), s.objfd);  /* kept */
	jseg_close(&g);
	jsession_close(&s);
	assert_reads_clean(1);                          /* the segment's J_SEGMENT */

	snprintf(path, sizeof(path), "rm -rf '%s/log'", sdir());
	assert_int_equal(system(path), 0);
	assert_int_equal(jsession_open(&s2, sdir(), NULL), 0);
	assert_int_equal(jseg_open(&g2, &s2, argv), -EIO);
	assert_false(exists_in_session("log"));
	jsession_close(&s2);
	assert_int_not_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_non_null(strstr(err, "log/"));
}

/* A segment a writer has made and not yet written its header into holds
 * no record: no damage while its writer lives (SEQ-PID.ftj) or while the
 * shared table has its lane as nothing written (lane-K.ftj). An empty one
 * whose writer is gone, or an emptied lane, lost its records: damage; so
 * is a header cut short. */
static void test_empty_segment_is_damage_only_once_its_writer_is_gone(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char path[400], lane[400], err[256];
	size_t nrec;
	pid_t dead;
	int fd, st;

	(void)state;
	open_session(&s, &g);
	assert_true(g.lane >= 0);
	seg_path(lane, sizeof(lane), &g);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	nrec = r.nrec;
	jreader_close(&r);
	assert_true(nrec > 0);

	snprintf(path, sizeof(path), "%s/log/999-%d.ftj", sdir(), (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/log/lane-200.ftj", sdir());   /* a taker between */
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_reads_clean(nrec);

	dead = fork();
	assert_true(dead >= 0);
	if (dead == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, &st, 0), dead);
	snprintf(path, sizeof(path), "%s/log/998-%d.ftj", sdir(), (int)dead);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 1);
	assert_non_null(strstr(r.dmg[0].what, "writer is gone"));
	assert_true(r.dmg[0].tail);
	assert_int_equal(r.nrec, nrec);
	jreader_close(&r);
	assert_int_equal(write(fd, "FTSBX", 5), 5);     /* a header cut short */
	close(fd);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 1);
	assert_non_null(strstr(r.dmg[0].what, "torn segment header"));
	jreader_close(&r);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(truncate(lane, 0), 0);         /* the lane's records gone */
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 1);
	assert_non_null(strstr(r.dmg[0].what, "writer is gone"));
	assert_true(r.nrec < nrec);
	jreader_close(&r);

	snprintf(path, sizeof(path), "%s/log/997-1.ftj", sdir());     /* not a file: read, not waited for */
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 2);
	assert_true(strstr(r.dmg[0].what, "cannot read") || strstr(r.dmg[1].what, "cannot read"));
	jreader_close(&r);
}

/* log/ and its mark made by another writer while a writer or a reader
 * looks for log/ is no damage: the mark is read before the directory.
 * Many fresh sessions, a child writing into each while the parent writes
 * and reads: every open succeeds and no reader reports damage. */
static void test_log_made_by_another_writer_meanwhile_is_no_damage(void **state)
{
	char *argv[] = { "unit", NULL };
	char cmd[400];

	(void)state;
	for (int i = 0; i < 300; i++) {
		struct jsession s;
		struct jseg g;
		struct jreader r;
		char err[256];
		int st, rc;
		pid_t pid;

		bare_session(0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct jsession cs;
			struct jseg cg;
			if (jsession_open(&cs, sdir(), NULL) || jseg_open(&cg, &cs, argv))
				_exit(1);
			jseg_close(&cg);
			jsession_close(&cs);
			_exit(0);
		}
		if (i & 1) {
			rc = jreader_open(&r, sdir(), err, sizeof(err));
			assert_int_equal(rc, 0);
			assert_int_equal(r.ndmg, 0);
			jreader_close(&r);
		} else {
			assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
			assert_int_equal(jseg_open(&g, &s, argv), 0);
			jseg_close(&g);
			jsession_close(&s);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sdir());
		assert_int_equal(system(cmd), 0);
	}
}

/* A session made without JI_LAZYDIRS (an older writer's) has both from the
 * start, and a writer opens them with the session. */
static void test_session_without_lazy_dirs_has_them_at_once(void **state)
{
	struct jsession s;

	(void)state;
	bare_session(JI_LAZYDIRS);
	assert_true(exists_in_session("log"));
	assert_true(exists_in_session("objects"));
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(s.features, JI_NEW & ~JI_LAZYDIRS);
	assert_true(s.logfd >= 0 && s.objfd >= 0);
	jsession_close(&s);
}

/* An old session (no features) opened by a new writer: its segments say
 * none either, and its objects stay flat. */
static void test_session_without_features_keeps_them_off(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256], path[400], obj[JOBJ_PATH_MAX];

	(void)state;
	bare_session(JI_NEW);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	assert_int_equal(s.features, 0);
	assert_int_equal(jseg_open(&g, &s, NULL), 0);
	seg_path(path, sizeof(path), &g);
	assert_int_equal(header_features(path), 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.features, 0);
	jreader_object(&r, 1571, "ino", obj);
	assert_string_equal(obj, "objects/1571.ino");
	jreader_close(&r);
}

static void test_unknown_feature_is_refused_with_a_message(void **state)
{
	struct jsession s;
	struct jreader r;
	char err[256], path[400];

	(void)state;
	made_session();
	snprintf(path, sizeof(path), "%s/session", sdir());
	set_header_features(path, JI_NEW | 0x80000000u);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "features 0x80000000"));
	assert_non_null(strstr(err, "newer"));
	jreader_close(&r);
	assert_int_equal(jsession_open(&s, sdir(), NULL), -EPROTONOSUPPORT);
}

/* A segment whose features are not its session's is not read. */
static void test_segment_with_other_features_is_damage(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256], path[400];

	(void)state;
	open_session(&s, &g);
	seg_path(path, sizeof(path), &g);
	jseg_close(&g);
	jsession_close(&s);
	set_header_features(path, 0);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 1);
	assert_non_null(strstr(r.dmg[0].what, "features"));
	assert_int_equal(r.nrec, 0);
	jreader_close(&r);
}

static void test_object_names_fan_out_by_seq(void **state)
{
	char name[JOBJ_NAME_MAX];

	(void)state;
	assert_int_equal(jobject_name(name, JI_OBJDIRS, 1571, "ino"), 3);
	assert_string_equal(name, "15/1571.ino");
	assert_int_equal(jobject_name(name, JI_NEW, 99, "gz"), 2);
	assert_string_equal(name, "0/99.gz");
	assert_int_equal(jobject_name(name, JI_NEW, 100, "ino"), 2);
	assert_string_equal(name, "1/100.ino");
	assert_int_equal(jobject_name(name, JI_NEW, UINT64_MAX, "ino"), 19);
	assert_string_equal(name, "184467440737095516/18446744073709551615.ino");
	assert_int_equal(jobject_name(name, 0, 1571, "gz"), 0);
	assert_string_equal(name, "1571.gz");
	assert_int_equal(jobject_name(name, JI_INODE_XATTRS, 0, "ino"), 0);
	assert_string_equal(name, "0.ino");
}

static void test_directory_that_is_not_a_session_is_refused(void **state)
{
	struct jsession s;
	struct jreader r;
	char err[256], path[400];
	char *argv[] = { "x", NULL };
	struct jsession_info info = { .argv = argv };

	(void)state;
	snprintf(path, sizeof(path), "%s/keep", scratch);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(jsession_open(&s, scratch, &info), -EPROTO);
	assert_int_equal(jreader_open(&r, scratch, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "not an ftsbx journal"));
	jreader_close(&r);
	assert_int_equal(access(path, F_OK), 0);    /* nothing of it was touched */
}

/* Cut the last record at every byte: the reader keeps everything before it
 * and reports a torn tail unless the cut falls on the record boundary. */
static void test_torn_tail_keeps_every_record_before_it(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	struct jreader r;
	uint8_t buf[512];
	char err[256], seg[400];
	struct stat st;
	off_t before = 0, full;

	(void)state;
	open_session(&s, &g);
	for (int k = 0; k < 5; k++) {
		if (k == 4)
			before = lseek(g.fd, 0, SEEK_END);
		jb_init(&b, buf, sizeof(buf), J_EXEC, 0, 1);
		jb_str(&b, F_PATH, "/bin/true");
		assert_int_equal(jseg_append(&g, &b, NULL), 0);
	}
	seg_path(seg, sizeof(seg), &g);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(stat(seg, &st), 0);
	full = st.st_size;
	for (off_t cut = full - 1; cut >= before; cut--) {
		assert_int_equal(truncate(seg, cut), 0);
		assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
		assert_int_equal(r.nrec, 5);    /* segment record + 4 intact */
		assert_int_equal(r.ndmg, cut == before ? 0 : 1);
		if (r.ndmg) {
			assert_true(r.dmg[0].tail);
			assert_int_equal(r.dmg[0].offset, before);
		}
		jreader_close(&r);
	}
}

/* ---- a change made by the journal right after its record ------------------ */

static int change_fails(void *arg)
{
	(*(int *)arg)++;
	return -EXDEV;
}

static int change_done(void *arg)
{
	(*(int *)arg)++;
	return 0;
}

static void exec_record(struct jbuild *b, uint8_t *buf, size_t n, const char *path)
{
	jb_init(b, buf, n, J_EXEC, 0, 1);
	jb_str(b, F_PATH, path);
}

/* A change that fails leaves no trace of its record: the segment is cut
 * back, the chain goes on from the record before, its seq stays a gap. */
static void test_record_of_a_failed_change_is_cut_off(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	struct jreader r;
	uint8_t buf[512];
	char err[256];
	bool kept = true;
	int calls = 0;

	(void)state;
	open_session(&s, &g);
	exec_record(&b, buf, sizeof(buf), "/bin/a");
	assert_int_equal(jseg_append(&g, &b, NULL), 0);
	uint64_t end = g.end;
	exec_record(&b, buf, sizeof(buf), "/bin/failed");
	assert_int_equal(jseg_append_then(&g, &b, jsession_next_seq(&s), change_fails, &calls, &kept), -EXDEV);
	assert_int_equal(calls, 1);
	assert_false(kept);
	assert_int_equal(g.end, end);
	assert_int_equal(lseek(g.fd, 0, SEEK_END), (off_t)end);
	exec_record(&b, buf, sizeof(buf), "/bin/done");
	assert_int_equal(jseg_append_then(&g, &b, jsession_next_seq(&s), change_done, &calls, &kept), 0);
	assert_int_equal(calls, 2);
	assert_true(kept);
	exec_record(&b, buf, sizeof(buf), "/bin/c");
	assert_int_equal(jseg_append(&g, &b, NULL), 0);
	jseg_close(&g);
	/* the next taker of the lane finds its length as the last owner left it */
	assert_int_equal(jseg_open(&g, &s, NULL), 0);
	exec_record(&b, buf, sizeof(buf), "/bin/d");
	assert_int_equal(jseg_append(&g, &b, NULL), 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	const char *want[] = { "/bin/a", "/bin/done", "/bin/c", "/bin/d" };
	size_t k = 0;
	for (size_t i = 0; i < r.nrec; i++) {
		if (r.rec[i].type != J_EXEC)
			continue;
		char *p = jrec_strdup(&r.rec[i], F_PATH);
		assert_true(k < 4);
		assert_string_equal(p, want[k++]);
		free(p);
	}
	assert_int_equal(k, 4);
	jreader_close(&r);
}

/* Kill the calling process at its next rename (SECCOMP_RET_KILL_PROCESS:
 * the system call is never made), as a kill -9 would between a removal's
 * record and its rename. */
static void die_at_rename(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat2, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
		_exit(99);
}

static void no_say(void *ctx, int level, const char *msg)
{
	(void)ctx;
	(void)level;
	(void)msg;
}

/* An unlink the journal makes by a rename after the record: a writer
 * killed between the two leaves the record (the inode "kept" in an object
 * that was never made) and the file where it was. The rewind must leave
 * that file exactly as it is: the same inode, bytes, mode, mtime, and its
 * directory's mtime. */
static void test_removal_killed_between_record_and_rename_rewinds_exactly(void **state)
{
	char dir[300], file[400], other[400], err[256];
	struct stat before, dbefore, after, dafter;
	struct jrewind_opts o = { .say = no_say };
	struct jrewind_stats rs = { 0 };
	struct jreader r;
	int status, fd;

	(void)state;
	made_session();
	snprintf(dir, sizeof(dir), "%s/w", scratch);
	snprintf(file, sizeof(file), "%s/victim", dir);
	snprintf(other, sizeof(other), "%s/other-name", dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0640);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "pre-image\n", 10), 10);
	struct timespec t[2] = { { 1000000000, 123456789 }, { 1000000000, 987654321 } };
	assert_int_equal(futimens(fd, t), 0);
	close(fd);
	assert_int_equal(link(file, other), 0);        /* a hard link group to keep */
	assert_int_equal(utimensat(AT_FDCWD, dir, t, 0), 0);
	assert_int_equal(lstat(file, &before), 0);
	assert_int_equal(lstat(dir, &dbefore), 0);
	if (fork() == 0) {
		struct jsession s;
		struct jseg g;
		int dfd = open(dir, O_RDONLY | O_DIRECTORY);

		open_session(&s, &g);
		die_at_rename();
		int e = jcap_unlinkat(&g, 7, file, dfd, "victim");
		_exit(e == JCAP_DONE ? 0 : 1);  /* not reached: the rename kills it */
	}
	assert_int_not_equal(wait(&status), -1);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS);
	/* the record is in the journal; the file is still there */
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	size_t removes = 0;
	for (size_t i = 0; i < r.nrec; i++)
		if (r.rec[i].type == J_REMOVE) {
			assert_true(r.rec[i].f[F_INODE].present);
			removes++;
		}
	assert_int_equal(removes, 1);
	assert_int_equal(r.ndmg, 0);
	jreader_close(&r);
	assert_int_equal(jrewind(sdir(), &o, &rs), 0);
	assert_int_equal(rs.failed, 0);
	assert_int_equal(lstat(file, &after), 0);
	assert_int_equal(lstat(dir, &dafter), 0);
	assert_int_equal(after.st_ino, before.st_ino);
	assert_int_equal(after.st_nlink, 2);
	assert_int_equal(after.st_mode, before.st_mode);
	assert_int_equal(after.st_size, 10);
	assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
	assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
	assert_int_equal(dafter.st_mtim.tv_nsec, dbefore.st_mtim.tv_nsec);
	char bytes[32] = { 0 };
	fd = open(file, O_RDONLY);
	assert_int_equal(read(fd, bytes, sizeof(bytes)), 10);
	close(fd);
	assert_string_equal(bytes, "pre-image\n");
	/* nothing else came into the directory (no object was linked back) */
	assert_int_equal(dafter.st_nlink, dbefore.st_nlink);
	assert_int_equal(access(other, F_OK), 0);
}

/* The same removal, not killed: the file is gone, its inode is the object,
 * and the rewind links it back (the same inode, its hard link group). */
static void test_removal_by_rename_keeps_the_inode(void **state)
{
	char dir[300], file[400], obj[400];
	struct stat before, after, kept;
	struct jrewind_opts o = { .say = no_say };
	struct jrewind_stats rs = { 0 };
	struct jsession s;
	struct jseg g;
	int fd;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/w", scratch);
	snprintf(file, sizeof(file), "%s/victim", dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(lstat(file, &before), 0);
	open_session(&s, &g);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	uint64_t next = s.ctr[0];
	assert_int_equal(jcap_unlinkat(&g, 7, file, dfd, "victim"), JCAP_DONE);
	close(dfd);
	assert_int_equal(lstat(file, &after), -1);
	assert_int_equal(errno, ENOENT);
	/* the record's seq names the object: the one after the parent's J_META */
	bool found = false;
	for (uint64_t q = next; q <= s.ctr[0] && !found; q++) {
		char name[JOBJ_NAME_MAX];
		jobject_name(name, s.features, q, "ino");
		snprintf(obj, sizeof(obj), "%s/objects/%s", sdir(), name);
		found = lstat(obj, &kept) == 0;
	}
	assert_true(found);
	assert_int_equal(kept.st_ino, before.st_ino);
	assert_int_equal(kept.st_nlink, 1);
	/* a missing file: nothing to keep, the program's call fails (ENOENT) */
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(jcap_unlinkat(&g, 7, file, dfd, "victim"), 0);
	/* a directory: journaled the old way, the program's call decides (EISDIR) */
	char sub[400];
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	assert_int_equal(mkdirat(dfd, "sub", 0700), 0);
	assert_int_equal(jcap_unlinkat(&g, 7, sub, dfd, "sub"), 0);
	assert_int_equal(unlinkat(dfd, "sub", 0), -1);
	assert_int_equal(errno, EISDIR);
	close(dfd);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jrewind(sdir(), &o, &rs), 0);
	assert_int_equal(lstat(sub, &after), 0);
	assert_true(S_ISDIR(after.st_mode));
	assert_int_equal(lstat(file, &after), 0);
	assert_int_equal(after.st_ino, before.st_ino);
	assert_int_equal(lstat(obj, &kept), -1);
}

/* ---- records copied into a mapped window of a lane ------------------------ */

#define MANY 100        /* records enough for a writer to map its lane (writer.c: MAP_AFTER) */

static void append_many(struct jseg *g, int n, const char *path)
{
	uint8_t buf[512];
	struct jbuild b;

	for (int i = 0; i < n; i++) {
		exec_record(&b, buf, sizeof(buf), path);
		assert_int_equal(jseg_append(g, &b, NULL), 0);
	}
}

static off_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static size_t count_type(const struct jreader *r, unsigned type)
{
	size_t n = 0;

	for (size_t i = 0; i < r->nrec; i++)
		n += r->rec[i].type == type;
	return n;
}

/* A writer that dies holding a mapped lane leaves zeros after its last
 * record: a reader takes them as the end of the segment, and the next
 * taker of the lane cuts them off and goes on with its chain. */
static void test_mapped_lane_ends_in_zeros_read_as_its_end(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256], seg[400];
	int status, pfd[2];
	int lane = -1;
	uint64_t end = 0;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	if (fork() == 0) {
		open_session(&s, &g);
		append_many(&g, MANY, "/bin/dead");
		if (!g.map || write(pfd[1], &g.lane, sizeof(g.lane)) != sizeof(g.lane) ||
		    write(pfd[1], &g.end, sizeof(g.end)) != sizeof(g.end))
			_exit(1);
		_exit(0);       /* holding the lane, its window mapped */
	}
	close(pfd[1]);
	assert_int_not_equal(wait(&status), -1);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(read(pfd[0], &lane, sizeof(lane)), sizeof(lane));
	assert_int_equal(read(pfd[0], &end, sizeof(end)), sizeof(end));
	close(pfd[0]);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	snprintf(seg, sizeof(seg), "%s/log/lane-%03d.ftj", sdir(), lane);
	assert_true((uint64_t)file_size(seg) > end);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(count_type(&r, J_EXEC), MANY);
	jreader_close(&r);
	open_session(&s, &g);
	assert_int_equal(g.lane, lane);         /* taken over, its zeros cut off */
	append_many(&g, 1, "/bin/next");
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(count_type(&r, J_EXEC), MANY + 1);
	assert_int_equal(count_type(&r, J_SEGMENT), 2);
	jreader_close(&r);
}

/* A copy into the window cut short (its writer killed mid-record) leaves
 * bytes that are not zeros after the last whole record: a torn tail, and
 * nobody takes that lane again. */
static void test_mapped_record_cut_short_is_a_torn_tail(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256];
	int status, pfd[2], lane = -1;
	uint64_t end = 0;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	if (fork() == 0) {
		open_session(&s, &g);
		append_many(&g, MANY, "/bin/dead");
		if (!g.map)
			_exit(1);
		/* the second half of a record, as a copy from its end would leave */
		memset(g.map + (g.end - g.map_off) + 40, 0x5a, 60);
		if (write(pfd[1], &g.lane, sizeof(g.lane)) != sizeof(g.lane) ||
		    write(pfd[1], &g.end, sizeof(g.end)) != sizeof(g.end))
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	assert_int_not_equal(wait(&status), -1);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(read(pfd[0], &lane, sizeof(lane)), sizeof(lane));
	assert_int_equal(read(pfd[0], &end, sizeof(end)), sizeof(end));
	close(pfd[0]);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 1);
	assert_true(r.dmg[0].tail);
	assert_int_equal(r.dmg[0].offset, end);
	assert_int_equal(count_type(&r, J_EXEC), MANY);
	jreader_close(&r);
	open_session(&s, &g);
	assert_true(g.lane >= 0 && g.lane != lane);
	jseg_close(&g);
	jsession_close(&s);
}

static int change_killed(void *arg)
{
	(void)arg;
	raise(SIGKILL);
	return 0;
}

/* In a mapped window too: a failed change's record is zeros again, and a
 * writer killed between a record and its change leaves the record whole. */
static void test_mapped_record_of_a_failed_or_killed_change(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jbuild b;
	struct jreader r;
	uint8_t buf[512];
	char err[256];
	bool kept = true;
	int calls = 0, status;

	(void)state;
	if (fork() == 0) {
		open_session(&s, &g);
		append_many(&g, MANY, "/bin/x");
		exec_record(&b, buf, sizeof(buf), "/bin/failed");
		if (!g.map || jseg_append_then(&g, &b, jsession_next_seq(&s), change_fails, &calls, &kept) != -EXDEV ||
		    kept)
			_exit(1);
		append_many(&g, 1, "/bin/after");
		exec_record(&b, buf, sizeof(buf), "/bin/killed");
		jseg_append_then(&g, &b, jsession_next_seq(&s), change_killed, &calls, &kept);
		_exit(2);
	}
	assert_int_not_equal(wait(&status), -1);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(count_type(&r, J_EXEC), MANY + 2);
	char *last = jrec_strdup(&r.rec[r.nrec - 1], F_PATH);
	char *before = jrec_strdup(&r.rec[r.nrec - 2], F_PATH);
	assert_string_equal(last, "/bin/killed");
	assert_string_equal(before, "/bin/after");
	free(last);
	free(before);
	jreader_close(&r);
}

/* A durable session writes (and syncs) every record: no window, no zeros. */
static void test_durable_session_never_maps(void **state)
{
	struct jsession s;
	struct jseg g;
	char seg[400];

	(void)state;
	char *argv[] = { "unit", NULL };
	struct jsession_info info = { .argv = argv, .cwd = "/w" };
	assert_int_equal(jsession_open(&s, sdir(), &info), 0);
	s.flags |= JS_DURABLE;
	assert_int_equal(jseg_open(&g, &s, argv), 0);
	append_many(&g, MANY, "/bin/durable");
	assert_null(g.map);
	seg_path(seg, sizeof(seg), &g);
	assert_int_equal((uint64_t)file_size(seg), g.end);
	jseg_close(&g);
	jsession_close(&s);
}

/* A fork child lets go of the window it inherited and takes a lane of its
 * own; the parent goes on in its window. */
static void test_fork_child_of_a_mapped_writer(void **state)
{
	struct jsession s;
	struct jseg g;
	struct jreader r;
	char err[256];
	int status;

	(void)state;
	open_session(&s, &g);
	append_many(&g, MANY, "/bin/parent");
	assert_non_null(g.map);
	if (fork() == 0) {
		int parent_lane = g.lane;
		jseg_close(&g);
		if (jseg_open(&g, &s, NULL) || g.lane == parent_lane)
			_exit(1);
		append_many(&g, MANY, "/bin/child");
		jseg_close(&g);
		_exit(0);
	}
	append_many(&g, MANY, "/bin/parent");
	assert_int_not_equal(wait(&status), -1);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	jseg_close(&g);
	jsession_close(&s);
	assert_int_equal(jreader_open(&r, sdir(), err, sizeof(err)), 0);
	assert_int_equal(r.ndmg, 0);
	assert_int_equal(count_type(&r, J_EXEC), 3 * MANY);
	jreader_close(&r);
}

/* Copy on first write across one directory's page of the table and past it
 * (a page holds 170 slots): every path is captured once per transaction,
 * the next transaction's change of it captures again, a failed record
 * gives the slot back, and another process sees what this one claimed. */
static bool claim(struct jsession *s, uint32_t txn, uint64_t gen, int i, bool ok)
{
	struct dclaim c;
	char path[64];

	snprintf(path, sizeof(path), "/w/one dir/f%04d", i);
	if (dedup_claim(s, txn, gen, path, DL_FULL, &c))
		return true;
	dedup_done(&c, ok);
	return false;
}

static void test_dedup_one_directory_past_its_page(void **state)
{
	enum { N = 1500 };
	struct jsession s;
	struct stat st;
	char path[400];
	uint64_t gen;
	pid_t pid;
	int status;

	(void)state;
	bare_session(0);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	gen = dedup_generation(&s);
	for (int i = 0; i < N; i++)
		assert_false(claim(&s, 7, gen, i, i % 100 != 5));
	for (int i = 0; i < N; i++)         /* the failed ones once more */
		assert_int_equal(claim(&s, 7, gen, i, true), i % 100 != 5);
	for (int i = 0; i < N; i++)
		assert_true(claim(&s, 7, gen, i, true));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct jsession c;
		int bad = jsession_open(&c, sdir(), NULL) != 0;
		for (int i = 0; i < N && !bad; i++)
			bad = !claim(&c, 7, gen, i, true) || (i % 2 && claim(&c, 8, gen, i, true));
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(status, 0);
	for (int i = 0; i < N; i++)         /* the odd ones are transaction 8's now */
		assert_int_equal(claim(&s, 7, gen, i, true), i % 2 == 0);
	for (int i = 0; i < N; i++)         /* another generation starts afresh */
		assert_false(claim(&s, 7, gen + 1, i, true));
	jsession_close(&s);
	snprintf(path, sizeof(path), "%s/dedup3", sdir());
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 4 << 20);
}

/* sed -i's pattern: every file of one directory at a generation of its
 * own (each rename moves it on), more of them than the directory's pages
 * hold; each claim is new once and known after, and no generation's
 * record stands for another's */
static void test_dedup_one_directory_many_generations(void **state)
{
	enum { N = 2000 };
	struct jsession s;
	uint64_t gen;

	(void)state;
	bare_session(0);
	assert_int_equal(jsession_open(&s, sdir(), NULL), 0);
	gen = dedup_generation(&s);
	for (int i = 0; i < N; i++) {
		assert_false(claim(&s, 7, gen + (uint64_t)i, i, true));
		assert_true(claim(&s, 7, gen + (uint64_t)i, i, true));
		assert_false(claim(&s, 7, gen + (uint64_t)i + 1, i, i % 3 != 0));
	}
	for (int i = 0; i < N; i++) {
		assert_true(claim(&s, 7, gen + (uint64_t)i, i, true));
		assert_int_equal(claim(&s, 7, gen + (uint64_t)i + 1, i, true), i % 3 != 0);
		assert_false(claim(&s, 8, gen + (uint64_t)i + 2, i, true));
	}
	jsession_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_known_vector),
		cmocka_unit_test(test_crc32c_lengths_and_alignments),
		cmocka_unit_test(test_blake2b_known_vector),
		cmocka_unit_test_setup_teardown(test_every_record_type_round_trips, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_too_large_is_refused_and_not_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_content_round_trips_stored_and_zlib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_creators_and_writers_agree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_segment_of_a_dead_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_is_given_back_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_older_session_layout_still_works, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_and_objects_are_made_at_first_need, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_made_by_another_writer_meanwhile_is_no_damage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_segment_is_damage_only_once_its_writer_is_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_session_without_lazy_dirs_has_them_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_policy_slot_takes_one_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_policy_slot_not_in_an_older_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_session_without_shared_segments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_segment_across_pid_namespaces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_version_is_refused_with_a_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_session_and_its_segments_have_the_current_features, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_session_without_features_keeps_them_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_feature_is_refused_with_a_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_with_other_features_is_damage, setup, teardown),
		cmocka_unit_test(test_object_names_fan_out_by_seq),
		cmocka_unit_test_setup_teardown(test_directory_that_is_not_a_session_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_tail_keeps_every_record_before_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_of_a_failed_change_is_cut_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_removal_killed_between_record_and_rename_rewinds_exactly, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_removal_by_rename_keeps_the_inode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mapped_lane_ends_in_zeros_read_as_its_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mapped_record_cut_short_is_a_torn_tail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mapped_record_of_a_failed_or_killed_change, setup, teardown),
		cmocka_unit_test_setup_teardown(test_durable_session_never_maps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fork_child_of_a_mapped_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dedup_one_directory_past_its_page, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dedup_one_directory_many_generations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_range_parts_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_range_needs_its_feature, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
