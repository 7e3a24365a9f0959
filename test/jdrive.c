/*
 * jdrive.c - a test driver that changes a tree the way the shim will: the
 * undo record first (jcap_*), then the real call. Lets tests write journals
 * of known content without the shim, from one process or several.
 *
 *   jdrive SESSION [--durable] OP ARG... [:: OP ARG...]...
 *
 * Exit status: 0 done, 1 a real call failed, 2 bad usage, 3 the session or
 * a capture failed (and the change was not made).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "../journal/journal.h"
#include "../journal/dedup.h"

enum { OK = 0, FAILED = 1, USAGE = 2, NOJOURNAL = 3 };

struct drive {
	struct jsession s;
	struct jseg g;
	uint32_t txn;
	char cwd[PATH_MAX];
	const char *op;                /* the op running, for messages */
};

struct op {
	const char *name;
	int min, max;                  /* argument counts; max -1: any */
	const char *types;             /* one letter per argument (see arg_ok); the last repeats */
	int (*run)(struct drive *d, int argc, char **argv);
	const char *usage;
};

static uint8_t recbuf[1u << 20];

/* ---- helpers ------------------------------------------------------------- */

static int usage_error(const char *msg)
{
	fprintf(stderr, "jdrive: %s\n"
		"usage: jdrive SESSION [--durable] OP ARG... [:: OP ARG...]...\n", msg);
	return USAGE;
}

static int journal_error(struct drive *d, const char *path, int err)
{
	fprintf(stderr, "jdrive: cannot journal %s '%s': %s\n", d->op, path, strerror(-err));
	return NOJOURNAL;
}

static int call_result(struct drive *d, const char *path, int rc)
{
	if (rc >= 0)
		return OK;
	fprintf(stderr, "jdrive: %s '%s': %s\n", d->op, path, strerror(errno));
	return FAILED;
}

static bool number(const char *s, int base, unsigned long long *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, base);
	return *s && *s != '-' && !*end && !errno;
}

/* An argument check() has already found to be a number. */
static unsigned long long num(const char *s, int base)
{
	return strtoull(s, NULL, base);
}

/* The absolute, normalised form of ARG (static storage, two at a time). */
static const char *abspath(struct drive *d, const char *arg)
{
	static char buf[2][PATH_MAX];
	static int which;
	char *out = buf[which++ & 1];

	if (jpath_norm(out, PATH_MAX, d->cwd, arg) < 0)
		return arg;     /* too long: the capture reports it */
	return out;
}

static int append(struct drive *d, struct jbuild *b)
{
	int err = jseg_append(&d->g, b, NULL);

	if (err)
		return journal_error(d, "-", err);
	return OK;
}

/* A NULL-terminated copy of ARGV[0..ARGC). */
static char **vec(int argc, char **argv)
{
	char **v = calloc((size_t)argc + 1, sizeof(*v));

	if (!v) {
		perror("jdrive");
		exit(FAILED);
	}
	memcpy(v, argv, (size_t)argc * sizeof(*v));
	return v;
}

/* ---- transactions and events ------------------------------------------------- */

static int op_begin(struct drive *d, int argc, char **argv)
{
	struct jbuild b;
	char **v = vec(argc, argv);
	int rc;

	d->txn = jsession_next_txn(&d->s);
	jb_init(&b, recbuf, sizeof(recbuf), J_TXN_BEGIN, 0, d->txn);
	jb_u32(&b, F_PID, (uint32_t)getpid());
	if (argc)
		jb_argv(&b, F_ARGV, v);
	jb_str(&b, F_CWD, d->cwd);
	free(v);
	rc = append(d, &b);
	if (rc == OK) {
		printf("txn %u\n", d->txn);
		fflush(stdout);
	}
	return rc;
}

static int op_txn(struct drive *d, int argc, char **argv)
{
	(void)argc;
	d->txn = (uint32_t)num(argv[0], 10);
	return OK;
}

static int op_end(struct drive *d, int argc, char **argv)
{
	struct jbuild b;
	long status = argc ? strtol(argv[0], NULL, 10) : 0;

	jb_init(&b, recbuf, sizeof(recbuf), J_TXN_END, 0, d->txn);
	jb_u32(&b, F_PID, (uint32_t)getpid());
	jb_u32(&b, F_STATUS, (uint32_t)(int32_t)status);
	return append(d, &b);
}

static int op_pid(struct drive *d, int argc, char **argv)
{
	(void)d;
	(void)argc;
	(void)argv;
	printf("pid %d\n", (int)getpid());
	return OK;
}

static int exec_record(struct drive *d, char **v)
{
	struct jbuild b;

	jb_init(&b, recbuf, sizeof(recbuf), J_EXEC, 0, d->txn);
	jb_u32(&b, F_PID, (uint32_t)getpid());
	jb_u32(&b, F_PPID, (uint32_t)getppid());
	jb_str(&b, F_PATH, v[0]);
	jb_argv(&b, F_ARGV, v);
	jb_str(&b, F_CWD, d->cwd);
	return append(d, &b);
}

static int op_exec(struct drive *d, int argc, char **argv)
{
	char **v = vec(argc, argv);
	int rc = exec_record(d, v);

	free(v);
	return rc;
}

static int op_spam(struct drive *d, int argc, char **argv)
{
	unsigned long long n = num(argv[0], 10);
	char i_str[32];
	char *v[] = { "spam", i_str, NULL };
	int rc = OK;

	(void)argc;
	for (unsigned long long i = 0; i < n && rc == OK; i++) {
		snprintf(i_str, sizeof(i_str), "%llu", i);
		rc = exec_record(d, v);
	}
	return rc;
}

static int op_refuse(struct drive *d, int argc, char **argv)
{
	struct jbuild b;

	jb_init(&b, recbuf, sizeof(recbuf), J_REFUSE, 0, d->txn);
	jb_str(&b, F_OP, argv[0]);
	jb_str(&b, F_RULE, argv[1]);
	jb_u32(&b, F_ERRNO, (uint32_t)EACCES);
	if (argc > 2)
		jb_str(&b, F_PATH, abspath(d, argv[2]));
	return append(d, &b);
}

static int op_sleep(struct drive *d, int argc, char **argv)
{
	unsigned long long ms = num(argv[0], 10);
	struct timespec ts;

	(void)d;
	(void)argc;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	return OK;
}

/* ---- changes to the tree: capture, then the call -------------------------------- */

static int capture(struct drive *d, const char *arg, enum jcap_op op)
{
	int err = jcap_path(&d->g, d->txn, abspath(d, arg), op);

	return err ? journal_error(d, arg, err) : OK;
}

static int write_at(struct drive *d, const char *arg, int flags, const void *p, size_t n, off_t off)
{
	int fd = open(arg, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
	ssize_t w = 0;
	int rc;

	if (fd < 0)
		return call_result(d, arg, -1);
	if (n)
		w = off >= 0 ? pwrite(fd, p, n, off) : write(fd, p, n);
	if (w >= 0 && (size_t)w != n) {
		errno = EIO;
		w = -1;
	}
	rc = call_result(d, arg, w < 0 ? -1 : 0);
	close(fd);
	return rc;
}

static int op_write(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_WRITE);

	(void)argc;
	return rc ? rc : write_at(d, argv[0], 0, argv[2], strlen(argv[2]), (off_t)num(argv[1], 10));
}

static int op_put(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_TRUNC);

	(void)argc;
	return rc ? rc : write_at(d, argv[0], O_TRUNC, argv[1], strlen(argv[1]), -1);
}

static int op_append(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_APPEND);

	(void)argc;
	return rc ? rc : write_at(d, argv[0], O_APPEND, argv[1], strlen(argv[1]), -1);
}

/* SIZE bytes of text lines from a fixed xorshift sequence: compressible,
 * yet no two lines alike. */
static int fill_fd(int fd, unsigned long long size)
{
	static char buf[1u << 16];
	uint64_t x = 88172645463325252ull, line = 0;

	while (size) {
		size_t n = 0;

		while (n < sizeof(buf) - 128) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			n += (size_t)snprintf(buf + n, 128, "%08llu the quick brown fox %016llx jumps\n",
					      (unsigned long long)line++, (unsigned long long)(x & 0xffff0000ffffull));
		}
		if (n > size)
			n = (size_t)size;
		if (write(fd, buf, n) != (ssize_t)n)
			return -1;
		size -= n;
	}
	return 0;
}

static int op_fill(struct drive *d, int argc, char **argv)
{
	int fd, rc;

	(void)argc;
	rc = capture(d, argv[0], JC_TRUNC);
	if (rc)
		return rc;
	fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return call_result(d, argv[0], -1);
	rc = call_result(d, argv[0], fill_fd(fd, num(argv[1], 10)));
	close(fd);
	return rc;
}

static int op_truncate(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_TRUNC);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], truncate(argv[0], (off_t)num(argv[1], 10)));
}

/* The new path ARG is about to be created. */
static int capture_create(struct drive *d, const char *arg)
{
	int err = jcap_create(&d->g, d->txn, abspath(d, arg));

	return err ? journal_error(d, arg, err) : OK;
}

static int op_mkdir(struct drive *d, int argc, char **argv)
{
	mode_t mode = argc > 1 ? (mode_t)num(argv[1], 8) : 0755;
	int rc = capture_create(d, argv[0]);
	return rc ? rc : call_result(d, argv[0], mkdir(argv[0], mode));
}

static int op_mkfifo(struct drive *d, int argc, char **argv)
{
	mode_t mode = argc > 1 ? (mode_t)num(argv[1], 8) : 0644;
	int rc = capture_create(d, argv[0]);
	return rc ? rc : call_result(d, argv[0], mkfifo(argv[0], mode));
}

static int op_link(struct drive *d, int argc, char **argv)
{
	int rc = capture_create(d, argv[1]);

	(void)argc;
	return rc ? rc : call_result(d, argv[1], linkat(AT_FDCWD, argv[0], AT_FDCWD, argv[1], 0));
}

static int op_symlink(struct drive *d, int argc, char **argv)
{
	int rc = capture_create(d, argv[1]);

	(void)argc;
	return rc ? rc : call_result(d, argv[1], symlink(argv[0], argv[1]));
}

static int capture_remove(struct drive *d, const char *arg)
{
	int err = jcap_remove(&d->g, d->txn, abspath(d, arg));

	return err ? journal_error(d, arg, err) : OK;
}

static int op_unlink(struct drive *d, int argc, char **argv)
{
	int rc = capture_remove(d, argv[0]);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], unlink(argv[0]));
}

static int op_rmdir(struct drive *d, int argc, char **argv)
{
	int rc = capture_remove(d, argv[0]);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], rmdir(argv[0]));
}

static int op_rename(struct drive *d, int argc, char **argv)
{
	unsigned flags = 0;
	const char *from, *to;
	int err;

	if (argc > 2)
		flags = !strcmp(argv[2], "noreplace") ? RENAME_NOREPLACE : RENAME_EXCHANGE;
	from = abspath(d, argv[0]);
	to = abspath(d, argv[1]);
	bool dirs;

	err = jcap_rename(&d->g, d->txn, from, to, flags, &dirs);
	if (err)
		return journal_error(d, argv[0], err);
	return call_result(d, argv[0], renameat2(AT_FDCWD, argv[0], AT_FDCWD, argv[1], flags));
}

static int op_chmod(struct drive *d, int argc, char **argv)
{
	mode_t mode = (mode_t)num(argv[1], 8);
	int rc = capture(d, argv[0], JC_META);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], fchmodat(AT_FDCWD, argv[0], mode, AT_SYMLINK_NOFOLLOW));
}

static int op_chown(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_META);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], lchown(argv[0], (uid_t)num(argv[1], 10),
							   (gid_t)num(argv[2], 10)));
}

static int op_utime(struct drive *d, int argc, char **argv)
{
	struct timespec ts[2];
	int rc;

	(void)argc;
	ts[0].tv_sec = ts[1].tv_sec = (time_t)num(argv[1], 10);
	ts[0].tv_nsec = ts[1].tv_nsec = (long)num(argv[2], 10);
	rc = capture(d, argv[0], JC_META);
	return rc ? rc : call_result(d, argv[0], utimensat(AT_FDCWD, argv[0], ts, AT_SYMLINK_NOFOLLOW));
}

static int op_setxattr(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_META);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], lsetxattr(argv[0], argv[1], argv[2], strlen(argv[2]), 0));
}

static int op_rmxattr(struct drive *d, int argc, char **argv)
{
	int rc = capture(d, argv[0], JC_META);

	(void)argc;
	return rc ? rc : call_result(d, argv[0], lremovexattr(argv[0], argv[1]));
}

/* ---- the table and the driver ---------------------------------------------------- */

static const struct op ops[] = {
	{ "append",   2, 2,  "ps",   op_append,    "append PATH DATA" },
	{ "begin",    0, -1, "s",    op_begin,     "begin [ARGV...]" },
	{ "chmod",    2, 2,  "po",   op_chmod,     "chmod PATH MODE" },
	{ "chown",    3, 3,  "pnn",  op_chown,     "chown PATH UID GID" },
	{ "end",      0, 1,  "i",    op_end,       "end [STATUS]" },
	{ "exec",     1, -1, "s",    op_exec,      "exec ARGV..." },
	{ "fill",     2, 2,  "pn",   op_fill,      "fill PATH SIZE" },
	{ "link",     2, 2,  "pp",   op_link,      "link FROM TO" },
	{ "mkdir",    1, 2,  "po",   op_mkdir,     "mkdir PATH [MODE]" },
	{ "mkfifo",   1, 2,  "po",   op_mkfifo,    "mkfifo PATH [MODE]" },
	{ "pid",      0, 0,  "",     op_pid,       "pid" },
	{ "put",      2, 2,  "ps",   op_put,       "put PATH DATA" },
	{ "refuse",   2, 3,  "ssp",  op_refuse,    "refuse OP RULE [PATH]" },
	{ "rename",   2, 3,  "ppf",  op_rename,    "rename FROM TO [noreplace|exchange]" },
	{ "rmdir",    1, 1,  "p",    op_rmdir,     "rmdir PATH" },
	{ "rmxattr",  2, 2,  "ps",   op_rmxattr,   "rmxattr PATH NAME" },
	{ "setxattr", 3, 3,  "pss",  op_setxattr,  "setxattr PATH NAME VALUE" },
	{ "sleep",    1, 1,  "n",    op_sleep,     "sleep MS" },
	{ "spam",     1, 1,  "n",    op_spam,      "spam N" },
	{ "symlink",  2, 2,  "sp",   op_symlink,   "symlink TARGET PATH" },
	{ "truncate", 2, 2,  "pn",   op_truncate,  "truncate PATH SIZE" },
	{ "txn",      1, 1,  "t",    op_txn,       "txn N" },
	{ "unlink",   1, 1,  "p",    op_unlink,    "unlink PATH" },
	{ "utime",    3, 3,  "pnn",  op_utime,     "utime PATH SEC NSEC" },
	{ "write",    3, 3,  "pns",  op_write,     "write PATH OFFSET DATA" },
};

static const struct op *find_op(const char *name)
{
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (!strcmp(ops[i].name, name))
			return &ops[i];
	return NULL;
}

/* The length of the op starting at ARGV[0] (up to "::" or the end). */
static int op_len(int argc, char **argv)
{
	int n = 0;

	while (n < argc && strcmp(argv[n], "::"))
		n++;
	return n;
}

/* Whether A is an argument of TYPE: s a string, p a path, n a decimal
 * number, o a mode (octal), i an int, t a transaction, f a rename flag. */
static bool arg_ok(char type, const char *a)
{
	unsigned long long v;
	char *end;
	long l;

	switch (type) {
	case 'n':
		return number(a, 10, &v);
	case 'o':
		return number(a, 8, &v) && v <= 07777;
	case 't':
		return number(a, 10, &v) && v <= UINT32_MAX;
	case 'i':
		errno = 0;
		l = strtol(a, &end, 10);
		return *a && !*end && !errno && l >= INT32_MIN && l <= INT32_MAX;
	case 'f':
		return !strcmp(a, "noreplace") || !strcmp(a, "exchange");
	}
	return true;
}

static bool args_ok(const struct op *o, int argc, char **argv)
{
	size_t nt = strlen(o->types);

	for (int i = 0; i < argc; i++)
		if (!arg_ok(o->types[(size_t)i < nt ? (size_t)i : nt - 1], argv[i]))
			return false;
	return true;
}

/* Check every op's name and arguments before anything changes. */
static int check(int argc, char **argv)
{
	char msg[256];

	for (int i = 0; i < argc; ) {
		int n = op_len(argc - i, argv + i);
		const struct op *o = n ? find_op(argv[i]) : NULL;

		if (!o) {
			snprintf(msg, sizeof(msg), "unknown op '%s'", n ? argv[i] : "");
			return usage_error(msg);
		}
		if (n - 1 < o->min || (o->max >= 0 && n - 1 > o->max) || !args_ok(o, n - 1, argv + i + 1)) {
			snprintf(msg, sizeof(msg), "usage: %s", o->usage);
			return usage_error(msg);
		}
		i += n + 1;
	}
	return OK;
}

static int run(struct drive *d, int argc, char **argv)
{
	int rc = OK;

	for (int i = 0; i < argc && rc == OK; ) {
		int n = op_len(argc - i, argv + i);
		const struct op *o = find_op(argv[i]);

		d->op = o->name;
		rc = o->run(d, n - 1, argv + i + 1);
		i += n + 1;
	}
	return rc;
}

static int start(struct drive *d, const char *dir, bool durable, char **argv)
{
	struct jsession_info info = { .argv = argv, .cwd = d->cwd };
	int err = jsession_open(&d->s, dir, &info);

	if (err) {
		fprintf(stderr, "jdrive: cannot open session '%s': %s\n", dir, strerror(-err));
		/* not a session we can use, or one we cannot write to */
		return err == -EPROTO || err == -EPROTONOSUPPORT ? FAILED : NOJOURNAL;
	}
	if (durable)
		d->s.flags |= JS_DURABLE;
	err = jseg_open(&d->g, &d->s, argv);
	if (err) {
		fprintf(stderr, "jdrive: cannot open a segment in '%s': %s\n", dir, strerror(-err));
		jsession_close(&d->s);
		return NOJOURNAL;
	}
	return OK;
}

int main(int argc, char **argv)
{
	static struct drive d;
	bool durable;
	int first, rc;

	if (argc < 3)
		return usage_error("missing SESSION or OP");
	durable = !strcmp(argv[2], "--durable");
	first = durable ? 3 : 2;
	rc = check(argc - first, argv + first);
	if (rc)
		return rc;
	if (first >= argc)
		return usage_error("missing OP");
	if (!getcwd(d.cwd, sizeof(d.cwd))) {
		perror("jdrive: getcwd");
		return FAILED;
	}
	rc = start(&d, argv[1], durable, argv);
	if (rc)
		return rc;
	rc = run(&d, argc - first, argv + first);
	jseg_close(&d.g);
	jsession_close(&d.s);
	return rc;
}
