/*
 * shell.c - what an sh -c / bash -c string would run. The string is read
 * the way a shell reads it (quotes, escapes, comments, ; && || | & and
 * newlines, ( ) groups, redirections and here-documents, $(...), `...`,
 * <(...)), closely enough to find its simple commands; each is checked as
 * an exec (exec.c: wrappers, [commands] rules, nested sh -c), and the
 * string as a whole is checked for fetch-and-run: code fetched by curl or
 * wget and handed to an interpreter, through a pipe (curl URL | sh), a
 * process substitution (bash <(curl URL)) or a command substitution
 * (sh -c "$(curl URL)", eval "$(wget -O- URL)").
 *
 * Words are taken literally: $VAR and globs are not expanded (the exec of
 * each program is checked again, with its real argv, when it happens). No
 * allocation: the words of a command go into a stack buffer, or an mmap'd
 * one for a long string.
 */
#include <string.h>
#include <sys/mman.h>
#include "internal.h"

#define MAXW            256
#define STACK_BUF       4096
#define MAX_PAREN       32
#define MAX_HEREDOC     4
#define MAX_NEST        8

enum { WF_FETCHSUB = 1, WF_PROCFETCH = 2 };     /* word flags */
enum { OP_SEP, OP_PIPE, OP_OPEN, OP_CLOSE };

static const char fetch_why[] = "fetch-and-run: code fetched from the network is run by an interpreter";

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
	bool in_word, redirect, redir_in, redir_fetch, want_delim;
	uint8_t cur_wf;
	size_t word_start;
	/* here-documents waiting for the end of the line */
	int nhd;
	char hd[MAX_HEREDOC][64];
	bool hd_strip[MAX_HEREDOC], hd_shell;
	/* pipelines and ( ) groups */
	bool pipe_fetch, last_fetch;
	int paren;
	bool group_fetch[MAX_PAREN], saved_pipe[MAX_PAREN];
};

static void deny(struct sh *p, const char *why)
{
	if (!p->deny) {
		p->deny = true;
		p->why = why;
	}
}

/* Check the nested script S[0..N) ($(...), `...`, <(...), a here-doc);
 * true if it runs a fetcher. */
static bool nested(struct sh *p, const char *s, size_t n)
{
	const char *why = NULL;
	bool fetches = false;

	if (p->deny)
		return false;
	if (pol_shell(p->pol, s, n, p->path_value, p->depth + 1, &why, &fetches) == PV_DENY)
		deny(p, why);
	p->fetches |= fetches;
	return fetches;
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
static void substitution(struct sh *p, size_t b, size_t e, size_t end, uint8_t flag)
{
	put_span(p, p->i, end);
	if (nested(p, p->s + b, e - b))
		p->cur_wf |= flag;
	p->i = end;
}

static void dollar(struct sh *p)
{
	const char *s = p->s;
	size_t i = p->i, n = p->n, e;

	if (i + 1 < n && s[i + 1] == '(' && !(i + 2 < n && s[i + 2] == '(')) {
		e = find_close(s, i + 2, n);
		substitution(p, i + 2, e, e < n ? e + 1 : n, WF_FETCHSUB);
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
	substitution(p, p->i + 1, e, e < p->n ? e + 1 : p->n, WF_FETCHSUB);
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
	p->i++;
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
		p->want_delim = false;
	} else if (p->redirect) {
		if (p->redir_in && (p->cur_wf & WF_PROCFETCH))
			p->redir_fetch = true;
	} else if (p->argc < MAXW) {
		p->argv[p->argc] = w;
		p->wf[p->argc++] = p->cur_wf;
	}
	p->redirect = false;
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

	for (int i = 1; i < ac; i++) {
		const char *a = av[i];
		if (!strcmp(a, "-") || !strcmp(a, "--"))
			continue;
		if ((a[0] == '-' || (shell && a[0] == '+')) && a[1]) {
			if (a[1] == '-')
				continue;
			if (strpbrk(a + 1, shell ? "c" : "cemE"))
				return false;
			if (shell && strpbrk(a + 1, "oO"))
				i++;
			continue;
		}
		return false;
	}
	return true;
}

static void check_fetch(struct sh *p, char **av, int ac, const uint8_t *wf, bool *fetcher, bool *sink)
{
	const char *split, *name;
	int idx = pol_unwrap(av, ac, &split);
	bool subs = false;

	if (idx < 0)
		return;
	for (int k = idx + 1; k < ac; k++)
		subs |= wf[k] != 0;
	name = pol_base(av[idx]);
	*fetcher = pol_is_fetcher(p->pol, name);
	if (!pol_is_interpreter(p->pol, name))
		return;
	*sink = reads_stdin(av + idx, ac - idx);
	if (!p->pol->b->fetch_run)
		return;
	if (subs || ((p->pipe_fetch || p->redir_fetch) && *sink))
		deny(p, fetch_why);
}

static void command(struct sh *p)
{
	char **av = p->argv;
	const uint8_t *wf = p->wf;
	int ac = p->argc;
	bool fetcher = false, sink = false;

	/* assignments, reserved words, builtins that run their arguments */
	while (ac && (is_assign(av[0]) || one_of(av[0], "if\0then\0else\0elif\0fi\0do\0done\0while\0until\0"
						 "!\0{\0}\0time\0esac\0coproc\0exec\0builtin\0nohup\0"))) {
		av++, wf++, ac--;
		while (ac && !strcmp(av[-1], "exec") && av[0][0] == '-') {
			int skip = !strcmp(av[0], "-a") && ac > 1 ? 2 : 1;
			av += skip, wf += skip, ac -= skip;
		}
	}
	if (ac && !strcmp(av[0], "command")) {
		if (ac > 1 && (!strcmp(av[1], "-v") || !strcmp(av[1], "-V")))
			return;
		av++, wf++, ac--;
	}
	if (!ac || one_of(av[0], "for\0case\0select\0function\0[[\0((\0"))
		return;
	if (wf[0] & WF_FETCHSUB && p->pol->b->fetch_run)
		deny(p, fetch_why);             /* $(curl URL) run as a command */
	if (one_of(av[0], "eval\0source\0.\0")) {
		for (int k = 1; k < ac; k++) {
			if (wf[k] && p->pol->b->fetch_run)
				deny(p, fetch_why);
			if (av[0][0] == 'e')
				nested(p, av[k], strlen(av[k]));
		}
		return;
	}
	check_fetch(p, av, ac, wf, &fetcher, &sink);
	if (p->deny)
		return;
	const char *why = NULL;
	av[ac] = NULL;
	if (pol_exec_argv(p->pol, NULL, av, p->path_value, p->depth + 1, &why) == PV_DENY)
		deny(p, why);
	p->last_fetch = fetcher;
	p->group_fetch[p->paren] |= fetcher;
	p->fetches |= fetcher;
	p->hd_shell |= p->nhd && sink;
}

static void end_command(struct sh *p, int op)
{
	end_word(p);
	if (p->argc && !p->deny)
		command(p);
	p->argc = 0;
	p->len = 0;
	p->redirect = p->redir_fetch = false;
	switch (op) {
	case OP_PIPE:
		p->pipe_fetch |= p->last_fetch;
		break;
	case OP_SEP:
		p->pipe_fetch = false;
		break;
	case OP_OPEN:
		if (p->paren + 1 < MAX_PAREN) {
			p->saved_pipe[p->paren++] = p->pipe_fetch;
			p->group_fetch[p->paren] = false;
		}
		p->pipe_fetch = false;
		break;
	case OP_CLOSE:
		if (p->paren > 0) {
			bool f = p->group_fetch[p->paren--];
			p->pipe_fetch = p->saved_pipe[p->paren];
			p->group_fetch[p->paren] |= f;
			p->last_fetch = f;
		}
		break;
	}
}

/* At a newline: skip the bodies of the here-documents of the line. */
static void heredocs(struct sh *p)
{
	for (int h = 0; h < p->nhd; h++) {
		size_t body = p->i, e = p->i;
		while (e < p->n) {
			const char *line = p->s + e, *nl = memchr(line, '\n', p->n - e);
			size_t ln = nl ? (size_t)(nl - line) : p->n - e;
			const char *t = line;
			while (p->hd_strip[h] && *t == '\t' && t < line + ln)
				t++;
			size_t tn = ln - (size_t)(t - line);
			e += ln + (nl != NULL);
			if (tn == strlen(p->hd[h]) && !memcmp(t, p->hd[h], tn)) {
				if (p->hd_shell)
					nested(p, p->s + body, (size_t)(line - p->s) - body);
				break;
			}
		}
		p->i = e;
	}
	p->nhd = 0;
	p->hd_shell = false;
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
		while (i < p->n && strchr("<>&|", s[i]))
			i++;
		p->redirect = true;
		p->redir_in = in;
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
			end_command(p, OP_SEP);
			p->i += 1 + (p->i + 1 < p->n && s[p->i + 1] == '&');
			break;
		case '|':
			if (p->i + 1 < p->n && s[p->i + 1] == '|') {
				end_command(p, OP_SEP);
				p->i += 2;
			} else {
				end_command(p, OP_PIPE);
				p->i += 1 + (p->i + 1 < p->n && s[p->i + 1] == '&');
			}
			break;
		case '(':
			if (p->in_word && p->i + 1 < p->n && s[p->i + 1] == ')') {
				p->in_word = false;     /* NAME() { ...: a function */
				p->argc = 0;
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
				start_word(p);
				substitution(p, p->i + 2, e, e < p->n ? e + 1 : p->n, WF_PROCFETCH);
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
			p->i += 2;
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

enum pverdict pol_shell(const struct policy *pol, const char *script, size_t len, const char *path_value,
			int depth, const char **why, bool *fetches)
{
	char stack[STACK_BUF];
	size_t cap = 2 * len + 16;
	struct sh p = { .pol = pol, .path_value = path_value, .depth = depth, .s = script, .n = len };

	*why = NULL;
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
	if (p.buf != stack)
		munmap(p.buf, cap);
	if (fetches)
		*fetches = p.fetches;
	*why = p.deny ? p.why : NULL;
	return p.deny ? PV_DENY : PV_ALLOW;
}
