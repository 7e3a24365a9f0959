/*
 * exec.c - the decision on starting a program. The program is resolved as
 * execvp would (through PATH) and its symlinks followed, so a rule on
 * "mke2fs" also catches mkfs.ext4 and a link named "build"; wrappers (env,
 * nice, timeout, xargs, ld.so, busybox ...) are peeled off one by one, the
 * [commands] rules checked at every level, and an sh -c string is handed to
 * shell.c. No allocation: paths live in stack buffers.
 *
 * A rule is PROGRAM TOKEN...: PROGRAM is "alt|alt" globs on the program's
 * names (any alternative with a '/' is matched on the resolved path);
 * every flag token must be present in any order or spelling (-r, a -rf
 * group, --recursive, --recursive=x, an abbreviation such as --recur);
 * argument tokens must match the program's operands in order (not
 * necessarily adjacent); an =TOKEN matches any one argument, options
 * included (kill =-1). A token written !TOKEN matches where TOKEN would
 * not: no such flag, no such operand, no such argument (git push
 * !--dry-run|-n).
 */
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"

#define MAX_DEPTH 8

struct prog {
	const char *names[4];
	size_t lens[4];
	int nnames;
	uint32_t first[8];      /* the first bytes of the names, a bitmap (bit C of first[C / 32]) */
	unsigned char fb[4];    /* the same, each once */
	int nfb;
	const char *path;       /* as resolved through PATH ("" if not found) */
	const char *final;      /* after following symlinks */
	/* where path and final are, when not the caller's own string: an
	 * exec of a program by its path, not a symlink, writes neither (in a
	 * shell's fork child each page of stack it writes is a page fault) */
	char path_buf[PATH_MAX], final_buf[PATH_MAX];
};

const char *pol_base(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static bool executable(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111);
}

/* Search PATH_VALUE for FILE, as execvp does; "" if not found. */
static void search_path(char out[PATH_MAX], const char *file, const char *path_value)
{
	size_t fn = strlen(file);

	out[0] = 0;
	if (!path_value)
		path_value = "/usr/local/bin:/usr/bin:/bin";
	for (const char *d = path_value; d; d = strchr(d, ':') ? strchr(d, ':') + 1 : NULL) {
		size_t dn = strcspn(d, ":");
		if (dn + fn + 2 > PATH_MAX)
			continue;
		if (dn)
			memcpy(out, d, dn);
		else
			out[dn++] = '.';
		out[dn] = '/';
		memcpy(out + dn + 1, file, fn + 1);
		if (executable(out))
			return;
	}
	out[0] = 0;
}

/* lstat P into ST: whether P is a symlink to follow (ST's st_ino is then
 * 0, as when P cannot be looked at; a file leaves ST as lstat filled it). */
static bool is_link(const char *p, struct stat *st)
{
	if (lstat(p, st) < 0) {
		st->st_ino = 0;
		return false;
	}
	if (!S_ISLNK(st->st_mode))
		return false;
	st->st_ino = 0;
	return true;
}

static __attribute__((noinline)) const char *follow_links(char out[PATH_MAX], const char *p, struct stat *st,
							 bool known_link)
{
	char t[PATH_MAX];
	const char *cur = p;

	for (int hops = 0; hops < 8; hops++) {
		if (st && !(hops == 0 && known_link) && !is_link(cur, st))
			return cur;
		ssize_t n = readlink(cur, t, sizeof(t) - 1);
		if (n <= 0)
			return cur;
		t[n] = 0;
		if (t[0] == '/') {
			memcpy(out, t, (size_t)n + 1);
			cur = out;
			continue;
		}
		const char *slash = strrchr(cur, '/');
		size_t dn = slash ? (size_t)(slash - cur) + 1 : 0;
		if (dn + (size_t)n + 1 > PATH_MAX)
			return cur;
		if (cur != out)
			memcpy(out, cur, dn);
		memcpy(out + dn, t, (size_t)n + 1);
		cur = out;
	}
	return cur;
}

/* Follow the symlinks of P (at most 8): P itself when it is none, else OUT
 * where they lead. ST (if not NULL): the file that ends at (st_ino 0 when
 * not known), asked with lstat, which tells a symlink as readlink does and
 * saves the caller a lookup of its own: one system call for a program
 * exec'd by its path. A relative target is taken from the link's own
 * directory, as the kernel takes it. The
 * buffer for a link's target (follow_links) is on the stack only for a
 * symlink: an exec in a shell's fork child writes every new page of stack
 * it reaches (a page fault each), and most programs are files. */
static const char *follow(char out[PATH_MAX], const char *p, struct stat *st)
{
	if (!st)
		return follow_links(out, p, NULL, false);
	return is_link(p, st) ? follow_links(out, p, st, true) : p;
}

static void add_name(struct prog *pg, const char *p)
{
	const char *b = pol_base(p);

	for (int i = 0; i < pg->nnames; i++)
		if (!strcmp(pg->names[i], b))
			return;
	if (*b && pg->nnames < 4) {
		pg->lens[pg->nnames] = strlen(b);
		pg->names[pg->nnames++] = b;
		unsigned char c = (unsigned char)*b;
		if (!(pg->first[c >> 5] >> (c & 31) & 1))
			pg->fb[pg->nfb++] = c;
		pg->first[c >> 5] |= 1u << (c & 31);
	}
}

static void resolve(struct prog *pg, const char *file, const char *argv0, const char *path_value,
		    struct stat *st)
{
	pg->nnames = pg->nfb = 0;
	memset(pg->first, 0, sizeof(pg->first));
	if (!file)
		file = argv0;
	if (strchr(file, '/'))
		pg->path = file;
	else {
		search_path(pg->path_buf, file, path_value);
		pg->path = pg->path_buf;
	}
	pg->final = follow(pg->final_buf, pg->path[0] ? pg->path : file, st && strchr(file, '/') ? st : NULL);
	add_name(pg, argv0);
	add_name(pg, file);
	add_name(pg, pg->path);
	add_name(pg, pg->final);
}

/* Does a name of PG start with the byte C? */
static inline bool starts_with(const struct prog *pg, unsigned char c)
{
	return pg->first[c >> 5] >> (c & 31) & 1;
}

static bool has_name(const struct prog *pg, const char *alts)
{
	for (int i = 0; i < pg->nnames; i++)
		if (glob_any(alts, pg->names[i], strlen(pg->names[i]), false))
			return true;
	return false;
}

static bool prog_match(const char *alts, const struct prog *pg)
{
	for (const char *a = alts, *end;; a = end + 1) {
		unsigned char c = (unsigned char)a[0];
		end = strchrnul(a, '|');
		/* most alternatives start with a letter no name starts with */
		if (c != '*' && c != '?' && c != '[' && c != '/' && !starts_with(pg, c)) {
			if (!*end)
				return false;
			continue;
		}
		if (memchr(a, '/', (size_t)(end - a))) {
			if (glob_match(a, pg->path, strlen(pg->path), false) ||
			    glob_match(a, pg->final, strlen(pg->final), false))
				return true;
		} else {
			for (int i = 0; i < pg->nnames; i++)
				if (glob_match(a, pg->names[i], pg->lens[i], false))
					return true;
		}
		if (!*end)
			return false;
	}
}

/* --- flags and operands --------------------------------------------------------- */

/* Is the long option ARG ("--name" or "--name=value") the flag ALT? MIN:
 * the shortest abbreviation that counts, dashes included. */
static bool long_is(const char *alt, size_t an, const char *arg, size_t min)
{
	size_t n = strcspn(arg, "="), lit = 0;

	if (glob_match(alt, arg, n, false))
		return true;
	/* getopt_long's and git's abbreviations: --recur for --recursive, and
	 * for a glob, of its literal beginning: --force-w for
	 * --force-with-lease* (what follows the wildcard can be left off too) */
	while (lit < an && alt[lit] != '*' && alt[lit] != '?' && alt[lit] != '[')
		lit++;
	return n >= min && n < lit && !memcmp(alt, arg, n);
}

/* A value that turns a flag off: false, no, off or 0. */
static bool off_word(const char *v)
{
	return !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") || !strcmp(v, "0");
}

/* "--name=VALUE" turns its flag off. */
static bool value_off(const char *g)
{
	const char *v = strchr(g, '=');

	return v && off_word(v + 1);
}

/* The rule being matched, for may_be_value: its own flags are known. */
struct rulectx {
	const struct policy *pol;
	const struct pol_erule *r;
};

static bool flag_present(const char *alts, char *const args[], int n, bool neg, const struct rulectx *rc);

/* Is WORD one of the flags the rule itself wants (git push's --force)? */
static bool own_flag(const struct rulectx *rc, const char *word)
{
	const struct pol_etok *t = POL_TAB(rc->pol, PT_TOKEN, struct pol_etok) + rc->r->tok;
	char *const one[1] = { (char *)word };

	for (uint32_t k = 0; k < rc->r->ntok; k++) {
		const char *pat = pol_str(rc->pol, t[k].pat);
		if (t[k].kind == ET_FLAG && pat[0] != '!' && flag_present(pat, one, 1, false, NULL))
			return true;
	}
	return false;
}

/* May ARGS[I] be the value of the option before it (git push --repo -n,
 * kubectl -n exec, systemctl -p --user)? That option is an option word
 * with no "=VALUE" of its own, not a --no-* one and not one of the rule's
 * own flags (git push --force --dry-run), all of which take none. An
 * exemption (a !TOKEN: a dry run, --user, kubectl exec) must hold either
 * way, so such a word exempts nothing. */
static bool may_be_value(char *const args[], int i, const struct rulectx *rc)
{
	const char *p = i > 0 ? args[i - 1] : NULL;

	return p && p[0] == '-' && p[1] && strcmp(p, "--") && !strchr(p, '=') && strncmp(p, "--no-", 5) &&
	       !(rc && own_flag(rc, p));
}

/* "--flag false": a separate value that turns an exempting long flag off
 * (npm reads --dry-run false as no dry run), as value_off's "=false". */
static bool next_off(char *const args[], int i, int n)
{
	return i + 1 < n && off_word(args[i + 1]);
}

/* Is the long option G "--no-NAME" for the flag ALT ("--NAME")? */
static bool long_negated(const char *alt, size_t an, const char *g, size_t min)
{
	char buf[128];
	size_t k = strlen(g);

	if (strncmp(g, "--no-", 5) || k - 3 > sizeof(buf))
		return false;
	memcpy(buf, "--", 2);
	memcpy(buf + 2, g + 5, k - 4);     /* the rest, its NUL included */
	return long_is(alt, an, buf, min);
}

/* Is one of the flags ALTS among ARGS? NEG: the rule wants it absent (an
 * exemption: a dry run), so a spelling that may mean something else lets
 * nothing through. An abbreviation of one letter (--d) is too short to tell
 * (git push --d is --delete or --dry-run); a flag that refuses counts from
 * one letter on (git push --m is --mirror). In a group of short options an
 * exempting letter counts only first: after another it may be that one's
 * value (git push -fon is -f -o n, a push option). An exempting flag is on
 * as its last spelling says, as the programs read them: --dry-run=false,
 * --dry-run false and --no-dry-run turn it off. RC (NULL: none) is the
 * rule, for may_be_value. */
static bool flag_present(const char *alts, char *const args[], int n, bool neg, const struct rulectx *rc)
{
	size_t min = neg ? 4 : 3;
	bool on = false;

	for (int i = 0; i < n && strcmp(args[i], "--"); i++) {
		const char *g = args[i];
		if (g[0] != '-' || !g[1])
			continue;
		for (const char *a = alts; a; a = strchr(a, '|') ? strchr(a, '|') + 1 : NULL) {
			size_t an = strcspn(a, "|");
			if (!neg) {
				if (a[1] == '-' ? g[1] == '-' && long_is(a, an, g, min)
						: g[1] != '-' && strchr(g + 1, a[1]) != NULL)
					return true;
				continue;
			}
			if (a[1] == '-' && g[1] == '-' && long_negated(a, an, g, min)) {
				on = false;
			} else if (a[1] == '-' ? g[1] == '-' && long_is(a, an, g, min) : g[1] != '-' && g[1] == a[1]) {
				if (a[1] == '-' && (value_off(g) || (!strchr(g, '=') && next_off(args, i, n))))
					on = false;
				else if (!may_be_value(args, i, rc))
					on = true;
			} else {
				continue;
			}
			break;
		}
	}
	return on;
}

/* PAT's alternatives all one long option, with or without values
 * (--dry-run|--dry-run=client|--dry-run=*): the index of the last
 * argument that spells that option (--dry-run=none too), before any "--";
 * -1 when none does or PAT is not of that kind. */
static int last_option(const char *pat, char *const args[], int n)
{
	size_t len = strcspn(pat, "=|*?[");
	int last = -1;

	if (len < 3 || pat[0] != '-' || pat[1] != '-')
		return -1;
	for (const char *a = pat; a; a = strchr(a, '|') ? strchr(a, '|') + 1 : NULL)
		if (strncmp(a, pat, len) || (a[len] && a[len] != '|' && a[len] != '='))
			return -1;
	for (int i = 0; i < n && strcmp(args[i], "--"); i++)
		if (!strncmp(args[i], pat, len) && (!args[i][len] || args[i][len] == '='))
			last = i;
	return last;
}

/* Does an operand of ARGS[FROM..TO) (an argument that is not an option,
 * or any after "--") match the alternatives PAT? Only for a !TOKEN: a word
 * that may be an option's value (kubectl -n exec delete) is not one. */
static bool operand_between(const char *pat, char *const args[], int from, int to, const struct rulectx *rc)
{
	bool dashdash = false;

	for (int i = 0; i < to; i++) {
		const char *g = args[i];
		if (!dashdash && !strcmp(g, "--")) {
			dashdash = true;
			continue;
		}
		if (i < from || (!dashdash && ((g[0] == '-' && g[1]) || may_be_value(args, i, rc))))
			continue;
		if (glob_any(pat, g, strlen(g), false))
			return true;
	}
	return false;
}

/* The same over all of ARGS. */
static bool operand_present(const char *pat, char *const args[], int n, const struct rulectx *rc)
{
	return operand_between(pat, args, 0, n, rc);
}

/* What a shell feeds a command on its standard input, as far as its
 * script says (a here-document, a here-string, echo TEXT |): the =PATTERN
 * tokens look at each of its statements (below) as at one more argument
 * (psql <<EOF DROP ... EOF), the flags and operands do not. */
struct stdin_text {
	const char *s;
	size_t n;
};

/* The next statement of IN from *POS on, as SQL and the shells split them
 * (at a ';' outside quotes), without its comments (-- to the end of the
 * line, and C's), in BUF (CAP bytes); one too long for BUF as it stands.
 * NULL at the end. So a statement's !=*WHERE* is its own, not the next
 * one's, and a comment's "drop the index later" is no DROP. */
static const char *next_statement(const struct stdin_text *in, size_t *pos, char *buf, size_t cap, size_t *len)
{
	const char *s = in->s;
	size_t i = *pos, start = i, k = 0;
	char quote = 0;
	bool cut = false;

	if (i >= in->n)
		return NULL;
	for (; i < in->n; i++) {
		char c = s[i];
		if (!quote && c == ';')
			break;
		if (!quote && c == '-' && i + 1 < in->n && s[i + 1] == '-') {
			while (i < in->n && s[i] != '\n')
				i++;
			c = '\n';
		} else if (!quote && c == '/' && i + 1 < in->n && s[i + 1] == '*') {
			for (i += 2; i + 1 < in->n && !(s[i] == '*' && s[i + 1] == '/'); i++)
				;
			i++;
			c = ' ';
		} else if (quote ? c == quote : (c == '\'' || c == '"')) {
			quote = quote ? 0 : c;
		}
		if (k < cap)
			buf[k++] = c;
		else
			cut = true;
	}
	*pos = i + 1;
	if (cut) {              /* as it stands, comments and all */
		*len = (i < in->n ? i : in->n) - start;
		return s + start;
	}
	*len = k;
	return buf;
}

static bool rule_match_in(const struct policy *pol, const struct pol_erule *r, const struct prog *pg,
			  char *const args[], int n, const struct stdin_text *in);

/* Apart, so that its buffer is on the stack only with a shell's input
 * (every exec in a shell's fork child is judged, a page fault each new
 * page of stack). */
static __attribute__((noinline)) bool rule_match_stdin(const struct policy *pol, const struct pol_erule *r,
							const struct prog *pg, char *const args[], int n,
							const struct stdin_text *in)
{
	char buf[2048];
	struct stdin_text st;
	size_t pos = 0;

	while ((st.s = next_statement(in, &pos, buf, sizeof(buf), &st.n)))
		if (rule_match_in(pol, r, pg, args, n, &st))
			return true;
	return false;
}

/* R matches ARGS, or ARGS with one statement of IN (each =PATTERN token,
 * and each !=PATTERN, on the same statement). */
static bool rule_match(const struct policy *pol, const struct pol_erule *r, const struct prog *pg,
		       char *const args[], int n, const struct stdin_text *in)
{
	return rule_match_in(pol, r, pg, args, n, NULL) || (in && in->s && rule_match_stdin(pol, r, pg, args, n, in));
}

static bool rule_match_in(const struct policy *pol, const struct pol_erule *r, const struct prog *pg,
			  char *const args[], int n, const struct stdin_text *in)
{
	const struct pol_etok *t = POL_TAB(pol, PT_TOKEN, struct pol_etok) + r->tok;
	int next = 0;           /* the operand cursor */
	bool dashdash = false;
	/* A negated operand written before an operand the rule wants holds
	 * for the operands before that one only (`docker !exec|run rm`: no
	 * exec before the rm; `docker rm web exec` still removes); one written
	 * after every wanted operand holds for all of them. */
	const char *before = NULL;
	int before_from = 0;
	const struct rulectx rc = { pol, r };

	if (!prog_match(pol_str(pol, r->prog), pg))
		return false;
	for (uint32_t k = 0; k < r->ntok; k++) {
		const char *pat = pol_str(pol, t[k].pat);
		bool neg = pat[0] == '!';       /* !TOKEN: matches where TOKEN does not */
		pat += neg;
		if (t[k].kind == ET_FLAG) {
			if (flag_present(pat, args, n, neg, &rc) == !neg)
				continue;
			return false;
		}
		if (t[k].kind == ET_EXACT) {
			int i = 0;
			if (neg && (i = last_option(pat, args, n)) >= 0) {
				/* an exempting option (!=--dry-run|--dry-run=client):
				 * its last spelling decides, as for flags */
				if (glob_any(pat, args[i], strlen(args[i]), false))
					return false;
				continue;
			}
			i = 0;
			while (i < n && !glob_any(pat, args[i], strlen(args[i]), false))
				i++;
			if ((i < n || (in && glob_any(pat, in->s, in->n, false))) == !neg)
				continue;
			return false;
		}
		if (neg) {
			bool wanted_after = false;
			for (uint32_t l = k + 1; l < r->ntok && !wanted_after; l++)
				wanted_after = t[l].kind == ET_ARG && pol_str(pol, t[l].pat)[0] != '!';
			if (wanted_after && !before) {
				before = pat;
				before_from = next;
			} else if (operand_present(pat, args, n, &rc)) {
				return false;
			}
			continue;
		}
		for (;; next++) {
			if (next >= n)
				return false;
			const char *g = args[next];
			if (!dashdash && !strcmp(g, "--")) {
				dashdash = true;
				continue;
			}
			if (!dashdash && g[0] == '-' && g[1])
				continue;
			if (glob_any(pat, g, strlen(g), false)) {
				if (before && operand_between(before, args, before_from, next, &rc))
					return false;
				before = NULL;
				next++;
				break;
			}
		}
	}
	return true;
}

static const struct pol_erule *first_rule(const struct policy *pol, int table, const struct prog *pg,
					  char *const argv[], int argc, const struct stdin_text *in)
{
	const struct pol_erule *r = POL_TAB(pol, table, struct pol_erule), *end = r + pol->b->tab[table].n;
	unsigned c = pg->nfb ? pg->fb[0] : 0;   /* no alternative starts with byte 0 */

	/* the compiled filter first: most rules are for other programs (a
	 * bit test for each byte the names start with, usually one) */
	if (pg->nfb <= 1) {
		for (; r < end; r++)
			if (((r->first[c >> 5] >> (c & 31) | r->anyfirst) & 1) &&
			    rule_match(pol, r, pg, argv + 1, argc - 1, in))
				return r;
		return NULL;
	}
	for (; r < end; r++) {
		uint32_t may = r->anyfirst;
		for (int k = 0; k < pg->nfb; k++)
			may |= r->first[pg->fb[k] >> 5] >> (pg->fb[k] & 31);
		if ((may & 1) && rule_match(pol, r, pg, argv + 1, argc - 1, in))
			return r;
	}
	return NULL;
}

/* --- wrappers ----------------------------------------------------------------- */

enum { W_ASSIGN = 1, W_DIGITS = 2, W_SPLIT = 4, W_APPLET = 8 };

/* The first bytes of the wrappers' names and of the shells' (every
 * alternative of a wrapper's names starts with the byte its first one does):
 * most programs start with none of them. All are lower-case letters. */
#define LC(c) (1u << ((c) - 0x60))
#define WRAPPER_FIRSTS (LC('e') | LC('n') | LC('t') | LC('s') | LC('i') | LC('c') | LC('x') | LC('l') | LC('b'))  /* sshpass: 's' */
#define SHELL_NAMES "sh|bash|dash|zsh|ksh|mksh|ash|rbash|yash|posh|ksh93"
#define SHELL_FIRSTS (LC('s') | LC('b') | LC('d') | LC('z') | LC('k') | LC('m') | LC('a') | LC('r') | LC('y') | LC('p'))

struct wrapper {
	const char *names;      /* globs on the program's names, all starting with one byte */
	const char *argopts;    /* short options that take a value */
	const char *longargs;   /* "|name|": long options that take a value */
	const char *nocmd;      /* short options after which no program follows */
	unsigned skip;          /* operands before the program (timeout's DURATION) */
	unsigned flags;
};

static const struct wrapper wrappers[] = {
	{ "env", "uCS", "|unset|chdir|split-string|", "", 0, W_ASSIGN | W_SPLIT },
	{ "nice", "n", "|adjustment|", "", 0, W_DIGITS },
	{ "nohup", "", "", "", 0, 0 },
	{ "timeout", "ks", "|kill-after|signal|", "", 1, 0 },
	{ "stdbuf", "ioe", "|input|output|error|", "", 0, 0 },
	{ "ionice", "cn", "|class|classdata|", "pPu", 0, 0 },
	{ "chrt", "TPD", "|sched-runtime|sched-period|sched-deadline|", "pm", 1, 0 },
	{ "setsid", "", "", "", 0, 0 },
	{ "xargs", "adEILnPs", "|arg-file|delimiter|eof|replace|max-lines|max-args|max-procs|max-chars|"
		   "process-slot-var|", "", 0, 0 },
	{ "time", "fo", "|format|output|", "", 0, 0 },
	{ "ld.so|ld-linux*.so*|ld-*.so*|ld64.so*", "", "|library-path|inhibit-rpath|audit|preload|argv0|"
		   "glibc-hwcaps-prefix|glibc-hwcaps-mask|", "", 0, 0 },
	{ "busybox", "", "", "", 0, W_APPLET },
	{ "sshpass", "pfdP", "", "", 0, 0 },
};

static bool var_assign(const char *a)
{
	const char *eq = strchr(a, '=');

	if (!eq || eq == a)
		return false;
	for (const char *c = a; c < eq; c++)
		if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
		      (c > a && *c >= '0' && *c <= '9')))
			return false;
	return true;
}

static bool long_takes_value(const char *list, const char *arg)
{
	size_t n = strcspn(arg, "=");
	const char *p = list;

	if (arg[n] == '=')
		return false;
	while ((p = strstr(p, arg)))
		if (p[-1] == '|' && p[n] == '|')
			return true;
		else
			p++;
	return false;
}

/* The index of the program W runs in ARGV, or -1; *SPLIT: env -S's string. */
static int unwrap_with(const struct wrapper *w, char *const argv[], int argc, const char **split)
{
	int i = 1;

	if (w->flags & W_APPLET)
		return argc > 1 && argv[1][0] != '-' ? 1 : -1;
	while (i < argc) {
		const char *a = argv[i];
		if ((w->flags & W_ASSIGN) && (var_assign(a) || !strcmp(a, "-"))) {
			i++;
			continue;
		}
		if (a[0] != '-' || !a[1])
			break;
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[1] == '-') {
			if ((w->flags & W_SPLIT) && !strncmp(a, "--split-string", 14))
				*split = a[14] == '=' ? a + 15 : i + 1 < argc ? argv[i + 1] : NULL;
			i += long_takes_value(w->longargs, a + 2) ? 2 : 1;
			continue;
		}
		if (!(w->flags & W_DIGITS && a[1] >= '0' && a[1] <= '9')) {
			for (const char *c = a + 1; *c; c++) {
				if (strchr(w->nocmd, *c))
					return -1;
				if (!strchr(w->argopts, *c))
					continue;
				const char *v = c[1] ? c + 1 : i + 1 < argc ? argv[++i] : NULL;
				if (*c == 'S' && (w->flags & W_SPLIT))
					*split = v;
				break;
			}
		}
		i++;
	}
	i += (int)w->skip;
	return i < argc ? i : -1;
}

static const struct wrapper *find_wrapper(const struct prog *pg, const char *argv0)
{
	if (!(pg->first[3] & WRAPPER_FIRSTS))
		return NULL;
	for (size_t i = 0; i < sizeof(wrappers) / sizeof(wrappers[0]); i++) {
		const struct wrapper *w = &wrappers[i];
		/* (argv[0]'s name is one of PG's) */
		if (!starts_with(pg, (unsigned char)w->names[0]))
			continue;
		/* busybox runs the applet its argv[0] names: only "busybox APPLET" wraps */
		if (w->flags & W_APPLET ? glob_any(w->names, pol_base(argv0), strlen(pol_base(argv0)), false) :
		    has_name(pg, w->names))
			return w;
	}
	return NULL;
}

/* Only for classifying the words of an sh -c string: the names as
 * written, no system call (the exec of each is resolved when it runs). */
int pol_unwrap(char *const argv[], int argc, const char **split)
{
	struct prog pg;
	int at = 0;

	*split = NULL;
	for (int level = 0; level < MAX_DEPTH && at < argc; level++) {
		const struct wrapper *w;
		int idx;

		pg.nnames = pg.nfb = 0;
		memset(pg.first, 0, sizeof(pg.first));
		add_name(&pg, argv[at]);
		w = find_wrapper(&pg, argv[at]);
		if (!w)
			return at;
		idx = unwrap_with(w, argv + at, argc - at, split);
		if (idx <= 0)
			return -1;
		at += idx;
	}
	return at < argc ? at : -1;
}

/* --- shells ------------------------------------------------------------------- */

static bool is_shell(const struct prog *pg)
{
	return (pg->first[3] & SHELL_FIRSTS) && has_name(pg, SHELL_NAMES);
}

/* The string of "sh [OPTIONS] -c STRING ...", or NULL. */
const char *policy_shell_string(char *const argv[], int argc)
{
	bool c = false;
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--") || !strcmp(a, "-")) {
			i++;
			break;
		}
		if ((a[0] != '-' && a[0] != '+') || !a[1])
			break;
		if (a[1] == '-') {
			if (!strcmp(a, "--rcfile") || !strcmp(a, "--init-file"))
				i++;
			continue;
		}
		for (const char *o = a + 1; *o; o++) {
			if (*o == 'c' && a[0] == '-')
				c = true;
			if (*o == 'o' || *o == 'O')
				i++;
		}
	}
	return c && i < argc ? argv[i] : NULL;
}

/* The remote command of "ssh [OPTIONS] DESTINATION COMMAND...", joined with
 * spaces as ssh joins it for the remote shell, into BUF (N bytes); NULL if
 * there is none (a login, -N, -s SUBSYSTEM) or it does not fit (*LONG). */
/* ssh's options from argv[I] on, up to the first word that is not one (or
 * past "--"): that word's index, or -1 for a command ssh runs no remote
 * shell for (-N, -s). An -o RemoteCommand=... is the command (*REMOTE). */
static int ssh_options(char *const argv[], int argc, int i, const char **remote)
{
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			return i + 1;
		if (a[0] != '-' || !a[1])
			return i;
		for (const char *o = a + 1; *o; o++) {
			if (*o == 'N' || *o == 's')
				return -1;
			if (strchr("BbcDEeFIiJLlmOoPpQRSWw", *o)) {
				const char *v = o[1] ? o + 1 : i + 1 < argc ? argv[i + 1] : "";
				/* as ssh reads a configuration line: "  Key = value",
				 * "Key\tvalue", any case */
				v += strspn(v, " \t");
				if (*o == 'o' && !strncasecmp(v, "RemoteCommand", 13) && strchr(" \t=", v[13])) {
					v += 13 + strspn(v + 13, " \t");
					v += *v == '=';
					*remote = v + strspn(v, " \t");
				}
				if (!o[1])
					i++;
				break;
			}
		}
	}
	return i;
}

static const char *ssh_command(char *const argv[], int argc, char *buf, size_t n, bool *toolong)
{
	const char *remote = NULL;
	int i;
	size_t len = 0;

	*toolong = false;
	/* options, the destination, options again (OpenSSH reads them
	 * there too, and a "--"), then the command */
	i = ssh_options(argv, argc, 1, &remote);
	if (i >= 0 && i < argc)
		i = ssh_options(argv, argc, i + 1, &remote);
	if (remote && *remote && (i < 0 || i >= argc)) {
		if (strlen(remote) + 1 > n) {
			*toolong = true;
			return NULL;
		}
		return strcpy(buf, remote);
	}
	if (i < 0 || i >= argc)
		return NULL;
	for (; i < argc; i++) {
		size_t an = strlen(argv[i]);
		if (len + an + 2 > n) {
			*toolong = true;
			return NULL;
		}
		if (len)
			buf[len++] = ' ';
		memcpy(buf + len, argv[i], an);
		len += an;
	}
	buf[len] = 0;
	return buf;
}

bool pol_is_interpreter(const struct policy *pol, const char *name)
{
	const char *list = pol_str(pol, pol->b->interpreters);

	return *list && glob_any(list, name, strlen(name), false);
}

bool pol_is_fetcher(const struct policy *pol, const char *name)
{
	const char *list = pol_str(pol, pol->b->fetchers);

	return *list && glob_any(list, name, strlen(name), false);
}

bool pol_is_carrier(const struct policy *pol, const char *name)
{
	const char *list = pol_str(pol, pol->b->carriers);

	return *list && glob_any(list, name, strlen(name), false);
}

/* --- the decision ----------------------------------------------------------- */

static int count(char *const argv[])
{
	int n = 0;

	while (argv[n])
		n++;
	return n;
}

bool pol_rules_match(const struct policy *pol, int table, const char *file, char *const argv[], const char **why)
{
	int argc = count(argv);
	struct prog pg;

	for (int level = 0; level < MAX_DEPTH && argc > 0; level++) {
		const struct pol_erule *r;
		const struct wrapper *w;
		const char *split = NULL;
		int idx;

		resolve(&pg, level ? NULL : file, argv[0], NULL, NULL);
		if ((r = first_rule(pol, table, &pg, argv, argc, NULL))) {
			if (why)        /* (NULL: the answer alone, no page of the texts) */
				*why = pol_text(pol, r->rule);
			return true;
		}
		w = find_wrapper(&pg, argv[0]);
		idx = w ? unwrap_with(w, argv, argc, &split) : -1;
		if (idx <= 0)
			break;
		argv += idx;
		argc -= idx;
	}
	return false;
}

/* pol_exec_argv; ST (if not NULL): what policy_exec_stat says of it. */
static enum pverdict exec_argv(const struct policy *pol, const char *file, char *const argv[],
			       const char *path_value, int depth, const char **why, struct stat *st,
			       const struct stdin_text *in);

/* docker exec [OPTIONS] CONTAINER COMMAND... (podman, nerdctl; docker
 * compose exec SERVICE ..., docker-compose): the index of COMMAND in ARGV,
 * or 0. The options that take a value are docker's and compose's. */
static int container_exec_command(char *const argv[], int argc)
{
	static const char *const valued[] = { "-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir",
					      "--detach-keys", "--index", NULL };
	int i = 1;

	while (i < argc && strcmp(argv[i], "exec"))
		i++;
	for (i++; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		for (const char *const *v = valued; *v; v++)
			if (!strcmp(argv[i], *v))
				i++;
	}
	return i + 1 < argc ? i + 1 : 0;        /* past the container */
}

/* ssh HOST COMMAND: the remote shell runs COMMAND; the same rules hold
 * there (ssh host sudo reboot). Apart from exec_argv, so that its buffer
 * is on the stack only for ssh: below exec_argv's frame every exec in a
 * shell's fork child writes the frames of the checks, a page fault each
 * new page. */
static __attribute__((noinline)) bool ssh_denies(const struct policy *pol, char *const argv[], int argc,
						 const char *path_value, int depth, const char **why)
{
	char remote[4096];
	const char *s;
	bool toolong;

	if ((s = ssh_command(argv, argc, remote, sizeof(remote), &toolong)) &&
	    pol_shell(pol, s, strlen(s), path_value, depth + 1, why, NULL) == PV_DENY)
		return true;
	if (toolong) {
		*why = "an ssh command too long to check";
		return true;
	}
	return false;
}

static enum pverdict exec_argv(const struct policy *pol, const char *file, char *const argv[],
			       const char *path_value, int depth, const char **why, struct stat *st,
			       const struct stdin_text *in)
{
	int argc = count(argv);
	struct prog pg;

	*why = NULL;
	if (depth > MAX_DEPTH) {
		*why = "commands nested too deeply to check";
		return PV_DENY;
	}
	for (int level = 0; level < MAX_DEPTH && argc > 0; level++) {
		const struct pol_erule *r;
		const struct wrapper *w;
		const char *split = NULL, *s;
		int idx;

		resolve(&pg, level ? NULL : file, argv[0], path_value, level ? NULL : st);
		if ((r = first_rule(pol, PT_DENY, &pg, argv, argc, in))) {
			*why = pol_text(pol, r->rule);
			return PV_DENY;
		}
		if (is_shell(&pg) && (s = policy_shell_string(argv, argc)) &&
		    pol_shell(pol, s, strlen(s), path_value, depth + 1, why, NULL) == PV_DENY)
			return PV_DENY;
		/* kubectl exec POD -- COMMAND...: the pod runs COMMAND; the
		 * same rules hold there */
		if ((starts_with(&pg, 'k') || starts_with(&pg, 'o') || starts_with(&pg, 'm')) && argc > 3 &&
		    has_name(&pg, "kubectl|oc|microk8s.kubectl")) {
			int dd = 1;
			while (dd < argc && strcmp(argv[dd], "exec"))
				dd++;
			while (dd < argc && strcmp(argv[dd], "--"))
				dd++;
			if (dd + 1 < argc &&
			    exec_argv(pol, NULL, argv + dd + 1, path_value, depth + 1, why, NULL, in) == PV_DENY)
				return PV_DENY;
		}
		/* docker exec CONTAINER COMMAND: the container runs COMMAND */
		if ((starts_with(&pg, 'd') || starts_with(&pg, 'p') || starts_with(&pg, 'n')) && argc > 3 &&
		    has_name(&pg, "docker|podman|nerdctl|docker-compose|podman-compose")) {
			int at = container_exec_command(argv, argc);
			if (at && exec_argv(pol, NULL, argv + at, path_value, depth + 1, why, NULL, in) == PV_DENY)
				return PV_DENY;
			if (pol_container_mounts(pol, argv, argc, why))
				return PV_DENY;
		}
		/* ssh HOST COMMAND: the remote shell runs COMMAND; the same
		 * rules hold there (ssh host sudo reboot) */
		if (starts_with(&pg, 's') && has_name(&pg, "ssh") &&
		    ssh_denies(pol, argv, argc, path_value, depth, why))
			return PV_DENY;
		/* an interpreter running a script: the rules hold on the
		 * script as the program, as they do when the kernel runs it
		 * by its #! line (bash $(command -v gcloud) projects delete,
		 * python3 ./manage.py flush) */
		int at = pol_script_at(pol, argv, argc);
		if (at && exec_argv(pol, NULL, argv + at, path_value, depth + 1, why, NULL, in) == PV_DENY)
			return PV_DENY;
		w = find_wrapper(&pg, argv[0]);
		idx = w ? unwrap_with(w, argv, argc, &split) : -1;
		if (split && pol_shell(pol, split, strlen(split), path_value, depth + 1, why, NULL) == PV_DENY)
			return PV_DENY;
		if (idx <= 0)
			break;
		argv += idx;
		argc -= idx;
	}
	return PV_ALLOW;
}

enum pverdict pol_exec_argv(const struct policy *pol, const char *file, char *const argv[],
			    const char *path_value, int depth, const char **why, const char *in, size_t in_n)
{
	struct stdin_text t = { in, in_n };

	return exec_argv(pol, file, argv, path_value, depth, why, NULL, in ? &t : NULL);
}

enum pverdict policy_exec_stat(const struct policy *pol, const char *file, char *const argv[],
			       const char *path_value, const char **why, struct stat *st)
{
	static char *const empty[] = { "", NULL };

	if (st)
		st->st_ino = 0;
	if (!argv || !argv[0])
		argv = file ? empty : NULL;
	*why = NULL;
	if (!argv)
		return PV_ALLOW;
	if (!pol_part(pol, P_EXEC)) {
		*why = policy_damaged;
		return PV_DENY;
	}
	return exec_argv(pol, file, argv, path_value, 0, why, st, NULL);
}

enum pverdict policy_exec(const struct policy *pol, const char *file, char *const argv[],
			  const char *path_value, const char **why)
{
	return policy_exec_stat(pol, file, argv, path_value, why, NULL);
}
