/*
 * txreplay.c - read a journal and rewind it. One sorted table of
 * subcommands, one cmd_* function each (list, log, rewind, show, verify),
 * one option parser shared by all of them, in the manner of git.c.
 *
 * Everything here only reads what the reader (journal/reader.c) hands over:
 * every field is checked for presence and size before it is used, so no
 * journal, however damaged or hostile, can crash it (DESIGN.md invariant 4).
 *
 * Output: text for people, JSON Lines (--json) for programs. Paths and argv
 * are bytes; text escapes control characters and invalid UTF-8 C-style
 * (\n, \xNN), JSON writes invalid bytes as \udcXX (Python's surrogateescape:
 * json.loads then os.fsencode gives back the exact bytes).
 *
 * "status" in `log --json` is the record's raw wait(2) status; in
 * `list --json` it is the exit status as a shell reports it (128 + signal
 * for a killed process, with "signal" set).
 *
 * Exit codes: 0 ok, 1 damaged journal or failed operation, 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../journal/journal.h"

#define TXREPLAY_VERSION "0.1.0"
#define EXIT_FAILED 1
#define EXIT_USAGE  2

/* ---- messages --------------------------------------------------------- */

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
	fflush(stdout);         /* keep stdout and stderr in order on a tty */
	fprintf(stderr, "txreplay: %s", prefix);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

/* Report a failure; returns the exit code, so that `return error(...)`. */
__attribute__((format(printf, 1, 2)))
static int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("", fmt, ap);
	va_end(ap);
	return EXIT_FAILED;
}

__attribute__((format(printf, 1, 2)))
static void warning(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("warning: ", fmt, ap);
	va_end(ap);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p) {
		fputs("txreplay: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return p;
}

/* ---- the command table and option parser ------------------------------ */

enum opt {
	OPT_JSON, OPT_HEADS, OPT_TXN, OPT_TO, OPT_DRY_RUN, OPT_CASCADE, OPT_FORCE, OPT_CONTENT,
	NOPT
};
#define O(x) (1u << (x))

static const struct option {
	const char *name;
	uint64_t max;                  /* 0: a flag; else takes a number up to this */
} options[NOPT] = {
	[OPT_JSON]    = { "--json", 0 },
	[OPT_HEADS]   = { "--heads", 0 },
	[OPT_TXN]     = { "--txn", UINT32_MAX },
	[OPT_TO]      = { "--to", UINT64_MAX },
	[OPT_DRY_RUN] = { "--dry-run", 0 },
	[OPT_CASCADE] = { "--cascade", 0 },
	[OPT_FORCE]   = { "--force", 0 },
	[OPT_CONTENT] = { "--content", 0 },
};

struct args {
	const struct cmd *cmd;
	const char *journal;
	const char *seq;               /* show's SEQ */
	unsigned set;                  /* O(OPT_*) given */
	uint64_t num[NOPT];
};

struct cmd {
	const char *name;
	int (*fn)(const struct args *a);
	unsigned opts;                 /* O(OPT_*) accepted */
	bool takes_seq;
	const char *usage;
};

static int cmd_list(const struct args *a);
static int cmd_log(const struct args *a);
static bool has_txn(const struct jreader *r, uint32_t txn)
{
	for (size_t i = 0; i < r->nrec; i++)
		if (r->rec[i].txn == txn)
			return true;
	return false;
}

static int cmd_rewind(const struct args *a);
static int cmd_show(const struct args *a);
static int cmd_verify(const struct args *a);

/* Sorted by name (bsearch). */
static const struct cmd commands[] = {
	{ "list", cmd_list, O(OPT_JSON), false, "list JOURNAL [--json]" },
	{ "log", cmd_log, O(OPT_JSON) | O(OPT_TXN), false, "log JOURNAL [--json] [--txn N]" },
	{ "rewind", cmd_rewind, O(OPT_TXN) | O(OPT_TO) | O(OPT_DRY_RUN) | O(OPT_CASCADE) | O(OPT_FORCE),
	  false, "rewind JOURNAL [--txn N | --to SEQ] [--dry-run] [--cascade] [--force]" },
	{ "show", cmd_show, O(OPT_CONTENT), true, "show JOURNAL SEQ [--content]" },
	{ "verify", cmd_verify, O(OPT_HEADS), false, "verify JOURNAL [--heads]" },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void print_usage(FILE *f, const struct cmd *only)
{
	if (only) {
		fprintf(f, "usage: txreplay %s\n", only->usage);
		return;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "%s txreplay %s\n", i ? "   or:" : "usage:", commands[i].usage);
	fputs("   or: txreplay --help | --version\n", f);
}

__attribute__((format(printf, 2, 3)))
static int usage_error(const struct cmd *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("", fmt, ap);
	va_end(ap);
	print_usage(stderr, c);
	return EXIT_USAGE;
}

static bool is_help(const char *s)
{
	return !strcmp(s, "--help") || !strcmp(s, "-h");
}

/* A decimal number up to MAX: no sign, no spaces, nothing after it. */
static bool parse_num(const char *s, uint64_t max, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && !*end && *v <= max;
}

static int find_option(const char *arg, const char **val)
{
	for (int i = 0; i < NOPT; i++) {
		size_t l = strlen(options[i].name);

		if (strncmp(arg, options[i].name, l))
			continue;
		if (!arg[l]) {
			*val = NULL;
			return i;
		}
		if (arg[l] == '=' && options[i].max) {
			*val = arg + l + 1;
			return i;
		}
	}
	return -1;
}

static int take_positional(const struct cmd *c, struct args *a, const char *arg)
{
	if (!a->journal)
		a->journal = arg;
	else if (c->takes_seq && !a->seq)
		a->seq = arg;
	else
		return usage_error(c, "unexpected argument '%s'", arg);
	return 0;
}

/* Options may come before or after the positional arguments; "--" ends
 * them. Returns 0, EXIT_USAGE, or -1 when help was asked for. */
static int parse_args(const struct cmd *c, int argc, char **argv, struct args *a)
{
	bool dashdash = false;

	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i], *val;
		int o;

		if (dashdash || arg[0] != '-' || !arg[1]) {
			if (take_positional(c, a, arg))
				return EXIT_USAGE;
			continue;
		}
		if (!strcmp(arg, "--")) {
			dashdash = true;
			continue;
		}
		if (is_help(arg))
			return -1;
		o = find_option(arg, &val);
		if (o < 0 || !(c->opts & O(o)))
			return usage_error(c, "unknown option '%s'", arg);
		if (options[o].max && !val && i + 1 < argc)
			val = argv[++i];
		if (options[o].max && !val)
			return usage_error(c, "option '%s' needs a value", options[o].name);
		if (options[o].max && !parse_num(val, options[o].max, &a->num[o]))
			return usage_error(c, "option '%s': '%s' is not a valid number", options[o].name, val);
		a->set |= O(o);
	}
	if (!a->journal)
		return usage_error(c, "missing JOURNAL");
	if (c->takes_seq && !a->seq)
		return usage_error(c, "missing SEQ");
	return 0;
}

static int cmp_cmd(const void *key, const void *elem)
{
	return strcmp(key, ((const struct cmd *)elem)->name);
}

/* ---- the journal, with its rewound marks ------------------------------ */

struct mark { uint64_t ref, by; };     /* record REF was undone by J_REWOUND BY */

struct journal {
	struct jreader r;
	struct mark *marks;            /* sorted by ref */
	size_t nmarks;
};

static int cmp_mark(const void *a, const void *b)
{
	const struct mark *x = a, *y = b;

	return x->ref < y->ref ? -1 : x->ref > y->ref;
}

static void collect_marks(struct journal *j)
{
	j->marks = xcalloc(j->r.nrec, sizeof(*j->marks));
	for (size_t i = 0; i < j->r.nrec; i++) {
		const struct jrecord *c = &j->r.rec[i];
		uint64_t ref;

		if (c->type == J_REWOUND && jrec_u64(c, F_SEQREF, &ref))
			j->marks[j->nmarks++] = (struct mark){ ref, c->seq };
	}
	qsort(j->marks, j->nmarks, sizeof(*j->marks), cmp_mark);
}

/* Open DIR; on failure report it and return EXIT_FAILED. */
static int journal_open(struct journal *j, const char *dir)
{
	char err[512] = "";
	int e;

	memset(j, 0, sizeof(*j));
	e = jreader_open(&j->r, dir, err, sizeof(err));
	if (e) {
		jreader_close(&j->r);
		if (!*err)
			snprintf(err, sizeof(err), "cannot open '%s': %s", dir, strerror(-e));
		return error("%s", err);
	}
	collect_marks(j);
	return 0;
}

/* For the commands that show what is intact: say once that not all is. */
static void warn_damage(const struct journal *j, const char *dir)
{
	if (j->r.ndmg)
		warning("'%s' is damaged (%zu problems); only intact records are shown "
			"(see txreplay verify)", dir, j->r.ndmg);
}

static void journal_close(struct journal *j)
{
	jreader_close(&j->r);
	free(j->marks);
}

/* The J_REWOUND record that undid SEQ, or 0. */
static uint64_t undone_by(const struct journal *j, uint64_t seq)
{
	struct mark key = { .ref = seq };
	const struct mark *m = bsearch(&key, j->marks, j->nmarks, sizeof(key), cmp_mark);

	return m ? m->by : 0;
}

static bool is_change(unsigned type)
{
	return type >= J_CREATE && type <= J_META;
}

static bool has_content(const struct jrecord *c)
{
	return c->f[F_DATA].present || c->f[F_OBJECT].present;
}

/* A field read as an i32 (F_STATUS, F_ERRNO). */
static bool rec_i32(const struct jrecord *c, enum jtag t, int32_t *v)
{
	uint32_t u;

	if (!jrec_u32(c, t, &u))
		return false;
	*v = (int32_t)u;
	return true;
}

/* The process that wrote C: its own PID field, else its segment's. */
static uint32_t rec_pid(const struct jrecord *c, enum jtag t)
{
	uint32_t v = 0;

	if (jrec_u32(c, t, &v))
		return v;
	return t == F_PID ? c->pid : c->ppid;
}

/* ---- formatting: times, escapes, argv --------------------------------- */

enum tstyle { T_ISO, T_CLOCK, T_TABLE };

static const struct { const char *fmt; int digits; const char *suffix; } tstyles[] = {
	[T_ISO]   = { "%Y-%m-%dT%H:%M:%S", 9, "Z" },
	[T_CLOCK] = { "%H:%M:%S", 6, "" },
	[T_TABLE] = { "%Y-%m-%d %H:%M:%S", 3, "" },
};

/* NS (nanoseconds since the epoch) in UTC, in BUF of at least 64 bytes. */
static const char *fmt_time(char *buf, size_t n, int64_t ns, enum tstyle s)
{
	int64_t sec = ns / 1000000000, frac = ns % 1000000000;
	time_t t;
	struct tm tm;
	size_t l;

	if (frac < 0) {
		frac += 1000000000;
		sec--;
	}
	t = (time_t)sec;
	if (!gmtime_r(&t, &tm) || !(l = strftime(buf, n, tstyles[s].fmt, &tm))) {
		snprintf(buf, n, "@%" PRId64, ns);
		return buf;
	}
	for (int d = tstyles[s].digits; d < 9; d++)
		frac /= 10;
	snprintf(buf + l, n - l, ".%0*" PRId64 "%s", tstyles[s].digits, frac, tstyles[s].suffix);
	return buf;
}

/* Length of the valid UTF-8 sequence at P (at most N bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const uint8_t *p, size_t n)
{
	static const uint8_t lo[] = { 0x80, 0xa0, 0x80, 0x90, 0x80 };
	static const uint8_t hi[] = { 0xbf, 0xbf, 0x9f, 0xbf, 0x8f };
	size_t len, k;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, k = 0;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, k = p[0] == 0xe0 ? 1 : p[0] == 0xed ? 2 : 0;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, k = p[0] == 0xf0 ? 3 : p[0] == 0xf4 ? 4 : 0;
	else
		return 0;
	if (n < len || p[1] < lo[k] || p[1] > hi[k])
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/* A code point that breaks lines or drives terminals although it is valid
 * UTF-8: the C1 controls, U+2028 and U+2029. */
static bool unsafe_code_point(const uint8_t *p, size_t l)
{
	return (l == 2 && p[0] == 0xc2 && p[1] < 0xa0) ||
	       (l == 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9));
}

/* One byte that cannot be written as it is. */
static void put_byte_escape(FILE *f, uint8_t b, bool json, char quote)
{
	static const char named[] = "\nn\tt\rr\bb\ff";
	const char *e = b ? memchr(named, b, sizeof(named) - 1) : NULL;

	if (b == '\\' || b == quote)
		fprintf(f, "\\%c", b);
	else if (e && (e - named) % 2 == 0)
		fprintf(f, "\\%c", e[1]);
	else if (!json)
		fprintf(f, "\\x%02x", b);
	else
		fprintf(f, b < 0x80 ? "\\u%04x" : "\\udc%02x", b);
}

/* Write N bytes at P, escaped for JSON (inside double quotes) or C-style
 * text (inside QUOTE, 0 for none). */
static void put_escaped(FILE *f, const uint8_t *p, size_t n, bool json, char quote)
{
	if (json)
		quote = '"';
	for (size_t i = 0; i < n; ) {
		size_t l = utf8_len(p + i, n - i);

		if (l > 1 && unsafe_code_point(p + i, l) && json) {
			fprintf(f, "\\u%04x", l == 2 ? p[i + 1] : 0x2000 | (p[i + 2] & 0x3f));
		} else if (l > 1 && unsafe_code_point(p + i, l)) {
			for (size_t k = 0; k < l; k++)
				fprintf(f, "\\x%02x", p[i + k]);
		} else if (l > 1 || (l == 1 && p[i] >= 0x20 && p[i] != 0x7f && p[i] != '\\' && p[i] != quote)) {
			fwrite(p + i, 1, l, f);
		} else {
			put_byte_escape(f, p[i], json, quote);
			l = 1;
		}
		i += l;
	}
}

/* Step through an F_ARGV field: NUL-terminated strings (a last one without
 * its NUL is taken as it is). */
static bool argv_next(const struct jfield *f, size_t *off, const uint8_t **p, size_t *n)
{
	const uint8_t *z;

	if (*off >= f->n)
		return false;
	*p = f->p + *off;
	z = memchr(*p, 0, f->n - *off);
	*n = z ? (size_t)(z - *p) : f->n - *off;
	*off += *n + 1;
	return true;
}

/* ARGV for a person: words separated by spaces, quoted when they hold one. */
static void put_argv_text(FILE *f, const struct jfield *argv)
{
	const uint8_t *p;
	size_t n, off = 0;
	bool first = true;

	while (argv_next(argv, &off, &p, &n)) {
		bool quote = !n || memchr(p, ' ', n) || memchr(p, '\'', n);

		fputs(first ? "" : " ", f);
		fputs(quote ? "'" : "", f);
		put_escaped(f, p, n, false, quote ? '\'' : 0);
		fputs(quote ? "'" : "", f);
		first = false;
	}
}

/* ---- a JSON object, one per line -------------------------------------- */

struct jo { FILE *f; int n; };

static void jo_key(struct jo *o, const char *k)
{
	fprintf(o->f, "%s\"%s\":", o->n++ ? "," : "{", k);
}

static void jo_end(struct jo *o)
{
	fputs(o->n ? "}\n" : "{}\n", o->f);
}

static void jo_null(struct jo *o, const char *k)
{
	jo_key(o, k);
	fputs("null", o->f);
}

static void jo_int(struct jo *o, const char *k, long long v)
{
	jo_key(o, k);
	fprintf(o->f, "%lld", v);
}

static void jo_uint(struct jo *o, const char *k, unsigned long long v)
{
	jo_key(o, k);
	fprintf(o->f, "%llu", v);
}

static void jo_bool(struct jo *o, const char *k, bool v)
{
	jo_key(o, k);
	fputs(v ? "true" : "false", o->f);
}

static void jo_bytes(struct jo *o, const char *k, const void *p, size_t n)
{
	jo_key(o, k);
	fputc('"', o->f);
	put_escaped(o->f, p, n, true, 0);
	fputc('"', o->f);
}

static void jo_str(struct jo *o, const char *k, const char *s)
{
	jo_bytes(o, k, s, strlen(s));
}

static void jo_time(struct jo *o, const char *k, int64_t ns)
{
	char buf[64];

	jo_str(o, k, fmt_time(buf, sizeof(buf), ns, T_ISO));
}

/* A byte field of C as a string, or null. */
static void jo_field(struct jo *o, const char *k, const struct jrecord *c, enum jtag t)
{
	if (c->f[t].present)
		jo_bytes(o, k, c->f[t].p, c->f[t].n);
	else
		jo_null(o, k);
}

static void jo_argv(struct jo *o, const char *k, const struct jfield *argv)
{
	const uint8_t *p;
	size_t n, off = 0;
	int i = 0;

	if (!argv || !argv->present) {
		jo_null(o, k);
		return;
	}
	jo_key(o, k);
	fputc('[', o->f);
	while (argv_next(argv, &off, &p, &n)) {
		fputs(i++ ? ",\"" : "\"", o->f);
		put_escaped(o->f, p, n, true, 0);
		fputc('"', o->f);
	}
	fputc(']', o->f);
}

static void jo_i32(struct jo *o, const char *k, const struct jrecord *c, enum jtag t)
{
	int32_t v = 0;

	if (rec_i32(c, t, &v))
		jo_int(o, k, v);
	else
		jo_null(o, k);
}

/* ---- list ----------------------------------------------------------- */

struct txrow {
	uint32_t txn;
	const struct jfield *argv;     /* the root command, or NULL */
	bool argv_from_begin;
	/* the first program starts, to find the tool call's own among them
	 * (a program it started may be recorded before it: a posix_spawn'd
	 * child's start is recorded by its parent once the spawn returns) */
	struct { uint32_t pid, ppid; const struct jfield *argv; } ex[16];
	unsigned nex;
	int64_t first, last;
	size_t records, changes, refused;
	size_t strong, strong_undone, undone; /* strong: changes not JR_WEAK */
	bool has_status;
	int32_t status;                /* wait(2) status */
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* One row per distinct txn among the records, sorted by txn. */
static struct txrow *make_rows(const struct jreader *r, size_t *nrows)
{
	uint32_t *ids = xcalloc(r->nrec, sizeof(*ids));
	struct txrow *rows;
	size_t n = 0;

	for (size_t i = 0; i < r->nrec; i++)
		ids[i] = r->rec[i].txn;
	qsort(ids, r->nrec, sizeof(*ids), cmp_u32);
	for (size_t i = 0; i < r->nrec; i++)
		if (!n || ids[n - 1] != ids[i])
			ids[n++] = ids[i];
	rows = xcalloc(n, sizeof(*rows));
	for (size_t i = 0; i < n; i++)
		rows[i].txn = ids[i];
	free(ids);
	*nrows = n;
	return rows;
}

/* A launcher that only execs the real program in its own process, with
 * an argv of its own that says nothing (Java's ProcessBuilder starts every
 * command through jspawnhelper, which reads the real argv from a pipe). */
static bool trampoline(const struct jfield *argv)
{
	size_t n = strnlen((const char *)argv->p, argv->n);
	const char *a0 = (const char *)argv->p, *base = memrchr(a0, '/', n);

	base = base ? base + 1 : a0;
	return (size_t)(a0 + n - base) == strlen("jspawnhelper") && !memcmp(base, "jspawnhelper", 12);
}

/* Without a command in its begin record, a row's command is the first
 * program started whose parent started none of the others (past a
 * trampoline: the program that process became next). */
static void row_command(struct txrow *w)
{
	for (unsigned i = 0; !w->argv_from_begin && i < w->nex; i++) {
		bool top = true;
		for (unsigned k = 0; k < w->nex && top; k++)
			top = w->ex[k].pid != w->ex[i].ppid || w->ex[k].pid == w->ex[i].pid;
		if (!top)
			continue;
		w->argv = w->ex[i].argv;
		for (unsigned k = i + 1; k < w->nex && trampoline(w->argv); k++)
			if (w->ex[k].pid == w->ex[i].pid)
				w->argv = w->ex[k].argv;
		return;
	}
}

static void row_add(struct txrow *w, const struct journal *j, const struct jrecord *c)
{
	int32_t st;

	if (!w->records++ || c->time_ns < w->first)
		w->first = c->time_ns;
	if (w->records == 1 || c->time_ns > w->last)
		w->last = c->time_ns;
	if (c->type == J_TXN_BEGIN && c->f[F_ARGV].present && !w->argv_from_begin) {
		w->argv = &c->f[F_ARGV];
		w->argv_from_begin = true;
	} else if (c->type == J_EXEC && c->f[F_ARGV].present) {
		if (!w->argv)
			w->argv = &c->f[F_ARGV];
		if (w->nex < sizeof(w->ex) / sizeof(w->ex[0]) && jrec_u32(c, F_PID, &w->ex[w->nex].pid) &&
		    jrec_u32(c, F_PPID, &w->ex[w->nex].ppid))
			w->ex[w->nex++].argv = &c->f[F_ARGV];
	}
	if (c->type == J_REFUSE)
		w->refused++;
	if (c->type == J_TXN_END && rec_i32(c, F_STATUS, &st)) {
		w->has_status = true;
		w->status = st;
	}
	if (is_change(c->type)) {
		bool undone = undone_by(j, c->seq) != 0;

		w->changes++;
		w->undone += undone;
		if (!(c->flags & JR_WEAK)) {
			w->strong++;
			w->strong_undone += undone;
		}
	}
}

/* A parent directory's times (JR_WEAK) are left alone by a rewind when later
 * work touched the directory again, so they count only when nothing else
 * changed. */
static const char *row_rewound(const struct txrow *w)
{
	size_t all = w->strong ? w->strong : w->changes;
	size_t undone = w->strong ? w->strong_undone : w->undone;

	if (!all)
		return "-";
	if (undone == all)
		return "yes";
	return undone ? "partly" : "no";
}

/* A wait status as a shell reports it: the exit code, or 128 + signal. */
static int exit_code(int32_t st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return st;
}

static void row_json(const struct txrow *w)
{
	struct jo o = { stdout, 0 };

	jo_uint(&o, "txn", w->txn);
	jo_argv(&o, "argv", w->argv);
	jo_time(&o, "first", w->first);
	jo_time(&o, "last", w->last);
	jo_uint(&o, "records", w->records);
	jo_uint(&o, "changes", w->changes);
	jo_uint(&o, "refused", w->refused);
	if (w->has_status)
		jo_int(&o, "status", exit_code(w->status));
	else
		jo_null(&o, "status");
	if (w->has_status && WIFSIGNALED(w->status))
		jo_int(&o, "signal", WTERMSIG(w->status));
	else
		jo_null(&o, "signal");
	jo_str(&o, "rewound", row_rewound(w));
	jo_end(&o);
}

enum { C_TXN, C_FIRST, C_LAST, C_RECORDS, C_CHANGES, C_REFUSED, C_STATUS, C_REWOUND, C_COMMAND, NCOLS };

static const char *const col_names[NCOLS] = {
	"TXN", "FIRST", "LAST", "RECORDS", "CHANGES", "REFUSED", "STATUS", "REWOUND", "COMMAND"
};

/* A table cell: a formatted, malloc'd string (NULL when out of memory). */
__attribute__((format(printf, 1, 2)))
static char *cellf(const char *fmt, ...)
{
	char *s;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

static void row_cells(const struct txrow *w, char **cell)
{
	char buf[64];
	size_t n;
	FILE *f;

	cell[C_TXN] = cellf("%" PRIu32, w->txn);
	cell[C_FIRST] = cellf("%s", fmt_time(buf, sizeof(buf), w->first, T_TABLE));
	cell[C_LAST] = cellf("%s", fmt_time(buf, sizeof(buf), w->last, T_TABLE));
	cell[C_RECORDS] = cellf("%zu", w->records);
	cell[C_CHANGES] = cellf("%zu", w->changes);
	cell[C_REFUSED] = cellf("%zu", w->refused);
	if (!w->has_status)
		cell[C_STATUS] = cellf("-");
	else if (WIFSIGNALED(w->status))
		cell[C_STATUS] = cellf("sig %d", WTERMSIG(w->status));
	else
		cell[C_STATUS] = cellf("%d", exit_code(w->status));
	cell[C_REWOUND] = cellf("%s", row_rewound(w));
	f = open_memstream(&cell[C_COMMAND], &n);
	if (f) {
		if (w->argv)
			put_argv_text(f, w->argv);
		else
			fputc('-', f);
		fclose(f);
	}
}

static void print_table(char **cells, size_t nrows)
{
	size_t width[NCOLS] = { 0 };

	for (size_t i = 0; i < (nrows + 1) * NCOLS; i++)
		if (cells[i] && strlen(cells[i]) > width[i % NCOLS])
			width[i % NCOLS] = strlen(cells[i]);
	for (size_t i = 0; i < (nrows + 1) * NCOLS; i++) {
		const char *s = cells[i] ? cells[i] : "?";
		int k = i % NCOLS;

		if (k == NCOLS - 1)
			printf("%s\n", s);
		else
			printf("%-*s  ", (int)width[k], s);
	}
}

static void list_text(const struct txrow *rows, size_t nrows)
{
	char **cells = xcalloc((nrows + 1) * NCOLS, sizeof(*cells));

	for (int k = 0; k < NCOLS; k++)
		cells[k] = cellf("%s", col_names[k]);
	for (size_t i = 0; i < nrows; i++)
		row_cells(&rows[i], cells + (i + 1) * NCOLS);
	print_table(cells, nrows);
	for (size_t i = 0; i < (nrows + 1) * NCOLS; i++)
		free(cells[i]);
	free(cells);
}

static int cmd_list(const struct args *a)
{
	struct journal j;
	struct txrow *rows;
	size_t nrows;

	if (journal_open(&j, a->journal))
		return EXIT_FAILED;
	warn_damage(&j, a->journal);
	rows = make_rows(&j.r, &nrows);
	for (size_t i = 0; i < j.r.nrec; i++) {
		const struct jrecord *c = &j.r.rec[i];
		struct txrow key = { .txn = c->txn };    /* cmp_u32 reads txn, the first member */

		row_add(bsearch(&key, rows, nrows, sizeof(key), cmp_u32), &j, c);
	}
	for (size_t i = 0; i < nrows; i++)
		row_command(&rows[i]);
	if (a->set & O(OPT_JSON))
		for (size_t i = 0; i < nrows; i++)
			row_json(&rows[i]);
	else
		list_text(rows, nrows);
	free(rows);
	journal_close(&j);
	return 0;
}

/* ---- log ------------------------------------------------------------ */

static void put_field_text(FILE *f, const struct jrecord *c, enum jtag t)
{
	put_escaped(f, c->f[t].p, c->f[t].n, false, 0);
}

/* A J_CONTENT of a part of its file (JR_RANGE): where the part starts
 * and how many bytes it saved. */
static bool range_of(const struct jrecord *c, uint64_t *from, uint64_t *len)
{
	const struct jfield *f = c->f[F_DATA].present ? &c->f[F_DATA] : &c->f[F_OBJECT];
	struct jdata d;

	if (!(c->flags & JR_RANGE) || !jrec_u64(c, F_OFFSET, from) || !f->present || f->n < sizeof(d))
		return false;
	memcpy(&d, f->p, sizeof(d));
	*len = d.size;
	return true;
}

/* The middle of a log line: what the record is about. */
static void log_detail(const struct jrecord *c)
{
	uint64_t ref, from, len;

	switch (c->type) {
	case J_SESSION: case J_SEGMENT: case J_TXN_BEGIN: case J_EXEC:
		if (c->f[F_ARGV].present)
			put_argv_text(stdout, &c->f[F_ARGV]);
		else if (c->f[F_PATH].present)
			put_field_text(stdout, c, F_PATH);
		return;
	case J_REWOUND:
	case J_UNDOING:
		if (jrec_u64(c, F_SEQREF, &ref))
			printf("seq %" PRIu64, ref);
		return;
	case J_REFUSE:
		if (c->f[F_OP].present) {
			put_field_text(stdout, c, F_OP);
			fputc(' ', stdout);
		}
		break;
	}
	if (c->f[F_PATH].present)
		put_field_text(stdout, c, F_PATH);
	if (c->f[F_PATH2].present) {
		fputs(" -> ", stdout);
		put_field_text(stdout, c, F_PATH2);
	}
	if (c->type == J_CONTENT && range_of(c, &from, &len))
		printf(" (bytes %" PRIu64 "..%" PRIu64 ")", from, from + len);
}

static void describe_status(char *buf, size_t n, int32_t st)
{
	if (WIFEXITED(st))
		snprintf(buf, n, "exit %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, n, "killed by signal %d%s", WTERMSIG(st), WCOREDUMP(st) ? " (core dumped)" : "");
	else
		snprintf(buf, n, "wait status %#x", (unsigned)st);
}

/* The end of a log line: how it went, if the record says. */
static void log_outcome(const struct journal *j, const struct jrecord *c)
{
	char buf[96];
	int32_t st;

	if (is_change(c->type)) {
		fputs(undone_by(j, c->seq) ? "  ok, rewound" : "  ok", stdout);
	} else if (c->type == J_REFUSE) {
		fputs("  DENIED ", stdout);
		if (c->f[F_RULE].present)
			put_field_text(stdout, c, F_RULE);
	} else if (c->type == J_TXN_END && rec_i32(c, F_STATUS, &st)) {
		describe_status(buf, sizeof(buf), st);
		printf("  %s", buf);
	}
}

static void log_text(const struct journal *j, const struct jrecord *c)
{
	char t[64];

	printf("%5" PRIu64 " %s pid %" PRIu32 " txn %" PRIu32 " %-7s ", c->seq,
	       fmt_time(t, sizeof(t), c->time_ns, T_CLOCK), rec_pid(c, F_PID), c->txn, jtype_name(c->type));
	log_detail(c);
	log_outcome(j, c);
	fputc('\n', stdout);
}

static void log_json(const struct journal *j, const struct jrecord *c)
{
	struct jo o = { stdout, 0 };
	struct jstat st;
	uint64_t ref, from, len;
	bool has_st = jrec_stat(c, F_STAT, &st);

	jo_uint(&o, "seq", c->seq);
	jo_time(&o, "time", c->time_ns);
	jo_int(&o, "time_ns", c->time_ns);
	jo_uint(&o, "pid", rec_pid(c, F_PID));
	jo_uint(&o, "ppid", rec_pid(c, F_PPID));
	jo_uint(&o, "txn", c->txn);
	jo_str(&o, "op", jtype_name(c->type));
	jo_field(&o, "path", c, F_PATH);
	jo_field(&o, "path2", c, F_PATH2);
	jo_argv(&o, "argv", &c->f[F_ARGV]);
	jo_field(&o, "cwd", c, F_CWD);
	jo_str(&o, "result", c->type == J_REFUSE ? "denied" : "ok");
	jo_field(&o, "call", c, F_OP);
	jo_field(&o, "rule", c, F_RULE);
	jo_i32(&o, "errno", c, F_ERRNO);
	jo_i32(&o, "status", c, F_STATUS);
	if (jrec_u64(c, F_SEQREF, &ref))
		jo_uint(&o, "seqref", ref);
	else
		jo_null(&o, "seqref");
	jo_bool(&o, "rewound", is_change(c->type) && undone_by(j, c->seq));
	if (has_st) {
		jo_uint(&o, "mode", st.mode);
		jo_uint(&o, "size", st.size);
		jo_int(&o, "mtime_ns", st.mtime_ns);
	} else {
		jo_null(&o, "mode");
		jo_null(&o, "size");
		jo_null(&o, "mtime_ns");
	}
	jo_field(&o, "target", c, F_TARGET);
	if (range_of(c, &from, &len)) {
		jo_uint(&o, "range_offset", from);
		jo_uint(&o, "range_bytes", len);
	} else {
		jo_null(&o, "range_offset");
		jo_null(&o, "range_bytes");
	}
	jo_bool(&o, "weak", c->flags & JR_WEAK);
	jo_str(&o, "segment", c->segment ? c->segment : "");
	jo_uint(&o, "offset", c->offset);
	jo_end(&o);
}

static int cmd_log(const struct args *a)
{
	struct journal j;
	const struct jrecord *ses;
	bool json = a->set & O(OPT_JSON), all = !(a->set & O(OPT_TXN));
	void (*put)(const struct journal *, const struct jrecord *) = json ? log_json : log_text;

	if (journal_open(&j, a->journal))
		return EXIT_FAILED;
	warn_damage(&j, a->journal);
	ses = &j.r.session;
	for (size_t i = 0; i <= j.r.nrec; i++) {
		const struct jrecord *c = i < j.r.nrec ? &j.r.rec[i] : NULL;

		/* the session record, in its place by seq */
		if (ses && (!c || ses->seq <= c->seq)) {
			if (all || ses->txn == a->num[OPT_TXN])
				put(&j, ses);
			ses = NULL;
		}
		if (c && (all || c->txn == a->num[OPT_TXN]))
			put(&j, c);
	}
	journal_close(&j);
	return 0;
}

/* ---- show ----------------------------------------------------------- */

typedef void (*show_fn)(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t);

static void show_bytes(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	(void)r;
	printf("%s: ", key);
	put_field_text(stdout, c, t);
	fputc('\n', stdout);
}

static void show_argv(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	(void)r;
	printf("%s: ", key);
	put_argv_text(stdout, &c->f[t]);
	fputc('\n', stdout);
}

static void show_u32(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	uint32_t v = 0;

	(void)r;
	jrec_u32(c, t, &v);
	printf(t == F_FLAGS ? "%s: %#" PRIx32 "\n" : "%s: %" PRIu32 "\n", key, v);
}

static void show_u64(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	uint64_t v = 0;

	(void)r;
	jrec_u64(c, t, &v);
	printf("%s: %" PRIu64 "\n", key, v);
}

static void show_status(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	char buf[96];
	int32_t v = 0;

	(void)r;
	rec_i32(c, t, &v);
	describe_status(buf, sizeof(buf), v);
	printf("%s: %" PRId32 " (%s)\n", key, v, buf);
}

static void show_errno(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	const char *name;
	int32_t v = 0;

	(void)r;
	rec_i32(c, t, &v);
	name = strerrorname_np(v);
	printf("%s: %" PRId32 " (%s: %s)\n", key, v, name ? name : "?", strerror(v));
}

static const char *file_type(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symbolic link";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "character device";
	case S_IFBLK: return "block device";
	}
	return "unknown type";
}

static void show_stat(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	char a[64], m[64], ch[64];
	struct jstat s;

	(void)r;
	(void)key;
	jrec_stat(c, t, &s);
	printf("mode: %#" PRIo32 " (%s)\nuid: %" PRIu32 "\ngid: %" PRIu32 "\nsize: %" PRIu64 "\n"
	       "nlink: %" PRIu32 "\nblocks: %" PRIu64 "\ndev: %#" PRIx64 "\nino: %" PRIu64 "\nrdev: %#" PRIx64 "\n"
	       "atime: %s\nmtime: %s\nctime: %s\n",
	       s.mode, file_type(s.mode), s.uid, s.gid, s.size, s.nlink, s.blocks, s.dev, s.ino, s.rdev,
	       fmt_time(a, sizeof(a), s.atime_ns, T_ISO), fmt_time(m, sizeof(m), s.mtime_ns, T_ISO),
	       fmt_time(ch, sizeof(ch), s.ctime_ns, T_ISO));
}

static void show_jdata(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	static const char *const methods[] = { [JD_STORED] = "stored", [JD_ZLIB] = "zlib", [JD_GZIP] = "gzip" };
	char name[JOBJ_PATH_MAX];
	struct jdata d;

	memcpy(&d, c->f[t].p, sizeof(d));
	printf("%s: ", key);
	if (t == F_OBJECT) {
		jreader_object(r, c->seq, "gz", name);
		printf("%s, ", name);
	} else {
		printf("inline, %" PRIu32 " bytes stored, ", c->f[t].n - (uint32_t)sizeof(d));
	}
	if (d.method < sizeof(methods) / sizeof(methods[0]))
		printf("%s", methods[d.method]);
	else
		printf("method %" PRIu32, d.method);
	printf(", %" PRIu64 " bytes, blake2b ", d.size);
	for (size_t i = 0; i < sizeof(d.hash); i++)
		printf("%02x", d.hash[i]);
	fputc('\n', stdout);
}

static void show_inode(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	char name[JOBJ_PATH_MAX];
	uint64_t v[2];

	memcpy(v, c->f[t].p, sizeof(v));
	jreader_object(r, c->seq, "ino", name);
	printf("%s: %s (dev %#" PRIx64 ", ino %" PRIu64 ")\n", key, name, v[0], v[1]);
}

/* F_XATTRS: { u16 namelen, u32 vallen, name, value } repeated; names only. */
static void show_xattrs(const struct jreader *r, const char *key, const struct jrecord *c, enum jtag t)
{
	const struct jfield *f = &c->f[t];
	size_t off = 0;
	int n = 0;

	(void)r;
	printf("%s:", key);
	while (f->n - off >= 6) {
		uint16_t nl;
		uint32_t vl;

		memcpy(&nl, f->p + off, 2);
		memcpy(&vl, f->p + off + 2, 4);
		off += 6;
		if (nl > f->n - off || vl > f->n - off - nl)
			break;
		printf("%s", n++ ? ", " : " ");
		put_escaped(stdout, f->p + off, nl, false, 0);
		printf(" (%" PRIu32 " bytes)", vl);
		off += (size_t)nl + vl;
	}
	if (off != f->n)
		printf("%s<malformed at byte %zu>", n ? ", " : " ", off);
	fputc('\n', stdout);
}

/* Every field tag: its name, its exact size (0: any), how show prints it. */
static const struct tagdesc {
	const char *name;
	uint32_t size;
	show_fn show;
} tags[F_TAG_MAX + 1] = {
	[F_PATH]   = { "path", 0, show_bytes },
	[F_PATH2]  = { "path2", 0, show_bytes },
	[F_ARGV]   = { "argv", 0, show_argv },
	[F_CWD]    = { "cwd", 0, show_bytes },
	[F_PID]    = { "pid", 4, show_u32 },
	[F_PPID]   = { "ppid", 4, show_u32 },
	[F_UID]    = { "uid", 4, show_u32 },
	[F_STAT]   = { "stat", sizeof(struct jstat), show_stat },
	[F_DATA]   = { "content", 0, show_jdata },
	[F_OBJECT] = { "object", sizeof(struct jdata), show_jdata },
	[F_INODE]  = { "inode", 16, show_inode },
	[F_TARGET] = { "target", 0, show_bytes },
	[F_XATTRS] = { "xattrs", 0, show_xattrs },
	[F_FLAGS]  = { "flags", 4, show_u32 },
	[F_STATUS] = { "status", 4, show_status },
	[F_OP]     = { "op", 0, show_bytes },
	[F_RULE]   = { "rule", 0, show_bytes },
	[F_ERRNO]  = { "errno", 4, show_errno },
	[F_SEQREF] = { "seqref", 8, show_u64 },
	[F_HOST]   = { "host", 0, show_bytes },
	[F_POLICY] = { "policy", 0, show_bytes },
	[F_OFFSET] = { "offset", 8, show_u64 },
};

/* A present field of the size its tag has (F_DATA: at least its header). */
static bool field_ok(const struct jrecord *c, enum jtag t)
{
	const struct jfield *f = &c->f[t];

	if (!f->present || !tags[t].name)
		return false;
	if (t == F_DATA)
		return f->n >= sizeof(struct jdata);
	return !tags[t].size || f->n == tags[t].size;
}

static void show_header(const struct jrecord *c)
{
	char t[64];

	printf("type: %s (%u)\nseq: %" PRIu64 "\ntime: %s\ntime_ns: %" PRId64 "\ntxn: %" PRIu32 "\n",
	       jtype_name(c->type), c->type, c->seq, fmt_time(t, sizeof(t), c->time_ns, T_ISO), c->time_ns,
	       c->txn);
	printf("pid: %" PRIu32 "\nppid: %" PRIu32 "\n", rec_pid(c, F_PID), rec_pid(c, F_PPID));
	printf("segment: %s\noffset: %" PRIu64 "\n", c->segment ? c->segment : "?", c->offset);
	if (c->flags)
		printf("record flags: %#x%s%s%s\n", c->flags, c->flags & JR_WEAK ? " (weak)" : "",
		       c->flags & JR_INODE_XATTRS ? " (xattrs kept with the inode)" : "",
		       c->flags & JR_RANGE ? " (a part of the file, from offset)" : "");
}

static void show_record(const struct journal *j, const struct jrecord *c)
{
	uint64_t by = undone_by(j, c->seq);

	show_header(c);
	for (int t = 1; t <= F_TAG_MAX; t++) {
		if ((t == F_PID || t == F_PPID) && field_ok(c, t))
			continue;       /* in the header */
		if (field_ok(c, t))
			tags[t].show(&j->r, tags[t].name, c, t);
		else if (c->f[t].present)
			printf("%s: <malformed, %" PRIu32 " bytes>\n", tags[t].name ? tags[t].name : "?",
			       c->f[t].n);
	}
	if (by && is_change(c->type))
		printf("rewound: yes (seq %" PRIu64 ")\n", by);
	else
		printf("rewound: no\n");
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The bytes of a removed file kept as objects/D/SEQ.ino (F_INODE), to OUT:
 * there is no hash to check, but it must still be the inode recorded. */
static int copy_inode(const struct journal *j, const struct jrecord *c, int out)
{
	static uint8_t buf[1 << 16];
	char name[JOBJ_PATH_MAX];
	uint64_t want[2];
	struct stat st;
	ssize_t n;
	int fd, e = 0;

	memcpy(want, c->f[F_INODE].p, sizeof(want));
	jreader_object(&j->r, c->seq, "ino", name);
	fd = openat(j->r.dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return error("cannot open '%s': %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != want[0] || st.st_ino != want[1]) {
		close(fd);
		return error("seq %" PRIu64 ": '%s' is not the inode the record kept", c->seq, name);
	}
	while (!e && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno != EINTR)
			e = error("cannot read '%s': %s", name, strerror(errno));
		else if (n > 0 && write_all(out, buf, (size_t)n) < 0)
			e = error("cannot write the content: %s", strerror(errno));
	}
	close(fd);
	return e;
}

/* Write the pre-image bytes of C to fd 1: saved content, or a kept inode. */
static int show_content(const struct journal *j, const struct jrecord *c)
{
	char err[512] = "";

	if (has_content(c))
		return jrec_content(&j->r, c, STDOUT_FILENO, err, sizeof(err)) ? error("%s", err) : 0;
	if (field_ok(c, F_INODE))
		return copy_inode(j, c, STDOUT_FILENO);
	return error("seq %" PRIu64 " (%s) has no saved content", c->seq, jtype_name(c->type));
}

static const struct jrecord *find_record(const struct journal *j, uint64_t seq)
{
	if (j->r.session.type == J_SESSION && j->r.session.seq == seq)
		return &j->r.session;
	return jreader_find(&j->r, seq);
}

static int cmd_show(const struct args *a)
{
	const struct jrecord *c;
	struct journal j;
	uint64_t seq;
	int rc = 0;

	if (!parse_num(a->seq, UINT64_MAX, &seq))
		return usage_error(a->cmd, "'%s' is not a valid seq", a->seq);
	if (journal_open(&j, a->journal))
		return EXIT_FAILED;
	warn_damage(&j, a->journal);
	c = find_record(&j, seq);
	if (!c)
		rc = error("no record with seq %" PRIu64 " in '%s'", seq, a->journal);
	else if (!(a->set & O(OPT_CONTENT)))
		show_record(&j, c);
	else
		rc = show_content(&j, c);
	journal_close(&j);
	return rc;
}

/* ---- verify --------------------------------------------------------- */

/* Fields an undo cannot do without, per record type. */
static const uint32_t needed[J_TYPE_MAX + 1] = {
	[J_CREATE]  = 1u << F_PATH,
	[J_CONTENT] = 1u << F_PATH | 1u << F_STAT,
	[J_APPEND]  = 1u << F_PATH | 1u << F_STAT,
	[J_REMOVE]  = 1u << F_PATH | 1u << F_STAT,
	[J_RENAME]  = 1u << F_PATH | 1u << F_PATH2 | 1u << F_STAT,
	[J_META]    = 1u << F_PATH | 1u << F_STAT,
	[J_REWOUND] = 1u << F_SEQREF,
	[J_UNDOING] = 1u << F_SEQREF,
};

struct vstate {
	const struct journal *j;
	int devnull;
	size_t problems, checked;
};

__attribute__((format(printf, 3, 4)))
static void problem(struct vstate *v, const struct jrecord *c, const char *fmt, ...)
{
	va_list ap;

	printf("%s: offset %" PRIu64 ": seq %" PRIu64 ": ", c->segment ? c->segment : "?", c->offset, c->seq);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	v->problems++;
}

static void verify_fields(struct vstate *v, const struct jrecord *c)
{
	uint32_t need = c->type <= J_TYPE_MAX ? needed[c->type] : 0;

	for (int t = 1; t <= F_TAG_MAX; t++) {
		if (c->f[t].present && !field_ok(c, t))
			problem(v, c, "malformed %s field (%" PRIu32 " bytes)", tags[t].name, c->f[t].n);
		else if ((need & 1u << t) && !c->f[t].present)
			problem(v, c, "%s record without its %s field", jtype_name(c->type), tags[t].name);
	}
	if (c->type == J_CONTENT && !has_content(c))
		problem(v, c, "content record without saved content");
	if ((c->flags & JR_RANGE) && (c->type != J_CONTENT || !c->f[F_OFFSET].present))
		problem(v, c, "a part of a file (range) without its offset, or not a content record");
	if ((c->flags & JR_INODE_XATTRS) && (c->type != J_REMOVE || !c->f[F_INODE].present))
		problem(v, c, "xattrs said to be kept with an inode that the record does not keep");
}

static void verify_content(struct vstate *v, const struct jrecord *c)
{
	char err[512] = "", own[40];
	size_t l = (size_t)snprintf(own, sizeof(own), "seq %" PRIu64 ": ", c->seq);

	if (!is_change(c->type) || !has_content(c))
		return;
	v->checked++;
	if (jrec_content(&v->j->r, c, v->devnull, err, sizeof(err)))
		problem(v, c, "%s", strncmp(err, own, l) ? err : err + l);  /* say the seq once */
}

/* Whether the file C removed is still at its path, that very inode: a
 * process stopped between the record and the rename that removes the file
 * into objects/ (capture.c: move_file) left no object, and no removal
 * either; its undo finds the file in place (undo.c). */
static bool never_removed(const struct jrecord *c, const uint64_t want[2])
{
	char *path = jrec_strdup(c, F_PATH);
	struct stat st;
	bool there = path && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == want[0] &&
		     (uint64_t)st.st_ino == want[1];

	free(path);
	return there;
}

/* A removed file kept as objects/D/SEQ.ino must still be that inode. */
static void verify_inode(struct vstate *v, const struct jrecord *c)
{
	char name[JOBJ_PATH_MAX];
	uint64_t want[2];
	struct stat st;

	if (c->type != J_REMOVE || !field_ok(c, F_INODE) || undone_by(v->j, c->seq))
		return;
	v->checked++;
	memcpy(want, c->f[F_INODE].p, sizeof(want));
	jreader_object(&v->j->r, c->seq, "ino", name);
	if (fstatat(v->j->r.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT || !never_removed(c, want))
			problem(v, c, "%s: %s", name, strerror(errno));
	}
	else if (st.st_dev != want[0] || st.st_ino != want[1])
		problem(v, c, "%s is inode %#jx:%ju, the record kept %#" PRIx64 ":%" PRIu64, name,
			(uintmax_t)st.st_dev, (uintmax_t)st.st_ino, want[0], want[1]);
}

static void verify_mark(struct vstate *v, const struct jrecord *c)
{
	const struct jrecord *t;
	uint64_t ref;

	if (c->type != J_REWOUND || !jrec_u64(c, F_SEQREF, &ref))
		return;
	t = jreader_find(&v->j->r, ref);
	if (!t)
		problem(v, c, "marks seq %" PRIu64 " as rewound, but there is no such record", ref);
	else if (!is_change(t->type))
		problem(v, c, "marks seq %" PRIu64 " (%s) as rewound, which is no change", ref,
			jtype_name(t->type));
}

static int cmd_verify(const struct args *a)
{
	struct journal j;
	struct vstate v = { .j = &j };
	const struct jreader *r = &j.r;
	int rc;

	if (journal_open(&j, a->journal))
		return EXIT_FAILED;
	v.devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (v.devnull < 0) {
		journal_close(&j);
		return error("cannot open '/dev/null': %s", strerror(errno));
	}
	for (size_t i = 0; i < r->ndmg; i++)
		printf("%s: offset %" PRIu64 ": %s\n", r->dmg[i].file, r->dmg[i].offset, r->dmg[i].what);
	for (size_t i = 0; i < r->nrec; i++) {
		verify_fields(&v, &r->rec[i]);
		verify_content(&v, &r->rec[i]);
		verify_inode(&v, &r->rec[i]);
		verify_mark(&v, &r->rec[i]);
	}
	close(v.devnull);
	if (a->set & O(OPT_HEADS))
		for (size_t i = 0; i < r->nheads; i++)
			printf("head: %s\n", r->heads[i]);
	if (!r->ndmg && !v.problems)
		printf("ok: %zu records in %zu segments, %zu pre-images checked\n", r->nrec, r->nheads, v.checked);
	else
		printf("damaged: %zu problems in the journal files, %zu in records and pre-images "
		       "(%zu records in %zu segments, %zu pre-images checked)\n",
		       r->ndmg, v.problems, r->nrec, r->nheads, v.checked);
	rc = r->ndmg || v.problems ? EXIT_FAILED : 0;
	journal_close(&j);
	return rc;
}

/* ---- rewind --------------------------------------------------------- */

static void say(void *ctx, int level, const char *msg)
{
	(void)ctx;
	if (level <= 0)
		printf("%s\n", msg);
	else if (level == 1)
		warning("%s", msg);
	else
		error("%s", msg);
}

static int cmd_rewind(const struct args *a)
{
	static const struct { enum opt o; unsigned flag; } flags[] = {
		{ OPT_DRY_RUN, JW_DRY_RUN }, { OPT_FORCE, JW_FORCE }, { OPT_CASCADE, JW_CASCADE },
	};
	struct jrewind_opts o = { .say = say };
	struct jrewind_stats st = { 0 };
	struct journal j;
	bool known;
	int e;

	if ((a->set & O(OPT_TXN)) && (a->set & O(OPT_TO)))
		return usage_error(a->cmd, "--txn and --to cannot be used together");
	if ((a->set & O(OPT_TXN)) && !a->num[OPT_TXN])
		return usage_error(a->cmd, "--txn needs a transaction id above 0");
	/* Read it first: an unreadable journal and a mistyped txn are told
	 * here as everywhere else. */
	if (journal_open(&j, a->journal))
		return EXIT_FAILED;
	known = !(a->set & O(OPT_TXN)) || has_txn(&j.r, (uint32_t)a->num[OPT_TXN]);
	journal_close(&j);
	if (!known)
		return error("no transaction %" PRIu64 " in '%s'", a->num[OPT_TXN], a->journal);
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (a->set & O(flags[i].o))
			o.flags |= flags[i].flag;
	o.txn = (uint32_t)a->num[OPT_TXN];
	o.to_seq = a->num[OPT_TO];
	e = jrewind(a->journal, &o, &st);
	if (e < 0)
		error("cannot rewind '%s': %s", a->journal, strerror(-e));
	printf("rewound: %zu undone, %zu already, %zu skipped, %zu drift, %zu failed\n",
	       st.undone, st.already, st.skipped, st.drift, st.failed);
	return e ? EXIT_FAILED : 0;
}

/* ---- main ----------------------------------------------------------- */

static int run(int argc, char **argv)
{
	const struct cmd *c;
	struct args a = { 0 };
	int rc;

	if (argc < 2)
		return usage_error(NULL, "no command given");
	if (is_help(argv[1])) {
		print_usage(stdout, NULL);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		puts("txreplay (ftsbx) " TXREPLAY_VERSION);
		return 0;
	}
	if (argv[1][0] == '-')
		return usage_error(NULL, "unknown option '%s'", argv[1]);
	c = bsearch(argv[1], commands, NCOMMANDS, sizeof(commands[0]), cmp_cmd);
	if (!c)
		return usage_error(NULL, "'%s' is not a txreplay command", argv[1]);
	a.cmd = c;
	rc = parse_args(c, argc - 2, argv + 2, &a);
	if (rc < 0) {
		print_usage(stdout, c);
		return 0;
	}
	return rc ? rc : c->fn(&a);
}

int main(int argc, char **argv)
{
	int rc = run(argc, argv);

	if (fflush(stdout) || ferror(stdout))
		return error("cannot write the output: %s", strerror(errno));
	return rc;
}
