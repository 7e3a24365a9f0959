/*
 * load.c - parse an INI policy with inih and compile it into the flat block
 * of internal.h. Runs once per session, in the first process's constructor,
 * so it may allocate; nothing here runs on a decision's path.
 *
 * inih reads through our own line reader: it counts lines (this inih has no
 * line numbers in its handler), refuses over-long lines and NUL bytes, and
 * checks section headers, which inih never reports when a section has no
 * keys. The first error stops the parse and is reported as FILE:LINE: WHAT.
 *
 * The block is laid out in parts (internal.h), each its strings and then
 * its arrays. A string added gets a provisional offset, its part in the top
 * bits (part_tag); finish() lays the parts out and puts every reference to a
 * string where it landed.
 */
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "internal.h"
#include "default_ini.h"        /* generated from policies/default.ini */
#include "default_tab.h"        /* its lines, parsed (tools/ini_table.c) */

#define MAX_LINE POL_MAX_LINE

struct vec {
	char *p;
	size_t len, cap;        /* bytes */
};

struct build {
	const char *file;
	int line, err_line;
	char err[512];
	struct pol_hdr h;
	struct vec str[POL_PARTS], tab[PT_COUNT];
	struct vec fetchers, interpreters, carriers;    /* "a|b|c" being built */
	char workspace[PATH_MAX];
	char file_buf[PATH_MAX];        /* the file an error is in, if a base */
	int nesting;
	bool have_writable;
	struct dirlist dirs;            /* the listings add_path looked at */
};

static int vec_add(struct vec *v, const void *p, size_t n)
{
	if (v->len + n > v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		while (cap < v->len + n)
			cap *= 2;
		char *q = realloc(v->p, cap);
		if (!q)
			return -ENOMEM;
		v->p = q;
		v->cap = cap;
	}
	memcpy(v->p + v->len, p, n);
	v->len += n;
	return 0;
}

/* Room for N more bytes in V, made once: a compile that grows its
 * vectors by doubling copies each (and touches twice the pages). */
static void vec_reserve(struct vec *v, size_t n)
{
	char *q = v->cap ? NULL : malloc(n);

	if (q) {
		v->p = q;
		v->cap = n;
	}
}

__attribute__((format(printf, 2, 3)))
static int fail(struct build *b, const char *fmt, ...)
{
	va_list ap;

	if (b->err_line >= 0)           /* the first error wins */
		return 0;
	b->err_line = b->line;
	va_start(ap, fmt);
	vsnprintf(b->err, sizeof(b->err), fmt, ap);
	va_end(ap);
	return 0;                       /* inih: stop */
}

/* A string's provisional offset: the part in the top bits, and one more
 * than its place in the part's strings (0 stays "none"). */
#define PART_SHIFT 28
#define PART_MAX   (1u << PART_SHIFT)

/* Add a string to PART; its provisional offset (0 only on failure). */
static uint32_t add_str(struct build *b, int part, const char *s, size_t n)
{
	struct vec *v = &b->str[part];
	uint32_t off = (uint32_t)part << PART_SHIFT | (uint32_t)(v->len + 1);

	if (v->len + n + 1 >= PART_MAX - 8)
		return fail(b, "policy too large");
	if (vec_add(v, s, n) || vec_add(v, "", 1))
		return fail(b, "out of memory");
	return off;
}

static uint32_t add_cstr(struct build *b, int part, const char *s)
{
	return add_str(b, part, s, strlen(s));
}

/* The string at provisional offset OFF, while building. */
static const char *bstr(const struct build *b, uint32_t off)
{
	return b->str[off >> PART_SHIFT].p + (off & (PART_MAX - 1)) - 1;
}

/* S appended to T (of N bytes) at AT, cut where T ends as snprintf would:
 * the new end. (snprintf's format machinery was a fifth of a compile.) */
static size_t cat(char *t, size_t n, size_t at, const char *s)
{
	size_t k = strlen(s);

	if (at + 1 >= n)
		return at;
	if (k > n - 1 - at)
		k = n - 1 - at;
	memcpy(t + at, s, k);
	t[at + k] = 0;
	return at + k;
}

#define COPY(t, s) cat(t, sizeof(t), 0, s)

/* "[section] key = value": what a refusal names. */
static uint32_t add_rule(struct build *b, const char *section, const char *key, const char *value)
{
	char t[MAX_LINE + 64];
	size_t n = cat(t, sizeof(t), 0, "[");

	n = cat(t, sizeof(t), n, section);
	n = cat(t, sizeof(t), n, "] ");
	n = cat(t, sizeof(t), n, key);
	n = cat(t, sizeof(t), n, " = ");
	cat(t, sizeof(t), n, value);
	return add_cstr(b, P_TEXT, t);
}

static int add_entry(struct build *b, int table, const void *e, size_t n)
{
	return vec_add(&b->tab[table], e, n) ? fail(b, "out of memory") : 1;
}

/* --- ~ and $VAR ------------------------------------------------------------ */

static const char *lookup(struct build *b, const char *name, size_t n)
{
	char var[128];

	if (n == 9 && !memcmp(name, "WORKSPACE", 9))
		return b->workspace;
	if (n >= sizeof(var))
		return NULL;
	memcpy(var, name, n);
	var[n] = 0;
	const char *v = getenv(var);
	return v && *v ? v : NULL;
}

static int put(char *out, size_t *o, const char *s, size_t n)
{
	if (*o + n >= PATH_MAX)
		return -1;
	memcpy(out + *o, s, n);
	*o += n;
	return 0;
}

/* ${NAME}, ${NAME:-DEFAULT} or $NAME at *S; appends the value. */
static int expand_var(struct build *b, const char **s, char *out, size_t *o)
{
	const char *p = *s + 1, *name = p, *dflt = NULL;
	size_t n, dn = 0;

	if (*p == '{') {
		const char *end = strchr(p, '}');
		if (!end)
			return fail(b, "unterminated ${ in '%s'", *s), -1;
		name = p + 1;
		const char *colon = strstr(name, ":-");
		n = (size_t)(end - name);
		if (colon && colon < end) {
			n = (size_t)(colon - name);
			dflt = colon + 2;
			dn = (size_t)(end - dflt);
		}
		*s = end + 1;
	} else {
		while (*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))
			p++;
		n = (size_t)(p - name);
		*s = p;
	}
	if (!n)
		return fail(b, "bad variable reference"), -1;
	const char *v = lookup(b, name, n);
	if (!v && !dflt)
		return fail(b, "$%.*s is not set (write ${%.*s:-DEFAULT})", (int)n, name, (int)n, name), -1;
	if (v ? put(out, o, v, strlen(v)) : put(out, o, dflt, dn))
		return fail(b, "value too long"), -1;
	return 0;
}

static int expand(struct build *b, const char *in, char out[PATH_MAX])
{
	size_t o = 0;
	const char *s = in;

	if (s[0] == '~' && (s[1] == '/' || s[1] == 0)) {
		const char *home = getenv("HOME");
		if (!home || !*home)
			return fail(b, "~ used but HOME is not set"), -1;
		if (put(out, &o, home, strlen(home)))
			return fail(b, "value too long"), -1;
		s++;
	}
	while (*s) {
		if (*s == '$') {
			if (expand_var(b, &s, out, &o))
				return -1;
		} else if (put(out, &o, s++, 1)) {
			return fail(b, "value too long"), -1;
		}
	}
	out[o] = 0;
	return 0;
}

/* Collapse "//", "/./" and "dir/.." and drop a trailing '/', in place. */
void pol_normalise(char *p)
{
	char *w = p;
	const char *r = p;
	bool abs = *p == '/';

	if (abs)
		*w++ = *r++;
	while (*r) {
		const char *e = strchrnul(r, '/');
		size_t n = (size_t)(e - r);
		if (n == 0 || (n == 1 && r[0] == '.')) {
			/* skip */
		} else if (n == 2 && r[0] == '.' && r[1] == '.' && w > p + abs) {
			while (w > p + abs && w[-1] != '/')
				w--;
			if (w > p + abs)
				w--;
		} else {
			if (w > p + abs)
				*w++ = '/';
			memmove(w, r, n);
			w += n;
		}
		r = *e ? e + 1 : e;
	}
	if (w == p && !abs)
		*w++ = '.';
	*w = 0;
}

/* --- the sections ---------------------------------------------------------- */

static int bad_pattern(struct build *b, const char *v)
{
	int depth = 0;

	/* from one '[', ']' or '|' to the next (strpbrk: 16 bytes at a time) */
	for (const char *p = v; (p = strpbrk(p, "[]|")); p++) {
		if (*p == '[')
			depth++;
		else if (*p == ']' && depth)
			depth--;
		if (*p == '|' && p[1] == '|')
			return fail(b, "bad pattern '%s': empty alternative", v), -1;
	}
	if (depth)
		return fail(b, "bad pattern '%s': unclosed [", v), -1;
	if (*v == '|' || (*v && v[strlen(v) - 1] == '|'))
		return fail(b, "bad pattern '%s': empty alternative", v), -1;
	return 0;
}

static int add_prefix(struct build *b, int kind, const char *path, uint32_t rule)
{
	struct pol_prefix e = { add_cstr(b, P_CORE, path), (uint32_t)strlen(path), rule };

	return add_entry(b, PT_PREFIX0 + kind, &e, sizeof(e));
}

/* The kernel's name of P (realpath's answer) in one open and one readlink,
 * where realpath reads every component as a link; false when P does not
 * exist. */
bool pol_real_path(const char *p, char out[PATH_MAX])
{
	char proc[32];
	int fd = open(p, O_PATH | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	size_t n0 = COPY(proc, "/proc/self/fd/"), k = 0;
	char digits[12];
	for (unsigned v = (unsigned)fd; k == 0 || v; v /= 10)
		digits[k++] = (char)('0' + v % 10);
	while (k)
		proc[n0++] = digits[--k];
	proc[n0] = 0;
	n = readlink(proc, out, PATH_MAX - 1);
	close(fd);
	if (n <= 0 || out[0] != '/')
		return realpath(p, out) != NULL;        /* no /proc */
	out[n] = 0;
	return true;
}

/* The end of the alternative of a path pattern that starts at S: its first
 * '|' outside a [...], or its end. */
static const char *alt_end(const char *s)
{
	int depth = 0;

	for (; *s && (*s != '|' || depth); s++)
		if (*s == '[')
			depth++;
		else if (*s == ']' && depth)
			depth--;
	return s;
}

static int add_one_path(struct build *b, int kind, const char *key, const char *value, uint32_t rule);

/* A path key: each of its alternatives (a|b) an entry of its own, with the
 * line's rule text. */
static int add_path(struct build *b, int kind, const char *key, const char *value)
{
	char alt[MAX_LINE];
	uint32_t rule = add_rule(b, "paths", key, value);
	int r = 1;

	if (bad_pattern(b, value))
		return 0;
	for (const char *a = value, *e;; a = e + 1) {
		e = alt_end(a);
		if ((size_t)(e - a) >= sizeof(alt))
			return fail(b, "path pattern too long");
		memcpy(alt, a, (size_t)(e - a));
		alt[e - a] = 0;
		if ((r = add_one_path(b, kind, key, alt, rule)) <= 0 || !*e)
			return r;
	}
}

static int add_one_path(struct build *b, int kind, const char *key, const char *value, uint32_t rule)
{
	char p[PATH_MAX], real[PATH_MAX];

	if (expand(b, value, p) || bad_pattern(b, p))
		return 0;
	if (!*p)
		return fail(b, "empty path for %s", key);
	if (*alt_end(p) && glob_has_magic(p, strlen(p)))
		return fail(b, "'|' in the path pattern '%s' (from a variable?): write [|] for the character", p);
	pol_normalise(p);
	if (kind == PK_WRITABLE && p[0] != '/')
		return fail(b, "writable root '%s' is not an absolute path", p);
	size_t n = strlen(p);
	if (p[0] == '/' && !glob_has_magic(p, n)) {
		int r = add_prefix(b, kind, p, rule);
		/* The same root through its real path, if a symlink leads there. */
		if (r > 0 && dirlist_real_path(&b->dirs, p, real) && strcmp(real, p))
			r = add_prefix(b, kind, real, rule);
		return r;
	}
	struct pol_glob g = { .pat = add_cstr(b, P_CORE, p), .rule = rule, .anchored = p[0] == '/' };
	g.ncomp = 1;
	for (const char *c = p + g.anchored; *c; c++)
		g.ncomp += *c == '/';
	size_t lit = 0;
	while (lit < n && lit < 255 && !glob_has_magic(p + lit, 1) && (g.anchored || p[lit] != '/'))
		lit++;
	g.litlen = (uint8_t)lit;
	return add_entry(b, PT_GLOB0 + kind, &g, sizeof(g));
}

/* An exec rule: PROGRAM [FLAGS and ARGUMENTS], whitespace-separated. */
static int add_erule(struct build *b, int table, const char *section, const char *key, const char *value)
{
	char v[MAX_LINE];
	struct pol_erule r = { .rule = add_rule(b, section, key, value) };
	char *save, *t;

	COPY(v, value);
	r.tok = (uint32_t)(b->tab[PT_TOKEN].len / sizeof(struct pol_etok));
	for (t = strtok_r(v, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (bad_pattern(b, t))
			return 0;
		if (!r.prog) {
			if (t[0] == '!')
				return fail(b, "a program cannot be negated: '%s' in %s", t, key);
			r.prog = add_cstr(b, P_EXEC, t);
			continue;
		}
		/* !TOKEN: the rule matches only where TOKEN does not; kept as
		 * its pattern with the '!' in front (exec.c) */
		bool neg = t[0] == '!';
		if (neg) {
			t++;
			if (!*t)
				return fail(b, "empty negation '!' in %s", key);
			if (t[0] == '!')
				return fail(b, "double negation '!!%s' in %s", t + 1, key);
		}
		if (t[0] != '-') {
			if (t[0] == '=' && !t[1])
				return fail(b, "empty '=' token in %s", key);
			struct pol_etok e = { t[0] == '=' ? ET_EXACT : ET_ARG, 0 };
			if (neg && t[0] == '=')
				*t = '!';        /* "!=X" is kept as "!X" */
			else if (neg)
				t--;
			else
				t += t[0] == '=';
			e.pat = add_cstr(b, P_EXEC, t);
			if (add_entry(b, PT_TOKEN, &e, sizeof(e)) <= 0)
				return 0;
			r.ntok++;
			continue;
		}
		/* Flags: "-rf" is -r and -f; alternatives are single flags. */
		bool alts = strchr(t, '|') != NULL;
		if (neg && !alts && t[1] != '-' && t[1] && t[2])
			return fail(b, "a negated flag is one flag or alternatives: '!%s' in %s (write !-x|-y)", t, key);
		if (!alts && t[1] != '-' && t[1] && t[2]) {
			for (const char *c = t + 1; *c; c++) {
				char one[3] = { '-', *c, 0 };
				struct pol_etok e = { ET_FLAG, add_str(b, P_EXEC, one, 2) };
				if (add_entry(b, PT_TOKEN, &e, sizeof(e)) <= 0)
					return 0;
				r.ntok++;
			}
			continue;
		}
		for (const char *a = t; a; a = strchr(a, '|') ? strchr(a, '|') + 1 : NULL) {
			size_t n = strcspn(a, "|");
			if (a[0] != '-' || n < 2 || (a[1] != '-' && n != 2))
				return fail(b, "bad flag '%.*s' in '%s' (write -x or --long)", (int)n, a, t);
		}
		struct pol_etok e = { ET_FLAG, add_cstr(b, P_EXEC, neg ? t - 1 : t) };
		if (add_entry(b, PT_TOKEN, &e, sizeof(e)) <= 0)
			return 0;
		r.ntok++;
	}
	if (!r.prog)
		return fail(b, "empty command rule %s", key);
	pol_alt_firsts(bstr(b, r.prog), r.first, &r.anyfirst);
	return add_entry(b, table, &r, sizeof(r));
}

static int parse_addr(struct build *b, const char *value, struct pol_net *n)
{
	char a[PATH_MAX + 16], *slash, *port;
	int max;

	COPY(a, value);
	port = strpbrk(a, " \t");
	if (port) {
		*port++ = 0;
		port += strspn(port, " \t");
		char *end;
		long v = strtol(port, &end, 10);
		if (!*port || *end || v < 1 || v > 65535)
			return fail(b, "bad port '%s'", port), -1;
		n->port = (uint16_t)v;
	}
	if (!strncmp(a, "unix:", 5)) {
		if (!a[5] || bad_pattern(b, a + 5))
			return fail(b, "bad unix socket pattern '%s'", a), -1;
		n->family = NF_UNIX;
		n->path = add_cstr(b, P_EXEC, a + 5);
		return 0;
	}
	if (!strcmp(a, "*")) {          /* every inet and inet6 address */
		n->family = NF_INET6;
		n->plen = 0;
		return 0;
	}
	slash = strchr(a, '/');
	if (slash)
		*slash++ = 0;
	if (inet_pton(AF_INET, a, n->addr) == 1) {
		n->family = NF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, a, n->addr) == 1) {
		n->family = NF_INET6;
		max = 128;
	} else {
		return fail(b, "bad address '%s' (expected ADDR[/BITS] [PORT], unix:PATH or *)", value), -1;
	}
	n->plen = (uint8_t)max;
	if (slash) {
		char *end;
		long v = strtol(slash, &end, 10);
		if (!*slash || *end || v < 0 || v > max)
			return fail(b, "bad prefix length '/%s'", slash), -1;
		n->plen = (uint8_t)v;
	}
	return 0;
}

static int add_net(struct build *b, const char *key, const char *value)
{
	struct pol_net n = { .action = key[0] == 'd' ? NA_DENY : NA_ALLOW };
	char v[PATH_MAX];

	if (expand(b, value, v) || parse_addr(b, v, &n))
		return 0;
	n.rule = add_rule(b, "network", key, value);
	return add_entry(b, PT_NET, &n, sizeof(n));
}

/* Append space-separated program names to "a|b|c". */
static int add_names(struct build *b, struct vec *v, const char *value)
{
	char t[MAX_LINE], *save;

	COPY(t, value);
	for (char *w = strtok_r(t, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (bad_pattern(b, w) || strchr(w, '|'))
			return fail(b, "bad program name '%s'", w);
		if ((v->len && vec_add(v, "|", 1)) || vec_add(v, w, strlen(w)))
			return fail(b, "out of memory");
	}
	return 1;
}

/* --- the schema ------------------------------------------------------------- */

/* An enumerated setting: its choices, in the order of their values. */
struct choice_key {
	const char *section, *key, *choices;
	size_t field;
};

#define HF(f) offsetof(struct pol_hdr, f)
static const struct choice_key choice_keys[] = {
	{ "policy", "mode", "enforce|audit|off", HF(mode) },
	{ "policy", "durability", "process|power", HF(durability) },
	{ "policy", "landlock", "off|auto|on", HF(landlock) },
	{ "policy", "signals", "any|session", HF(signals) },
	{ "programs", "static", "refuse|warn", HF(opaque[PO_STATIC]) },
	{ "programs", "setuid", "refuse|warn", HF(opaque[PO_SETUID]) },
	{ "programs", "go", "refuse|warn", HF(opaque[PO_GO]) },
	{ "programs", "ldso", "refuse|warn", HF(opaque[PO_LDSO]) },
	{ "fetch-and-run", "action", "allow|refuse", HF(fetch_run) },
	{ "network", "default", "allow|deny|loopback", HF(net_default) },
	{ "network", "record", "no|yes", HF(net_record) },
};

static const char *const sections[] = {
	"policy", "paths", "programs", "commands", "fetch-and-run", "network", "rewind",
};

static int set_choice(struct build *b, const struct choice_key *k, const char *value)
{
	size_t n = strlen(value);
	int i = 0;

	for (const char *c = k->choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, i++) {
		size_t cn = strcspn(c, "|");
		if (cn == n && !memcmp(c, value, n)) {
			((uint8_t *)&b->h)[k->field] = (uint8_t)i;
			return 1;
		}
	}
	char alts[128];
	COPY(alts, k->choices);
	for (char *p = alts; *p; p++)
		if (*p == '|')
			*p = '/';
	return fail(b, "bad value '%s' for %s (expected %s)", value, k->key, alts);
}

static int set_rewind_on(struct build *b, const char *value)
{
	static const char *const words[] = { "nonzero", "signal", "refusal" };
	char t[256], *save;

	COPY(t, value);
	b->h.rewind_on = 0;
	for (char *w = strtok_r(t, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save)) {
		size_t i;
		if (!strcmp(w, "none"))
			continue;
		for (i = 0; i < 3 && strcmp(w, words[i]); i++)
			;
		if (i == 3)
			return fail(b, "bad value '%s' for on_failure (expected none, nonzero, signal, refusal)", w);
		b->h.rewind_on |= (uint8_t)(1u << i);
	}
	return 1;
}

static int set_workspace(struct build *b, const char *value)
{
	char p[PATH_MAX];

	if (expand(b, value, p))
		return 0;
	pol_normalise(p);
	if (p[0] != '/')
		return fail(b, "workspace '%s' is not an absolute path", p);
	memcpy(b->workspace, p, sizeof(p));
	return 1;
}

static int parse_base(struct build *b, const char *value);

static int handler(void *user, const char *section, const char *key, const char *value)
{
	static const char *const path_keys[PK_COUNT] = { "hidden", "protected", "untracked", "writable" };
	struct build *b = user;

	if (b->err_line >= 0)
		return 0;
	if (!strcmp(section, "commands"))       /* most lines: no setting is there */
		return add_erule(b, PT_DENY, section, key, value);
	for (size_t i = 0; i < sizeof(choice_keys) / sizeof(choice_keys[0]); i++)
		if (!strcmp(section, choice_keys[i].section) && !strcmp(key, choice_keys[i].key))
			return set_choice(b, &choice_keys[i], value);
	if (!strcmp(section, "policy") && !strcmp(key, "base"))
		return parse_base(b, value);
	if (!strcmp(section, "paths")) {
		if (!strcmp(key, "workspace"))
			return set_workspace(b, value);
		for (int k = 0; k < PK_COUNT; k++)
			if (!strcmp(key, path_keys[k])) {
				b->have_writable |= k == PK_WRITABLE;
				return add_path(b, k, key, value);
			}
	} else if (!strcmp(section, "rewind")) {
		if (!strcmp(key, "on_failure"))
			return set_rewind_on(b, value);
		if (!strcmp(key, "except"))
			return add_erule(b, PT_EXEMPT, section, key, value);
	} else if (!strcmp(section, "fetch-and-run")) {
		if (!strcmp(key, "fetchers"))
			return add_names(b, &b->fetchers, value);
		if (!strcmp(key, "interpreters"))
			return add_names(b, &b->interpreters, value);
		if (!strcmp(key, "carriers"))
			return add_names(b, &b->carriers, value);
	} else if (!strcmp(section, "network")) {
		if (!strcmp(key, "allow") || !strcmp(key, "deny"))
			return add_net(b, key, value);
	} else if (!*section) {
		return fail(b, "key '%s' outside any section", key);
	}
	return fail(b, "unknown key '%s' in [%s]", key, section);
}

/* --- the line reader --------------------------------------------------------- */

struct src {
	struct build *b;
	const char *p, *end;
};

static void check_header(struct build *b, const char *line)
{
	const char *s = line + strspn(line, " \t");
	const char *e;

	if (*s != '[')
		return;
	e = strchr(s, ']');
	if (!e)
		return;         /* inih reports it */
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		if (strlen(sections[i]) == (size_t)(e - s - 1) && !memcmp(sections[i], s + 1, (size_t)(e - s - 1)))
			return;
	fail(b, "unknown section [%.*s]", (int)(e - s - 1), s + 1);
}

static char *reader(char *str, int num, void *stream)
{
	struct src *s = stream;
	struct build *b = s->b;

	if (s->p >= s->end || b->err_line >= 0)
		return NULL;
	const char *nl = memchr(s->p, '\n', (size_t)(s->end - s->p));
	size_t len = nl ? (size_t)(nl - s->p) + 1 : (size_t)(s->end - s->p);
	b->line++;
	if (memchr(s->p, 0, len))
		fail(b, "NUL byte in the line");
	if (len > (size_t)num - 1) {
		fail(b, "line longer than %d bytes", num - 2);
		len = (size_t)num - 1;
	}
	memcpy(str, s->p, len);
	str[len] = 0;
	s->p += nl ? (size_t)(nl - s->p) + 1 : len;
	check_header(b, str);
	return b->err_line >= 0 ? NULL : str;
}

static int read_file(const char *file, char **text, size_t *len);

/* The built-in policy's text: its lines were parsed at build time. */
static bool builtin(const char *text)
{
	return text == (const char *)policies_default_ini;
}

/* The built-in policy's key = value lines (default_tab.h) to the handler,
 * as ini_parse_stream would hand them: 0, or the line of the first that
 * failed. */
static int builtin_lines(struct build *b)
{
	for (size_t i = 0; i < sizeof(policies_default_lines) / sizeof(policies_default_lines[0]); i++) {
		const struct pol_ini_line *l = &policies_default_lines[i];
		b->line = l->line;
		if (!handler(b, l->section, l->key, l->value))
			return l->line;
	}
	return 0;
}

/* Parse TEXT into B as if it stood here (base = ...), then go on. */
static int parse_nested(struct build *b, const char *file, const char *text, size_t len)
{
	struct src s = { b, text, text + len };
	const char *outer = b->file;
	int line = b->line, r;

	if (++b->nesting > 4)
		return fail(b, "base policies nested too deeply");
	b->file = file;
	b->line = 0;
	r = builtin(text) ? builtin_lines(b) : ini_parse_stream(reader, &s, handler, b);
	if (r > 0 && b->err_line < 0) {
		b->line = r;
		fail(b, "syntax error (expected [section], key = value or a comment)");
	}
	if (b->err_line < 0) {
		b->file = outer;
		b->line = line;
	}
	b->nesting--;
	return b->err_line < 0;
}

/* base = default (the built-in policy) or a file, relative to this one. */
static int parse_base(struct build *b, const char *value)
{
	char path[PATH_MAX], *text;
	size_t len;
	int r;

	if (!strcmp(value, "default"))
		return parse_nested(b, "<built-in>", (const char *)policies_default_ini, policies_default_ini_len);
	if (value[0] == '/' || !strchr(b->file, '/'))
		snprintf(path, sizeof(path), "%s", value);
	else
		snprintf(path, sizeof(path), "%.*s/%s", (int)(strrchr(b->file, '/') - b->file), b->file, value);
	r = read_file(path, &text, &len);
	if (r)
		return fail(b, "cannot read base policy '%s': %s", path, strerror(-r));
	/* the name must outlive the parse: messages point at it */
	char *keep = strdup(path);
	if (!keep) {
		free(text);
		return fail(b, "out of memory");
	}
	r = parse_nested(b, keep, text, len);
	free(text);
	if (b->err_line >= 0) {
		snprintf(b->file_buf, sizeof(b->file_buf), "%s", keep);
		b->file = b->file_buf;
	}
	free(keep);
	return r;
}

/* --- the block --------------------------------------------------------------- */

/* Prefix entries in byte order of their paths (the strings of ARG). */
static int cmp_prefix(const void *x, const void *y, void *arg)
{
	const struct pol_prefix *a = x, *c = y;
	const struct build *b = arg;

	return strcmp(bstr(b, a->path), bstr(b, c->path));
}

/* The common prefix of the literal parts of G[0..N): its length, at most MAX. */
static uint8_t glob_lcp(const struct build *b, const struct pol_glob *g, size_t n, size_t max)
{
	size_t l = n ? g[0].litlen : 0;

	for (size_t i = 1; i < n; i++) {
		const char *a = bstr(b, g[0].pat), *c = bstr(b, g[i].pat);
		size_t m = 0;
		while (m < l && m < g[i].litlen && a[m] == c[m])
			m++;
		l = m;
	}
	return (uint8_t)(l < max ? l : max);
}

/* The glob filters of kind K (struct pol_hdr): the N globs at G put in
 * their order (anchored first, each class in file order), then the
 * filters of each class. */
static void glob_filters(struct build *b, int k, struct pol_glob *g, size_t n)
{
	struct pol_glob *t = n ? malloc(n * sizeof(*g)) : NULL;
	size_t na = 0, j = 0;

	if (n && !t) {
		fail(b, "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++)
		na += g[i].anchored;
	for (size_t i = 0; i < n; i++)
		t[g[i].anchored ? j++ : na + i - j] = g[i];
	if (n)
		memcpy(g, t, n * sizeof(*g));
	free(t);
	b->h.nanch[k] = (uint32_t)na;
	b->h.alcp[k] = glob_lcp(b, g, na, 255);
	b->h.flcp[k] = glob_lcp(b, g + na, n - na, 8);
	for (size_t i = 0; i < na; i++) {
		const char *pat = bstr(b, g[i].pat);
		uint32_t h = POL_PHASH0;
		for (size_t c = 0, d = pol_glob_dir(pat, g[i].litlen); c < d; c++)
			h = pol_phash(h, (unsigned char)pat[c]);
		pol_setbit(b->h.abloom[k], h % POL_ABLOOM_BITS);
	}
	for (size_t i = na; i < n; i++) {
		if (g[i].litlen)
			pol_setbit(b->h.firstbits[k], (unsigned char)bstr(b, g[i].pat)[0]);
		else
			memset(b->h.firstbits[k], 0xff, sizeof(b->h.firstbits[k]));
	}
}

static void filters(struct build *b)
{
	for (int k = 0; k < PK_COUNT; k++) {
		const struct vec *v = &b->tab[PT_PREFIX0 + k], *g = &b->tab[PT_GLOB0 + k];
		for (size_t i = 0; i < v->len / sizeof(struct pol_prefix); i++) {
			const struct pol_prefix *e = (const struct pol_prefix *)v->p + i;
			const char *path = bstr(b, e->path);
			uint32_t h = POL_PHASH0;
			for (size_t c = 0; c < e->len; c++)
				h = pol_phash(h, (unsigned char)path[c]);
			pol_setbit(b->h.bloom[k], h % POL_BLOOM_BITS);
		}
		glob_filters(b, k, (struct pol_glob *)g->p, g->len / sizeof(struct pol_glob));
	}
}

static void defaults(struct build *b)
{
	const char *tmp = getenv("TMPDIR");
	const char *roots[] = { b->workspace, tmp && *tmp == '/' ? tmp : "/tmp", "/tmp", "/var/tmp" };

	b->line = 0;
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		char p[PATH_MAX];
		COPY(p, roots[i]);
		pol_normalise(p);
		add_prefix(b, PK_WRITABLE, p, add_cstr(b, P_TEXT, "built-in: the workspace and the temporary directories"));
	}
}

/* Where the string at provisional offset OFF landed in the block. */
static uint32_t place(const struct build *b, uint32_t off)
{
	return off ? b->h.part[off >> PART_SHIFT].str_off + (off & (PART_MAX - 1)) - 1 : 0;
}

/* Every reference to a string put where the string landed. */
static void place_all(struct build *b)
{
	for (int t = 0; t < PT_COUNT; t++) {
		char *e = b->tab[t].p;
		for (size_t i = 0; i < b->tab[t].len / pol_esize[t]; i++, e += pol_esize[t]) {
			if (t < PT_GLOB0) {
				struct pol_prefix *x = (void *)e;
				x->path = place(b, x->path);
				x->rule = place(b, x->rule);
			} else if (t < PT_DENY) {
				struct pol_glob *x = (void *)e;
				x->pat = place(b, x->pat);
				x->rule = place(b, x->rule);
			} else if (t <= PT_EXEMPT) {
				struct pol_erule *x = (void *)e;
				x->prog = place(b, x->prog);
				x->rule = place(b, x->rule);
			} else if (t == PT_TOKEN) {
				struct pol_etok *x = (void *)e;
				x->pat = place(b, x->pat);
			} else {
				struct pol_net *x = (void *)e;
				x->path = place(b, x->path);
				x->rule = place(b, x->rule);
			}
		}
	}
	uint32_t *hs[] = { &b->h.workspace, &b->h.source, &b->h.fetchers, &b->h.interpreters, &b->h.carriers };
	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
		*hs[i] = place(b, *hs[i]);
}

static int finish(struct build *b, struct policy **out)
{
	static const char zero[8];
	size_t size = sizeof(struct pol_hdr);

	_Static_assert(sizeof(struct pol_hdr) % 8 == 0, "the core's strings start on a word");
	if (!b->have_writable)
		defaults(b);
	b->h.fetchers = b->fetchers.len ? add_str(b, P_CORE, b->fetchers.p, b->fetchers.len) : 0;
	b->h.interpreters = b->interpreters.len ? add_str(b, P_CORE, b->interpreters.p, b->interpreters.len) : 0;
	b->h.carriers = b->carriers.len ? add_str(b, P_CORE, b->carriers.p, b->carriers.len) : 0;
	b->h.workspace = add_cstr(b, P_CORE, b->workspace);
	b->h.source = add_cstr(b, P_TEXT, b->file);
	for (int p = 0; p < POL_PARTS; p++)
		if (vec_add(&b->str[p], zero, 8 - b->str[p].len % 8))
			fail(b, "out of memory");
	if (b->err_line >= 0)
		return -1;
	for (int k = 0; k < PK_COUNT; k++) {
		struct vec *v = &b->tab[PT_PREFIX0 + k];
		if (v->len)
			qsort_r(v->p, v->len / sizeof(struct pol_prefix), sizeof(struct pol_prefix), cmp_prefix, b);
	}
	filters(b);
	if (b->err_line >= 0)
		return -1;

	/* each part: its strings, its arrays, up to the next word */
	for (int p = 0; p < POL_PARTS; p++) {
		struct pol_part *q = &b->h.part[p];
		q->off = p == P_CORE ? 0 : (uint32_t)size;
		q->str_off = (uint32_t)size;
		q->str_len = (uint32_t)b->str[p].len;
		size += b->str[p].len;
		for (int t = 0; t < PT_COUNT; t++)
			if (pol_tpart[t] == p) {
				b->h.tab[t].off = (uint32_t)size;
				b->h.tab[t].n = (uint32_t)(b->tab[t].len / pol_esize[t]);
				size += b->tab[t].len;
			}
		size = (size + 7) & ~(size_t)7;
		if (size > UINT32_MAX)
			return fail(b, "policy too large"), -1;
		q->size = (uint32_t)size - q->off;
	}
	place_all(b);
	b->h.magic = POL_MAGIC;
	b->h.version = POL_VERSION;
	b->h.size = size;

	struct policy *pol = calloc(1, sizeof(*pol));
	char *blk = calloc(1, size);
	if (!pol || !blk) {
		free(pol);
		free(blk);
		return fail(b, "out of memory"), -1;
	}
	for (int p = 0; p < POL_PARTS; p++)
		memcpy(blk + b->h.part[p].str_off, b->str[p].p, b->str[p].len);
	for (int t = 0; t < PT_COUNT; t++)
		if (b->tab[t].len)
			memcpy(blk + b->h.tab[t].off, b->tab[t].p, b->tab[t].len);
	for (int p = P_CORE + 1; p < POL_PARTS; p++)
		b->h.part[p].hash = pol_part_hash(blk + b->h.part[p].off, b->h.part[p].size);
	memcpy(blk, &b->h, sizeof(b->h));
	((struct pol_hdr *)blk)->hash = pol_blob_hash(blk, b->h.part[P_CORE].size);
	pol->b = (const struct pol_hdr *)blk;
	pol->n = size;
	pol->owned = blk;
	pol->parts = (1u << POL_PARTS) - 1;     /* made here: nothing to check */
	pol_filters(pol);
	*out = pol;
	return 0;
}

static void init_build(struct build *b, const char *file)
{
	const char *ws = getenv("FTSBX_WORKSPACE");

	memset(b, 0, sizeof(*b));
	b->file = file;
	b->err_line = -1;
	b->h.landlock = PL_AUTO;
	b->h.signals = 1;
	b->h.opaque[PO_STATIC] = b->h.opaque[PO_SETUID] = PO_WARN;
	b->h.opaque[PO_GO] = b->h.opaque[PO_LDSO] = PO_WARN;
	b->h.fetch_run = 1;
	b->h.net_record = 1;
	if (ws && *ws == '/')
		snprintf(b->workspace, sizeof(b->workspace), "%s", ws);
	else if (!getcwd(b->workspace, sizeof(b->workspace)))
		strcpy(b->workspace, "/nonexistent");
	pol_normalise(b->workspace);
}

static void done_build(struct build *b)
{
	dirlist_free(&b->dirs);
	for (int p = 0; p < POL_PARTS; p++)
		free(b->str[p].p);
	free(b->fetchers.p);
	free(b->interpreters.p);
	free(b->carriers.p);
	for (int t = 0; t < PT_COUNT; t++)
		free(b->tab[t].p);
}

int policy_load_text(struct policy **out, const char *file, const char *text, size_t len, char *err,
		     size_t errlen)
{
	struct build *b = malloc(sizeof(*b));
	struct src s = { b, text, text + len };
	int r;

	if (!b) {
		snprintf(err, errlen, "%s: out of memory", file);
		return -1;
	}
	init_build(b, file);
	/* the default policy's text (TEXT may name it as its base) made rule
	 * texts (P_TEXT) of about its size, exec rules of half, and a table
	 * of commands of a third: reserved at those sizes, as much again for
	 * TEXT's own */
	size_t est = len + policies_default_ini_len;
	vec_reserve(&b->str[P_TEXT], est);
	vec_reserve(&b->str[P_EXEC], est / 2);
	vec_reserve(&b->str[P_CORE], est / 8);
	vec_reserve(&b->tab[PT_DENY], est / 3);
	policy_ini_settings();
	r = builtin(text) ? builtin_lines(b) : ini_parse_stream(reader, &s, handler, b);
	if (r > 0 && b->err_line < 0) {
		b->line = r;
		fail(b, "syntax error (expected [section], key = value or a comment)");
	} else if (r < 0 && b->err_line < 0) {
		fail(b, "out of memory");
	}
	r = b->err_line >= 0 ? -1 : finish(b, out);
	if (r)
		snprintf(err, errlen, "%s:%d: %s", b->file, b->err_line, b->err);
	done_build(b);
	free(b);
	return r;
}

static int read_file(const char *file, char **text, size_t *len)
{
	struct stat st;
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 24)) {
		int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		close(fd);
		return -e;
	}
	*text = malloc((size_t)st.st_size + 1);
	if (!*text) {
		close(fd);
		return -ENOMEM;
	}
	for (*len = 0; *len < (size_t)st.st_size; *len += (size_t)n) {
		n = read(fd, *text + *len, (size_t)st.st_size - *len);
		if (n <= 0)
			break;
	}
	close(fd);
	if (n < 0) {
		free(*text);
		return -EIO;
	}
	return 0;
}

int policy_load(struct policy **out, const char *file, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	int r;

	*out = NULL;
	if (!file)
		return policy_load_text(out, "<built-in>", (const char *)policies_default_ini, policies_default_ini_len,
				 err, errlen);
	r = read_file(file, &text, &len);
	if (r) {
		snprintf(err, errlen, "%s: %s", file, strerror(-r));
		return -1;
	}
	r = policy_load_text(out, file, text, len, err, errlen);
	free(text);
	return r;
}

void policy_free(struct policy *pol)
{
	if (pol) {
		free(pol->owned);
		free(pol);
	}
}
