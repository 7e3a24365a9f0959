/*
 * shell.c - what an sh -c / bash -c string would run. The string is read
 * the way a shell reads it (quotes, escapes, comments, ; && || | & and
 * newlines, ( ) groups, redirections and here-documents, $(...), `...`,
 * <(...)), closely enough to find its simple commands; each is checked as
 * an exec (exec.c: wrappers, [commands] rules, nested sh -c), and the
 * string as a whole is checked for fetch-and-run: code fetched by curl,
 * wget, nc, ssh ... and handed to an interpreter, through a pipe (curl URL
 * | sh, also into a group or loop the pipe feeds: curl URL | while read l;
 * do eval "$l"; done), a process substitution (bash <(curl URL)), a command
 * substitution (sh -c "$(curl URL)", eval "$(wget -O- URL)"), a variable
 * (V=$(curl URL); eval "$V") or a file fetched earlier in the string (curl
 * -o i.sh URL && bash i.sh).
 *
 * Words are taken literally: $VAR and globs are not expanded (the exec of
 * each program is checked again, with its real argv, when it happens). No
 * allocation: the words of a command go into a stack buffer, or an mmap'd
 * one for a long string.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"

#define MAXW            256
#define STACK_BUF       4096
#define MAX_PAREN       32
#define MAX_HEREDOC     4
#define MAX_NEST        8
#define MAX_NAMES       8
#define MAX_CALLS       8

enum { WF_FETCHSUB = 1, WF_PROCFETCH = 2 };     /* word flags */
enum { OP_SEP, OP_PIPE, OP_OPEN, OP_CLOSE };

static const char fetch_why[] = "fetch-and-run: code fetched from the network is run by an interpreter";
static const char bomb_why[] = "fork bomb: a shell function starts itself in a pipeline or in the background";

struct sh {
	const struct policy *pol;
	const char *path_value;
	int depth;
	const char *why;
	bool deny, fetches;
	const char *s;
	size_t i, n;
	/* the command being read */
	char *buf;
	size_t len;
	char *argv[MAXW + 1];
	uint8_t wf[MAXW];
	int argc;
	bool in_word, redirect, redir_in, redir_fetch, redir_fd, want_delim;
	const char *redir_out;          /* where the command's output goes (> FILE) */
	uint8_t cur_wf;
	size_t word_start;
	/* what the command being read gets on its standard input, as far as
	 * the script says (stdin_texts): a here-string's word (IN), its
	 * here-documents (those from NHD_CMD on are its own), what the stage
	 * before the pipe wrote (PIN: echo's or printf's words copied into
	 * PIPED, or a bare cat's input) */
	const char *in;
	size_t in_n;
	bool herestr;
	int nhd_cmd;
	char piped[1024];
	size_t piped_n;
	const char *pin;        /* what the next stage gets: PIPED, or a body */
	size_t pin_n;
	bool hd_lost;           /* a here-document this line could not keep */
	/* here-documents waiting for the end of the line */
	int nhd;
	char hd[MAX_HEREDOC][64];
	bool hd_strip[MAX_HEREDOC], hd_shell;
	/* pipelines, and compound commands: ( ) and { } groups, loops, if
	 * and case; FED: the compound's standard input is fetched code (it
	 * is a stage after curl URL |, or inside one that is) */
	bool pipe_fetch, last_fetch, after_pipe;
	int paren;
	bool group_fetch[MAX_PAREN], saved_pipe[MAX_PAREN], fed[MAX_PAREN];
	/* variables assigned fetched text (V=$(curl URL)), files written by a
	 * fetcher (curl -o F URL, wget URL, scp host:F .) */
	int nvars, nfiles;
	char vars[MAX_NAMES][32];
	char files[MAX_NAMES][64];
	/* shell functions whose bodies are being read (a fork bomb starts
	 * itself in a pipeline or in the background): each one's name, and
	 * the compound depth its body opens above */
	int nfuncs;
	char funcs[MAX_NAMES][64];
	int func_depth[MAX_NAMES];
	bool guarded[MAX_NAMES];        /* its body has a condition or a loop so far */
	bool self_call[MAX_PAREN];      /* a group that calls the function it is in */
	/* calls made from unguarded function bodies (a(){ b|b& }; b(){ a; }):
	 * caller, callee, and whether the call starts a process of its own */
	int ncalls;
	struct { char from[24], to[24]; bool forks; } calls[MAX_CALLS];
	bool closed_self;       /* the group that just closed did */
	bool background;        /* the command being read ends with & */
	int end_op;             /* and with this operator */
};

static void deny(struct sh *p, const char *why)
{
	if (!p->deny) {
		p->deny = true;
		p->why = why;
	}
}

static enum pverdict shell_in(const struct policy *pol, const char *script, size_t len, const char *path_value,
			      int depth, const char **why, bool *fetches, bool fed);

/* Check the nested script S[0..N) ($(...), `...`, <(...), a here-doc);
 * true if it runs a fetcher. FED: its standard input is fetched code
 * (tee >(sh) after curl URL |). */
static bool nested_in(struct sh *p, const char *s, size_t n, bool fed)
{
	const char *why = NULL;
	bool fetches = false;

	if (p->deny)
		return false;
	if (shell_in(p->pol, s, n, p->path_value, p->depth + 1, &why, &fetches, fed && p->pol->b->fetch_run) ==
	    PV_DENY)
		deny(p, why);
	p->fetches |= fetches;
	return fetches;
}

static bool nested(struct sh *p, const char *s, size_t n)
{
	return nested_in(p, s, n, false);
}

/* Is the standard input of the command being read fetched code? */
static bool stage_fed(const struct sh *p)
{
	return p->after_pipe ? p->pipe_fetch : p->fed[p->paren];
}

/* Is the command being read (its words so far) a fetcher? */
static bool fetcher_so_far(const struct sh *p)
{
	const char *split;
	int idx = p->argc ? pol_unwrap(p->argv, p->argc, &split) : -1;

	return idx >= 0 && pol_is_fetcher(p->pol, pol_base(p->argv[idx]));
}

/* The index of the ')' closing the '(' before S[I], or N. */
static size_t find_close(const char *s, size_t i, size_t n)
{
	int depth = 1;

	for (; i < n; i++) {
		char c = s[i];
		if (c == '\\') {
			i++;
		} else if (c == '\'') {
			const char *q = memchr(s + i + 1, '\'', n - i - 1);
			i = q ? (size_t)(q - s) : n;
		} else if (c == '"') {
			for (i++; i < n && s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
		} else if (c == '(') {
			depth++;
		} else if (c == ')' && --depth == 0) {
			return i;
		}
	}
	return n;
}

static void put(struct sh *p, char c)
{
	p->buf[p->len++] = c;
}

static void put_span(struct sh *p, size_t from, size_t to)
{
	memcpy(p->buf + p->len, p->s + from, to - from);
	p->len += to - from;
}

/* $(...), `...` or <(...) starting at I (the body from B to E, the whole
 * up to END): copied literally into the word, checked as a script. */
static void substitution(struct sh *p, size_t b, size_t e, size_t end, uint8_t flag, bool fed)
{
	put_span(p, p->i, end);
	if (nested_in(p, p->s + b, e - b, fed))
		p->cur_wf |= flag;
	p->i = end;
}

static void dollar(struct sh *p)
{
	const char *s = p->s;
	size_t i = p->i, n = p->n, e;

	if (i + 1 < n && s[i + 1] == '(' && !(i + 2 < n && s[i + 2] == '(')) {
		e = find_close(s, i + 2, n);
		substitution(p, i + 2, e, e < n ? e + 1 : n, WF_FETCHSUB, false);
	} else if (i + 1 < n && (s[i + 1] == '(' || s[i + 1] == '{')) {
		/* $((arithmetic)) and ${parameter}: literal */
		e = s[i + 1] == '(' ? find_close(s, i + 2, n) : i + 1;
		if (s[i + 1] == '{')
			while (e < n && s[e] != '}')
				e++;
		put_span(p, i, e < n ? e + 1 : n);
		p->i = e < n ? e + 1 : n;
	} else if (i + 1 < n && s[i + 1] == '\'') {        /* $'ANSI C' */
		for (e = i + 2; e < n && s[e] != '\''; e++)
			if (s[e] == '\\')
				e++;
		put_span(p, i + 2, e < n ? e : n);
		p->i = e < n ? e + 1 : n;
	} else {
		put(p, '$');
		p->i++;
	}
}

static void backtick(struct sh *p)
{
	size_t e;

	for (e = p->i + 1; e < p->n && p->s[e] != '`'; e++)
		if (p->s[e] == '\\')
			e++;
	if (e > p->n)
		e = p->n;
	substitution(p, p->i + 1, e, e < p->n ? e + 1 : p->n, WF_FETCHSUB, false);
}

static void dquote(struct sh *p)
{
	const char *s = p->s;

	p->i++;
	while (p->i < p->n && s[p->i] != '"' && !p->deny) {
		char c = s[p->i];
		if (c == '\\' && p->i + 1 < p->n && strchr("$`\"\\\n", s[p->i + 1])) {
			if (s[p->i + 1] != '\n')
				put(p, s[p->i + 1]);
			p->i += 2;
		} else if (c == '$') {
			dollar(p);
		} else if (c == '`') {
			backtick(p);
		} else {
			put(p, c);
			p->i++;
		}
	}
	if (p->i < p->n)
		p->i++;         /* the closing quote (none at the end of the script) */
}

/* --- what a script fetched ------------------------------------------------------ */

static const char *base_of(const char *w)
{
	const char *b = strrchr(w, '/');

	return b ? b + 1 : w;
}

static void remember(char names[][64], int *n, const char *w, size_t len)
{
	if (*n < MAX_NAMES && len && len < 64) {
		memcpy(names[*n], w, len);
		names[(*n)++][len] = 0;
	}
}

/* The name curl -O or wget give the download of URL. */
static void remember_url(struct sh *p, const char *url)
{
	size_t n = strcspn(url, "?#");
	const char *b = url;

	for (const char *c = url; c < url + n; c++)
		if (*c == '/')
			b = c + 1;
	if (b < url + n && strstr(url, "://"))
		remember(p->files, &p->nfiles, b, (size_t)(url + n - b));
	else if (strstr(url, "://"))
		remember(p->files, &p->nfiles, "index.html", 10);
}

/* Was W written by a fetcher earlier in the script (the same path, or the
 * same file name: curl -o /tmp/i.sh URL; sh i.sh)? */
static bool fetched_file(const struct sh *p, const char *w)
{
	const char *b = base_of(w);

	for (int k = 0; k < p->nfiles; k++)
		if (!strcmp(w, p->files[k]) || (*b && !strcmp(b, base_of(p->files[k]))))
			return true;
	return false;
}

static bool ident(char c)
{
	return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Does W use a variable that holds fetched text ($V, ${V})? */
static bool refs_var(const struct sh *p, const char *w)
{
	for (const char *d = strchr(w, '$'); d; d = strchr(d + 1, '$')) {
		const char *v = d + 1 + (d[1] == '{');
		size_t n = 0;
		while (ident(v[n]))
			n++;
		for (int k = 0; n && k < p->nvars; k++)
			if (strlen(p->vars[k]) == n && !memcmp(p->vars[k], v, n))
				return true;
	}
	return false;
}

static void remember_var(struct sh *p, const char *assign)
{
	size_t n = 0;

	while (ident(assign[n]))
		n++;
	if (n && n < sizeof(p->vars[0]) && p->nvars < MAX_NAMES) {
		memcpy(p->vars[p->nvars], assign, n);
		p->vars[p->nvars++][n] = 0;
	}
}

/* The files a fetcher writes: curl -o F / -O, wget -O F or the URL's
 * name, aria2c -o F; scp and rsync from a remote host: their target and
 * the names they copy. */
static void fetch_outputs(struct sh *p, char *const av[], int ac)
{
	const char *name = base_of(av[0]);
	bool curl = !strcmp(name, "curl"), wget = !strcmp(name, "wget"), aria = !strcmp(name, "aria2c");
	bool copy = glob_any("scp|rsync|sftp", name, strlen(name), false);
	bool remote_name = wget || aria, remote = false;
	const char *out = NULL;

	for (int i = 1; i < ac; i++) {
		const char *a = av[i];
		if (a[0] == '-' && a[1] == '-') {
			const char *eq = strchr(a, '=');
			if ((curl && !strncmp(a, "--output", 8) && strncmp(a, "--output-", 9)) ||
			    (wget && !strncmp(a, "--output-document", 17)) || (aria && !strncmp(a, "--out", 5)))
				out = eq ? eq + 1 : i + 1 < ac ? av[++i] : NULL;
			else if (curl && !strncmp(a, "--remote-name", 13))
				remote_name = true;
			continue;
		}
		if (a[0] == '-' && a[1]) {
			for (const char *c = a + 1; *c; c++) {
				if ((curl && *c == 'o') || (wget && *c == 'O') || (aria && *c == 'o')) {
					out = c[1] ? c + 1 : i + 1 < ac ? av[++i] : NULL;
					break;
				}
				if (curl && *c == 'O')
					remote_name = true;
			}
			continue;
		}
		if (copy) {
			const char *colon = strchr(a, ':'), *slash = strchr(a, '/');
			if (colon && colon > a && (!slash || slash > colon)) {
				remote = true;
				remember(p->files, &p->nfiles, base_of(a), strlen(base_of(a)));
			} else if (remote || i == ac - 1) {
				out = a;
			}
		} else if (remote_name && (!out || strcmp(out, "-"))) {
			remember_url(p, a);
		}
	}
	if (copy && !remote)
		return;
	if (out && strcmp(out, "-") && strcmp(out, "/dev/stdout"))
		remember(p->files, &p->nfiles, out, strlen(out));
}

/* Does the interpreter's code (python3 -c CODE ...) fetch from the network? */
static bool code_fetches(const char *code)
{
	static const char *const marks[] = {
		"urlopen", "urllib.request", "requests.get", "http.client", "urlretrieve", "httpx.get", "LWP::",
		"HTTP::Tiny", "open-uri", "Net::HTTP", "https.get", "http.get(", "fetch(", "file_get_contents('http",
		"file_get_contents(\"http", "Invoke-WebRequest", "socket.create_connection", "IO::Socket",
	};

	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++)
		if (strstr(code, marks[k]))
			return true;
	return false;
}

/* Does the interpreter's code run text it reads (exec(sys.stdin.read()),
 * perl -ne 'system $_', awk '{print | "sh"}', .then(eval))? The words
 * count as words: "evaluation" is none. */
static bool code_runs(const char *code)
{
	static const char *const words[] = { "eval", "exec", "system", "popen", "spawn", "loadstring", "execSync" };
	static const char *const marks[] = { "subprocess", "child_process", "`", "runpy", "os.exec", "Function(" };

	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++)
		if (strstr(code, marks[k]))
			return true;
	for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		size_t n = strlen(words[k]);
		for (const char *w = strstr(code, words[k]); w; w = strstr(w + 1, words[k]))
			if ((w == code || !ident(w[-1])) && (!w[n] || strchr("( )\t;'\"", w[n])))
				return true;
	}
	for (const char *b = strchr(code, '|'); b; b = strchr(b + 1, '|')) {
		const char *c = b + 1;
		while (*c == ' ')
			c++;
		if (*c == '"' && (b == code || b[-1] != '|'))
			return true;            /* awk's print | "sh" */
	}
	return false;
}

/* Whether the interpreter NAME (a base name) is a shell: its -c is code,
 * its -o and -O take a value. */
static bool is_shell_name(const char *name)
{
	return glob_any("sh|bash|dash|zsh|ksh|mksh|ash|busybox|rbash|fish", name, strlen(name), false);
}

/* The code of "INTERPRETER ... -c CODE" (-e, -E, php's -r; a shell's -c
 * string), its index in *AT; NULL if the program is a file or stdin. */
static const char *code_arg(char *const av[], int ac, bool shell, int *at)
{
	for (int i = 1; i < ac; i++) {
		const char *a = av[i];
		if (a[0] != '-' || !a[1] || a[1] == '-')
			return NULL;
		for (const char *o = a + 1; *o; o++) {
			if (!shell && strchr("MIWXm", *o)) {
				if (o[1])
					break;          /* perl -MLWP::Simple: a value */
				if (*o == 'm')
					return NULL;    /* python3 -m MODULE: the program */
				i++;                    /* python3 -W ignore */
				break;
			}
			if (*o == 'c' || (!shell && strchr("eEr", *o))) {
				if (!shell && o[1]) {
					*at = i;
					return o + 1;
				}
				*at = i + 1;
				return i + 1 < ac ? av[i + 1] : NULL;
			}
			if (shell && strchr("oO", *o))
				i++;
		}
	}
	return NULL;
}

/* The script operand of an interpreter run without code ("bash i.sh"),
 * past the options and the values some of them take (python3 -W ignore,
 * bash -o posix, bash --rcfile F); NULL for python3 -m MODULE (a module,
 * no file named). */
static const char *script_arg(char *const av[], int ac, bool shell, int *at)
{
	for (int i = 1; i < ac; i++) {
		const char *a = av[i];
		if (!strcmp(a, "--")) {
			*at = i + 1;
			return i + 1 < ac ? av[i + 1] : NULL;
		}
		if (a[0] == '-' && a[1] == '-') {
			if (!strcmp(a, "--rcfile") || !strcmp(a, "--init-file"))
				i++;
			continue;
		}
		if (a[0] == '-' && a[1]) {
			for (const char *o = a + 1; *o; o++) {
				if (!shell && *o == 'm')
					return NULL;
				if (strchr(shell ? "oO" : "WXIM", *o)) {
					i += !o[1];     /* its value: the rest, or the next word */
					break;
				}
			}
			continue;
		}
		if (!strcmp(a, "run") && glob_any("deno|bun", base_of(av[0]), strlen(base_of(av[0])), false))
			continue;
		*at = i;
		return a;
	}
	return NULL;
}

static bool stdin_path(const char *w)
{
	return !strcmp(w, "-") || !strcmp(w, "/dev/stdin") || !strcmp(w, "/dev/fd/0") ||
	       !strcmp(w, "/proc/self/fd/0");
}

/* --- words and commands --------------------------------------------------------- */

static void end_word(struct sh *p)
{
	char *w = p->buf + p->word_start;

	if (!p->in_word)
		return;
	put(p, 0);
	p->in_word = false;
	if (p->want_delim) {
		size_t n = strlen(w);
		if (p->nhd < MAX_HEREDOC && n < sizeof(p->hd[0]))
			memcpy(p->hd[p->nhd++], w, n + 1);
		else
			p->hd_lost = true;
		p->want_delim = false;
	} else if (p->redirect) {
		if (p->redir_in && (p->cur_wf || fetched_file(p, w) || refs_var(p, w)))
			p->redir_fetch = true;  /* < <(curl URL), < FETCHED, <<< "$(curl URL)" */
		if (p->herestr) {
			p->in = w;
			p->in_n = strlen(w);
		}
		if (!p->redir_in && !p->redir_fd)
			p->redir_out = w;
	} else if (p->argc < MAXW) {
		p->argv[p->argc] = w;
		p->wf[p->argc++] = p->cur_wf;
		p->closed_self = false; /* (f) x &: a command's word after the group, not a redirection's */
	}
	p->redirect = p->redir_fd = p->herestr = false;
	p->cur_wf = 0;
}

static void start_word(struct sh *p)
{
	if (!p->in_word) {
		p->in_word = true;
		p->word_start = p->len;
	}
}

static bool one_of(const char *w, const char *list)
{
	size_t n = strlen(w);

	for (const char *l = list; *l; l += strlen(l) + 1)
		if (strlen(l) == n && !memcmp(l, w, n))
			return true;
	return false;
}

static bool is_assign(const char *a)
{
	const char *c = a;

	if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')))
		return false;
	while (*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))
		c++;
	return *c == '=' || (c[0] == '+' && c[1] == '=') || *c == '[';
}

/* Does the interpreter AV read its program from standard input? */
static bool reads_stdin(char *const av[], int ac)
{
	const char *name = pol_base(av[0]);
	bool shell = glob_any("sh|bash|dash|zsh|ksh|mksh|ash|busybox", name, strlen(name), false);
	bool runner = glob_any("deno|bun", name, strlen(name), false);

	for (int i = 1; i < ac; i++) {
		const char *a = av[i];
		if (!strcmp(a, "-") || !strcmp(a, "--") || (runner && !strcmp(a, "run")))
			continue;
		if ((a[0] == '-' || (shell && a[0] == '+')) && a[1]) {
			if (a[1] == '-')
				continue;
			if (strpbrk(a + 1, shell ? "c" : "cemE"))
				return false;
			if (shell && a[0] == '-' && strchr(a + 1, 's'))
				return true;    /* bash -s -- ARGS: the operands are its arguments */
			if (shell && strpbrk(a + 1, "oO"))
				i++;
			continue;
		}
		return stdin_path(a);   /* bash /dev/stdin */
	}
	return true;
}

static void open_compound(struct sh *p)
{
	bool fed = stage_fed(p);

	if (p->paren + 1 >= MAX_PAREN)
		return;
	p->saved_pipe[p->paren++] = p->pipe_fetch;
	p->group_fetch[p->paren] = false;
	p->self_call[p->paren] = false;
	p->fed[p->paren] = fed;
	p->pipe_fetch = p->after_pipe = false;
}

static void close_compound(struct sh *p)
{
	if (p->paren > 0) {
		bool f = p->group_fetch[p->paren], self = p->self_call[p->paren--];
		p->pipe_fetch = p->saved_pipe[p->paren];
		p->group_fetch[p->paren] |= f;
		p->last_fetch = f;
		while (p->nfuncs && p->func_depth[p->nfuncs - 1] >= p->paren)
			p->nfuncs--;            /* the body of NAME() { ... } ended */
		p->self_call[p->paren] |= self && p->nfuncs;
		p->closed_self = self && p->nfuncs;
	}
	p->after_pipe = false;
}

/* NAME() or function NAME: the body that follows is NAME's. A word with
 * '=' or '$' is no name (x=() is an empty array); with the table full, the
 * oldest name goes (one whose body never opened would stay otherwise). */
static void define_function(struct sh *p, const char *name, size_t n)
{
	if (!n || n >= sizeof(p->funcs[0]) || memchr(name, '=', n) || memchr(name, '$', n))
		return;
	if (p->nfuncs == MAX_NAMES) {
		memmove(p->funcs, p->funcs + 1, sizeof(p->funcs[0]) * (MAX_NAMES - 1));
		memmove(p->func_depth, p->func_depth + 1, sizeof(p->func_depth[0]) * (MAX_NAMES - 1));
		p->nfuncs--;
	}
	memcpy(p->funcs[p->nfuncs], name, n);
	p->funcs[p->nfuncs][n] = 0;
	p->guarded[p->nfuncs] = false;
	p->func_depth[p->nfuncs++] = p->paren;
}

/* A condition or a loop in the bodies being read (if, case, for, while,
 * &&, ||, test, return): recursion behind it ends (a tree walk piped to
 * sed, a countdown); a fork bomb has none. */
static void guard_bodies(struct sh *p)
{
	for (int i = 0; i < p->nfuncs; i++)
		if (p->paren > p->func_depth[i])
			p->guarded[i] = true;
}

/* Is NAME a call of a function from inside that function's body, with
 * no condition or loop before it there? */
static bool self_call(const struct sh *p, const char *name)
{
	for (int i = 0; i < p->nfuncs; i++)
		if (p->paren > p->func_depth[i] && !p->guarded[i] && !strcmp(p->funcs[i], name))
			return true;
	return false;
}

/* A call of NAME from the innermost function body being read, if that
 * body has no condition or loop so far. */
static void note_call(struct sh *p, const char *name)
{
	int f = p->nfuncs - 1;
	size_t n = strlen(name);

	if (f < 0 || p->paren <= p->func_depth[f] || p->guarded[f] || n >= sizeof(p->calls[0].to) ||
	    strlen(p->funcs[f]) >= sizeof(p->calls[0].from))
		return;
	if (p->ncalls == MAX_CALLS) {   /* the oldest goes */
		memmove(p->calls, p->calls + 1, sizeof(p->calls[0]) * (MAX_CALLS - 1));
		p->ncalls--;
	}
	memcpy(p->calls[p->ncalls].from, p->funcs[f], strlen(p->funcs[f]) + 1);
	memcpy(p->calls[p->ncalls].to, name, n + 1);
	p->calls[p->ncalls++].forks = p->after_pipe || p->end_op == OP_PIPE || p->background;
}

/* Does NAME reach TARGET through the calls noted (depth-first, at most
 * MAX_CALLS deep)? */
static bool reaches(const struct sh *p, const char *name, const char *target, int depth)
{
	if (!strcmp(name, target))
		return true;
	for (int i = 0; depth < MAX_CALLS && i < p->ncalls; i++)
		if (!strcmp(p->calls[i].from, name) && reaches(p, p->calls[i].to, target, depth + 1))
			return true;
	return false;
}

/* Functions that start each other in pipelines or in the background,
 * none behind a condition (a(){ b|b& }; b(){ a|a& }; a): a fork bomb. */
static bool mutual_bomb(const struct sh *p)
{
	for (int i = 0; i < p->ncalls; i++)
		if (p->calls[i].forks && reaches(p, p->calls[i].to, p->calls[i].from, 0))
			return true;
	return false;
}

/* A command NAME ... that calls a function from inside that function's
 * body, as a stage of a pipeline or in the background: each call starts
 * two processes that start two more (:(){ :|:& };:), or a chain that never
 * ends (f(){ f & }; f). Recursion run in the function's own process
 * (walk(){ ... walk "$d"; }) is not one. */
static bool fork_bomb(const struct sh *p, const char *name)
{
	if (!p->after_pipe && p->end_op != OP_PIPE && !p->background)
		return false;
	for (int i = 0; i < p->nfuncs; i++)
		if (p->paren > p->func_depth[i] && !p->guarded[i] && !strcmp(p->funcs[i], name))
			return true;
	return false;
}

/* The fetch-and-run checks of the simple command AV (after assignments
 * and reserved words). FED: its standard input is fetched code. *FETCHER:
 * its output is fetched code (curl URL, or cat FETCHED-FILE); *SINK: an
 * interpreter reading its program from standard input. */
static void check_fetch(struct sh *p, char **av, int ac, const uint8_t *wf, bool fed, bool *fetcher, bool *sink)
{
	const char *split, *name, *code, *script;
	int idx = pol_unwrap(av, ac, &split), at = -1;
	bool shell, xargs = false, on = p->pol->b->fetch_run;

	if (idx < 0)
		return;
	for (int k = 0; k < idx; k++) {
		if (strcmp(base_of(av[k]), "xargs"))
			continue;
		xargs = true;
		/* xargs -a FILE reads its lines from FILE: fed when fetched
		 * (-aFILE, -ra FILE, -I {} -a FILE: the options that take an
		 * argument are stepped over with it) */
		for (int j = k + 1; j < idx; j++) {
			const char *a = av[j], *f = NULL;
			int at = j;
			if (a[0] != '-' || !a[1])
				continue;
			if (a[1] == '-') {
				if (!strncmp(a, "--arg-file=", 11))
					f = a + 11;
				else if (!strcmp(a, "--arg-file") && j + 1 < idx)
					f = av[at = ++j];
			} else {
				for (const char *c = a + 1; *c; c++) {
					if (*c == 'a') {
						f = c[1] ? c + 1 : j + 1 < idx ? av[at = ++j] : NULL;
						break;
					}
					if (strchr("dEILnPs", *c)) {    /* its argument: the rest, or the next word */
						j += !c[1];
						break;
					}
					if (strchr("eil", *c))          /* an optional argument, attached */
						break;
				}
			}
			if (f && (wf[at] || fetched_file(p, f) || refs_var(p, f)))
				fed = true;
		}
	}
	av += idx, wf += idx, ac -= idx;
	name = pol_base(av[0]);
	/* script(1) hands its standard input to a shell on a terminal: its -c
	 * command's, or an interactive one's */
	if (on && fed && !strcmp(name, "script")) {
		const char *cmd = NULL, *why = NULL;
		for (int k = 1; k < ac && !cmd; k++) {
			const char *a = av[k];
			if (!strncmp(a, "--command=", 10))
				cmd = a + 10;
			else if (!strcmp(a, "--command"))
				cmd = k + 1 < ac ? av[k + 1] : "";
			else if (a[0] == '-' && a[1] && a[1] != '-')
				for (const char *c = a + 1; *c; c++) {
					if (*c == 'c') {        /* -qc CMD, -qcCMD */
						cmd = c[1] ? c + 1 : k + 1 < ac ? av[k + 1] : "";
						break;
					}
					if (strchr("EIOBTm", *c)) {
						k += !c[1];
						break;
					}
				}
		}
		if (!cmd || shell_in(p->pol, cmd, strlen(cmd), p->path_value, p->depth + 1, &why, NULL, true) == PV_DENY)
			deny(p, why ? why : fetch_why);
		return;
	}
	*fetcher = pol_is_fetcher(p->pol, name) ||
		   (!strcmp(name, "openssl") && ac > 1 && glob_any("s_client|s_time", av[1], strlen(av[1]), false));
	if (*fetcher || glob_any("scp|rsync|sftp", name, strlen(name), false))
		fetch_outputs(p, av, ac);
	/* a command that reads fetched text passes it on: cat i.sh | sh,
	 * echo "$V" | sh, and the first command inside a fed group */
	for (int k = 1; k < ac && !*fetcher; k++)
		*fetcher = (av[k][0] != '-' && fetched_file(p, av[k])) || refs_var(p, av[k]);
	if (on && ((strchr(av[0], '/') && fetched_file(p, av[0])) || refs_var(p, av[0]) || wf[0]))
		deny(p, fetch_why);     /* ./i.sh after curl -o i.sh URL, $V as a command */
	if (on && fed && !strcmp(name, "parallel")) {
		int k = 1;
		while (k < ac && av[k][0] == '-')
			k++;
		if (k == ac || !strcmp(av[k], "{}") || pol_is_interpreter(p->pol, pol_base(av[k])))
			deny(p, fetch_why);     /* curl URL | parallel: each line run */
	}
	if (on && fed && glob_any("awk|gawk|mawk|nawk|busybox", name, strlen(name), false))
		for (int k = 1; k < ac; k++)
			if (code_runs(av[k]))
				deny(p, fetch_why);     /* curl URL | awk '{system($0)}' */
	if (!pol_is_interpreter(p->pol, name)) {
		*fetcher |= fed;
		return;
	}
	shell = is_shell_name(name);
	code = code_arg(av, ac, shell, &at);
	*sink = !code && reads_stdin(av, ac);
	bool fetching = false;
	for (int k = 1; k < ac; k++)
		fetching |= code_fetches(av[k]);
	if (code && fetching)
		*fetcher = true;        /* python3 -c "...urlopen(URL)..." */
	if (on && code && fetching && code_runs(code))
		deny(p, fetch_why);     /* python3 -c "exec(urlopen(URL).read())" */
	*fetcher |= fed && !*sink;
	if (!on)
		return;
	if (code && at >= 0 && at < ac && (wf[at] || refs_var(p, code)))
		deny(p, fetch_why);     /* python3 -c "$(curl URL)", sh -c "$V" */
	if (!code && (script = script_arg(av, ac, shell, &at)) && (wf[at] || fetched_file(p, script)))
		deny(p, fetch_why);     /* bash <(curl URL), curl -o i.sh URL; bash i.sh */
	if ((fed || p->redir_fetch) && *sink)
		deny(p, fetch_why);     /* curl URL | sh */
	if (fed && code) {
		const char *why = NULL;
		if (xargs || (shell ? strchr(code, '$') != NULL : code_runs(code)))
			deny(p, fetch_why);     /* | xargs sh -c, | while read l; do sh -c "$l"; done */
		else if (shell && shell_in(p->pol, code, strlen(code), p->path_value, p->depth + 1, &why, NULL, true) ==
			 PV_DENY)
			deny(p, why);           /* curl URL | sh -c 'cat | sh' */
	}
	if (fed && xargs && !code)
		deny(p, fetch_why);             /* curl URL | xargs bash */
}

/* Where the line the reader is in ends: its here-documents' bodies start
 * after it. */
static size_t line_end(const struct sh *p)
{
	const char *nl = p->i < p->n ? memchr(p->s + p->i, '\n', p->n - p->i) : NULL;

	return nl ? (size_t)(nl - p->s) + 1 : p->n;
}

/* The body of here-document K that starts at S[BODY]: its length in *N,
 * up to the line that is its delimiter exactly (bash's test: "EOF\r" ends
 * only a delimiter that has the '\r' too), or to the end of the script, as
 * bash reads one that has none. Returns where the script goes on after it. */
static size_t heredoc_span(const struct sh *p, int k, size_t body, size_t *n)
{
	size_t e = body, dl = strlen(p->hd[k]);

	while (e < p->n) {
		const char *line = p->s + e, *end = memchr(line, '\n', p->n - e), *t = line;
		size_t ln = end ? (size_t)(end - line) : p->n - e;
		e += ln + (end != NULL);
		while (p->hd_strip[k] && t < line + ln && *t == '\t')
			t++;
		if (ln - (size_t)(t - line) == dl && !memcmp(t, p->hd[k], dl)) {
			*n = (size_t)(line - p->s) - body;
			return e;
		}
	}
	*n = p->n - body;
	return p->n;
}

/* The body of the line's here-document H (S[0..*N)), or NULL (an earlier
 * one of the line runs to the end of the script). */
static const char *heredoc_body(const struct sh *p, int h, size_t *n)
{
	size_t e = line_end(p);

	for (int k = 0; k < h && e < p->n; k++)
		e = heredoc_span(p, k, e, n);
	if (e >= p->n)
		return NULL;
	heredoc_span(p, h, e, n);
	return p->s + e;
}

/* The texts the command being read may get on its standard input, as the
 * script says (bash takes the last of its redirections; each is looked
 * at): its here-string, its here-documents, the rest of the script when
 * one of them could not be followed (too many, a delimiter too long), what
 * the stage before the pipe wrote. */
#define MAX_STDIN (MAX_HEREDOC + 3)
static int stdin_texts(const struct sh *p, const char *t[MAX_STDIN], size_t n[MAX_STDIN])
{
	int k = 0;

	if (p->in) {
		t[k] = p->in;
		n[k++] = p->in_n;
	}
	for (int h = p->nhd_cmd; h < p->nhd && k < MAX_STDIN; h++)
		if ((t[k] = heredoc_body(p, h, &n[k])))
			k++;
	if (p->hd_lost && k < MAX_STDIN) {
		size_t e = line_end(p);
		t[k] = p->s + e;
		n[k++] = p->n - e;
	}
	if (p->after_pipe && p->pin && k < MAX_STDIN) {
		t[k] = p->pin;
		n[k++] = p->pin_n;
	}
	return k;
}

/* Before the pipe: what echo or printf writes (its words), or what cat
 * passes on of its own standard input, for the next stage's stdin_texts. */
static void keep_piped(struct sh *p, int op)
{
	char *const *av = p->argv;
	int ac = p->argc, k = 0;
	const char *t[MAX_STDIN];
	size_t n[MAX_STDIN];

	p->pin = NULL;
	p->pin_n = 0;
	while (k < ac && is_assign(av[k]))
		k++;
	if (op != OP_PIPE || k >= ac)
		return;
	if (!strcmp(pol_base(av[k]), "cat")) {
		for (int j = k + 1; j < ac; j++)
			if (av[j][0] != '-' || !strcmp(av[j], "--"))
				return;         /* cat FILE: not its input */
		bool after = p->after_pipe;
		p->after_pipe = false;  /* its own input, not the stage before's */
		if (stdin_texts(p, t, n) > 0) {
			p->pin = t[0];
			p->pin_n = n[0];
			if (t[0] == p->in) {    /* a word of BUF, which the next command reuses */
				p->pin_n = n[0] < sizeof(p->piped) ? n[0] : sizeof(p->piped);
				memcpy(p->piped, t[0], p->pin_n);
				p->pin = p->piped;
			}
		}
		p->after_pipe = after;
		return;
	}
	if (!one_of(pol_base(av[k]), "echo\0printf\0"))
		return;
	p->piped_n = 0;
	for (k++; k < ac && p->piped_n + 2 < sizeof(p->piped); k++) {
		size_t w = strlen(av[k]);
		if (w > sizeof(p->piped) - p->piped_n - 2)
			w = sizeof(p->piped) - p->piped_n - 2;
		memcpy(p->piped + p->piped_n, av[k], w);
		p->piped_n += w;
		p->piped[p->piped_n++] = ' ';
	}
	p->pin = p->piped;
	p->pin_n = p->piped_n;
}

static void command(struct sh *p)
{
	char **av = p->argv;
	const uint8_t *wf = p->wf;
	int ac = p->argc;
	bool fetcher = false, sink = false, fed, on = p->pol->b->fetch_run, bypass = false;

	p->last_fetch = false;
	/* assignments, reserved words, builtins that run their arguments */
	while (ac && (is_assign(av[0]) || one_of(av[0], "if\0then\0else\0elif\0fi\0do\0done\0while\0until\0"
						 "!\0{\0}\0time\0esac\0coproc\0exec\0builtin\0nohup\0"))) {
		if (is_assign(av[0]) && wf[0])
			remember_var(p, av[0]);                 /* V=$(curl URL) */
		else if (one_of(av[0], "if\0while\0until\0{\0"))
			open_compound(p);
		if (one_of(av[0], "if\0while\0until\0"))
			guard_bodies(p);
		else if (one_of(av[0], "fi\0done\0}\0esac\0"))
			close_compound(p);
		av++, wf++, ac--;
		bypass |= one_of(av[-1], "exec\0builtin\0nohup\0");
		while (ac && !strcmp(av[-1], "exec") && av[0][0] == '-') {
			int skip = !strcmp(av[0], "-a") && ac > 1 ? 2 : 1;
			av += skip, wf += skip, ac -= skip;
		}
	}
	if (ac && !strcmp(av[0], "command")) {
		if (ac > 1 && (!strcmp(av[1], "-v") || !strcmp(av[1], "-V")))
			return;
		av++, wf++, ac--;
		bypass = true;
	}
	if (ac && one_of(av[0], "export\0local\0declare\0typeset\0readonly\0"))
		for (int k = 1; k < ac; k++)
			if (is_assign(av[k]) && wf[k])
				remember_var(p, av[k]);
	if (ac && one_of(av[0], "for\0case\0select\0"))
		open_compound(p);
	if (ac && one_of(av[0], "for\0case\0select\0return\0exit\0test\0[\0[[\0"))
		guard_bodies(p);
	if (ac > 1 && !strcmp(av[0], "function")) {     /* function NAME { BODY } */
		define_function(p, av[1], strcspn(av[1], "("));
		if (ac < 3 || strcmp(av[2], "{"))
			return;
		open_compound(p);
		av += 3, wf += 3, ac -= 3;
	}
	if (!ac && p->closed_self && (p->end_op == OP_PIPE || p->background))
		deny(p, bomb_why);      /* { f; } | ..., { f; } & in f's body */
	if (!ac || one_of(av[0], "for\0case\0select\0function\0[[\0((\0"))
		return;
	/* command, builtin, exec and nohup run no function: a wrapper
	 * function of the same name (git(){ command git "$@" | cat; }) is
	 * not calling itself */
	if (!bypass && fork_bomb(p, av[0])) {
		deny(p, bomb_why);
		return;
	}
	if (!bypass && self_call(p, av[0]))
		p->self_call[p->paren] = true;
	if (!bypass)
		note_call(p, av[0]);
	fed = stage_fed(p);
	if (one_of(av[0], "eval\0source\0.\0")) {
		for (int k = 1; k < ac; k++) {
			if (on && (wf[k] || refs_var(p, av[k]) || (av[0][0] != 'e' && fetched_file(p, av[k])) ||
				   (fed && av[0][0] == 'e' && strchr(av[k], '$')) ||
				   ((fed || p->redir_fetch) && av[0][0] != 'e' && stdin_path(av[k]))))
				deny(p, fetch_why);     /* eval "$(curl URL)", source i.sh, | while read l; do eval "$l" */
			if (av[0][0] == 'e')
				nested(p, av[k], strlen(av[k]));
		}
		return;
	}
	check_fetch(p, av, ac, wf, fed, &fetcher, &sink);
	if (p->deny)
		return;
	if (p->redir_out && (fetcher || fed))
		remember(p->files, &p->nfiles, p->redir_out, strlen(p->redir_out));   /* curl URL > i.sh */
	if (fed && !strcmp(pol_base(av[0]), "tee"))
		for (int k = 1; k < ac; k++)
			if (av[k][0] != '-')
				remember(p->files, &p->nfiles, av[k], strlen(av[k]));
	const char *why = NULL, *in[MAX_STDIN];
	size_t in_n[MAX_STDIN];
	int nin = stdin_texts(p, in, in_n);
	av[ac] = NULL;
	for (int k = 0; k < (nin ? nin : 1) && !p->deny; k++)
		if (pol_exec_argv(p->pol, NULL, av, p->path_value, p->depth + 1, &why, nin ? in[k] : NULL,
				  nin ? in_n[k] : 0) == PV_DENY)
			deny(p, why);
	p->last_fetch = fetcher;
	p->group_fetch[p->paren] |= fetcher;
	p->fetches |= fetcher;
	p->hd_shell |= p->nhd && sink;
}

/* At '&' or '|' right after a group that calls the function it is in
 * (f(){ (f) & (f) & }, f(){ { f; } | { f; } }): a fork bomb as well. */
static void group_bomb(struct sh *p)
{
	end_word(p);
	if (p->closed_self && !p->argc && p->background)
		deny(p, bomb_why);
}

static void end_command(struct sh *p, int op)
{
	end_word(p);
	p->end_op = op;
	if (p->argc && !p->deny)
		command(p);
	p->background = false;
	keep_piped(p, op);
	p->in = NULL;
	p->nhd_cmd = p->nhd;
	p->argc = 0;
	p->len = 0;
	p->redirect = p->redir_fetch = p->redir_fd = false;
	p->redir_out = NULL;
	switch (op) {
	case OP_PIPE:
		p->pipe_fetch |= p->last_fetch;
		p->after_pipe = true;
		break;
	case OP_SEP:
		p->pipe_fetch = p->after_pipe = false;
		break;
	case OP_OPEN:
		open_compound(p);
		break;
	case OP_CLOSE:
		close_compound(p);
		break;
	}
}

/* At a newline: skip the bodies of the here-documents of the line. */
static void heredocs(struct sh *p)
{
	for (int h = 0; h < p->nhd && p->i < p->n; h++) {
		size_t n, e = heredoc_span(p, h, p->i, &n);
		if (p->hd_shell)
			nested(p, p->s + p->i, n);      /* bash <<EOF, up to the end if it has no delimiter */
		p->i = e;
	}
	p->nhd = p->nhd_cmd = 0;
	p->hd_shell = p->hd_lost = false;
}

static void redirection(struct sh *p)
{
	const char *s = p->s;
	size_t i = p->i;
	bool in = s[i] == '<';

	/* a word of digits just before is the file descriptor: not an argument */
	if (p->in_word) {
		const char *w = p->buf + p->word_start;
		size_t k = 0, wn = p->len - p->word_start;
		while (k < wn && w[k] >= '0' && w[k] <= '9')
			k++;
		if (k == wn) {
			p->redir_fd = !(wn == 1 && w[0] == '1');
			p->len = p->word_start;
			p->in_word = false;
		}
	}
	end_word(p);
	if (in && i + 2 < p->n && s[i + 1] == '<' && s[i + 2] != '<') {
		p->want_delim = true;
		p->hd_strip[p->nhd < MAX_HEREDOC ? p->nhd : 0] = s[i + 2] == '-';
		i += 2 + (s[i + 2] == '-');
	} else {
		p->herestr = in && i + 2 < p->n && s[i + 1] == '<' && s[i + 2] == '<';
		while (i < p->n && strchr("<>&|", s[i]))
			i++;
		p->redirect = true;
		p->redir_in = in;
		p->redir_fd |= s[i - 1] == '&' && i - p->i == 2 && !in;     /* >&2 */
	}
	p->i = i;
}

static void run(struct sh *p)
{
	const char *s = p->s;

	while (p->i < p->n && !p->deny) {
		char c = s[p->i];
		if (!p->in_word && c == '#') {
			while (p->i < p->n && s[p->i] != '\n')
				p->i++;
			continue;
		}
		switch (c) {
		case ' ':
		case '\t':
			end_word(p);
			p->i++;
			break;
		case '\n':
			end_command(p, OP_SEP);
			p->i++;
			heredocs(p);
			break;
		case ';':
			end_command(p, OP_SEP);
			p->i += 1 + (p->i + 1 < p->n && (s[p->i + 1] == ';' || s[p->i + 1] == '&'));
			break;
		case '&':
			if (p->i + 1 < p->n && s[p->i + 1] == '>') {
				redirection(p);
				break;
			}
			if (p->i + 1 < p->n && s[p->i + 1] == '&')
				guard_bodies(p);        /* cond && ... */
			p->background = !(p->i + 1 < p->n && s[p->i + 1] == '&');
			group_bomb(p);
			end_command(p, OP_SEP);
			p->i += 1 + (p->i + 1 < p->n && s[p->i + 1] == '&');
			break;
		case '|':
			if (p->i + 1 < p->n && s[p->i + 1] == '|') {
				guard_bodies(p);        /* cond || ... */
				end_command(p, OP_SEP);
				p->i += 2;
			} else {
				p->background = true;   /* (as a stage: its own process) */
				group_bomb(p);
				p->background = false;
				end_command(p, OP_PIPE);
				p->i += 1 + (p->i + 1 < p->n && s[p->i + 1] == '&');
			}
			break;
		case '(':
			if (p->in_word && p->i + 1 < p->n && s[p->i + 1] == ')') {
				p->in_word = false;     /* NAME() { ...: a function */
				define_function(p, p->buf + p->word_start, p->len - p->word_start);
				p->argc = 0;
				p->i += 2;
			} else if (!p->in_word && p->argc == 1 && p->i + 1 < p->n && s[p->i + 1] == ')') {
				define_function(p, p->argv[0], strlen(p->argv[0]));    /* NAME () { ... */
				p->argc = 0;
				p->len = 0;
				p->i += 2;
			} else if (p->in_word) {        /* arr=(a b) */
				size_t e = find_close(s, p->i + 1, p->n);
				put_span(p, p->i, e < p->n ? e + 1 : p->n);
				p->i = e < p->n ? e + 1 : p->n;
			} else {
				end_command(p, OP_OPEN);
				p->i++;
			}
			break;
		case ')':
			end_command(p, OP_CLOSE);
			p->i++;
			break;
		case '<':
		case '>':
			if (p->i + 1 < p->n && s[p->i + 1] == '(') {   /* <(...) >(...) */
				size_t e = find_close(s, p->i + 2, p->n);
				/* >(sh) reads what the command writes: fetched code
				 * if the command fetches it or passes it on */
				bool fed = c == '>' && (stage_fed(p) || fetcher_so_far(p));
				start_word(p);
				substitution(p, p->i + 2, e, e < p->n ? e + 1 : p->n, WF_PROCFETCH, fed);
			} else {
				redirection(p);
			}
			break;
		case '\'': {
			const char *q = memchr(s + p->i + 1, '\'', p->n - p->i - 1);
			size_t e = q ? (size_t)(q - s) : p->n;
			start_word(p);
			put_span(p, p->i + 1, e);
			p->i = e < p->n ? e + 1 : p->n;
			break;
		}
		case '"':
			start_word(p);
			dquote(p);
			break;
		case '\\':
			if (p->i + 1 < p->n && s[p->i + 1] == '\n') {
				p->i += 2;
				break;
			}
			start_word(p);
			if (p->i + 1 < p->n)
				put(p, s[p->i + 1]);
			p->i += p->i + 1 < p->n ? 2 : 1;
			break;
		case '$':
			start_word(p);
			dollar(p);
			break;
		case '`':
			start_word(p);
			backtick(p);
			break;
		default:
			start_word(p);
			put(p, c);
			p->i++;
		}
	}
	end_command(p, OP_SEP);
}

static enum pverdict shell_in(const struct policy *pol, const char *script, size_t len, const char *path_value,
			      int depth, const char **why, bool *fetches, bool fed)
{
	char stack[STACK_BUF];
	size_t cap = 2 * len + 16;
	struct sh p = { .pol = pol, .path_value = path_value, .depth = depth, .s = script, .n = len };

	*why = NULL;
	p.fed[0] = fed;
	if (depth > MAX_NEST) {
		*why = "commands nested too deeply to check";
		return PV_DENY;
	}
	p.buf = cap <= sizeof(stack) ? stack : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
						    -1, 0);
	if (p.buf == MAP_FAILED) {
		*why = "out of memory checking a shell string";
		return PV_DENY;
	}
	run(&p);
	if (!p.deny && p.ncalls && mutual_bomb(&p))
		deny(&p, bomb_why);
	if (p.buf != stack)
		munmap(p.buf, cap);
	if (fetches)
		*fetches = p.fetches;
	*why = p.deny ? p.why : NULL;
	return p.deny ? PV_DENY : PV_ALLOW;
}

enum pverdict pol_shell(const struct policy *pol, const char *script, size_t len, const char *path_value,
			int depth, const char **why, bool *fetches)
{
	return shell_in(pol, script, len, path_value, depth, why, fetches, false);
}

int pol_script_at(const struct policy *pol, char *const av[], int ac)
{
	const char *name = base_of(av[0]);
	bool shell;
	int at = -1;

	if (!pol_is_interpreter(pol, name) || !strcmp(name, "busybox"))
		return 0;       /* busybox sh: the wrapper is seen through first */
	shell = is_shell_name(name);
	if (code_arg(av, ac, shell, &at) || reads_stdin(av, ac) || !script_arg(av, ac, shell, &at) || at <= 0 ||
	    at >= ac)
		return 0;
	/* an installed command (gcloud, aws, terraform's wrapper) has no
	 * '.' in its name and is named by its full path ($(command -v
	 * gcloud)) or found through PATH; a script of one's own (mkfs.sh,
	 * fsck.py, ./init, scripts/init, init in the current directory) is
	 * no program a rule names */
	const char *sc = av[at];
	if (strchr(base_of(sc), '.') || (sc[0] != '/' && (strchr(sc, '/') || access(sc, F_OK) == 0)))
		return 0;
	return at;
}

/* --- one process of a pipeline (policy.h) --------------------------------------- */

/* The program an exec runs, through its wrappers, as policy_stream_role
 * and policy_script_of see it: *AV and *AC its words, *NAME its base name.
 * False when fetch-and-run is allowed, or a wrapper splits a command line. */
static bool run_program(const struct policy *pol, const char *file, char *const argv[], char *const **av, int *ac,
			const char **name)
{
	const char *split;
	int n = 0, idx;

	if (!pol->b->fetch_run || !argv || !argv[0])
		return false;
	while (argv[n])
		n++;
	idx = pol_unwrap(argv, n, &split);
	if (idx < 0 || split)
		return false;
	*av = argv + idx;
	*ac = n - idx;
	*name = pol_base(idx == 0 && file ? file : argv[idx]);
	return true;
}

int policy_stream_role(const struct policy *pol, const char *file, char *const argv[], int *fd)
{
	const char *name, *script;
	char *const *av;
	int ac, at = -1;
	bool shell;

	*fd = -1;
	if (!pol_part(pol, P_EXEC))
		return PS_NONE;         /* (its exec is refused: policy_exec) */
	if (!run_program(pol, file, argv, &av, &ac, &name))
		return PS_NONE;
	if (pol_is_fetcher(pol, name)) {
		*fd = 1;
		return PS_FETCHER;
	}
	if (!pol_is_interpreter(pol, name))
		return PS_NONE;
	shell = is_shell_name(name);
	if (code_arg(av, ac, shell, &at))
		return PS_NONE;
	if (reads_stdin(av, ac)) {
		*fd = 0;
		return PS_RUNS;
	}
	script = script_arg(av, ac, shell, &at);
	if (script && stdin_path(script)) {
		*fd = 0;
		return PS_RUNS;
	}
	if (script && (!strncmp(script, "/dev/fd/", 8) || !strncmp(script, "/proc/self/fd/", 14))) {
		const char *n = strrchr(script, '/') + 1;
		int v = 0;
		for (; *n >= '0' && *n <= '9' && v < 1 << 20; n++)
			v = v * 10 + (*n - '0');
		if (!*n && n[-1] != '/') {
			*fd = v;
			return PS_RUNS;
		}
	}
	return PS_NONE;
}

const char *policy_script_of(const struct policy *pol, const char *file, char *const argv[])
{
	const char *name, *script;
	char *const *av;
	int ac, at = -1;
	bool shell;

	if (!pol_part(pol, P_EXEC))
		return NULL;            /* (its exec is refused: policy_exec) */

	if (!run_program(pol, file, argv, &av, &ac, &name) || !pol_is_interpreter(pol, name))
		return NULL;
	shell = is_shell_name(name);
	if (code_arg(av, ac, shell, &at) || reads_stdin(av, ac))
		return NULL;
	script = script_arg(av, ac, shell, &at);
	return script && !stdin_path(script) && strncmp(script, "/dev/fd/", 8) && strncmp(script, "/proc/self/fd/", 14)
		       ? script : NULL;
}
