/*
 * policy_unit.c - the policy engine's unit tests (cmocka): every key of the
 * language and its effect on a decision, every error with its line number,
 * the compiled block (round trip, damage refused), the exec matcher (flag
 * spellings, wrappers, PATH and symlinks, sh -c strings, fetch-and-run),
 * and the cost of the hot path. Policies are written to files under a
 * mktemp -d directory that the tests remove.
 */
#include <errno.h>
#include <fnmatch.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "../policy/policy.h"
#include "../policy/internal.h"

static char dir[] = "/tmp/ftsbx-policy-unit-XXXXXX";
static char file[PATH_MAX];
static char err[1024], err2[1024];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Load TEXT as a policy file; NULL (with err set) on failure. */
static struct policy *load(const char *text)
{
	struct policy *pol = NULL;

	write_file(file, text);
	err[0] = 0;
	if (policy_load(&pol, file, err, sizeof(err)))
		return NULL;
	return pol;
}

/* TEXT fails at LINE with a message containing WHAT. */
static void fails(const char *text, int line, const char *what)
{
	char want[PATH_MAX + 32];

	assert_null(load(text));
	snprintf(want, sizeof(want), "%s:%d: ", file, line);
	if (strncmp(err, want, strlen(want)) || !strstr(err, what))
		fail_msg("policy %s\nerror:    %s\nexpected: %s... %s", text, err, want, what);
}

static enum pverdict ex(const struct policy *pol, const char *const *argv)
{
	const char *why;

	return policy_exec(pol, NULL, (char *const *)argv, "/usr/bin:/bin", &why);
}

#define EXEC(pol, ...) ex(pol, (const char *const[]){ __VA_ARGS__, NULL })

/* A table of command lines and what the policy must say of each. */
struct exec_case {
	enum pverdict want;
	const char *argv[16];
};

static void expect_execs(const struct policy *pol, const struct exec_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ex(pol, c[i].argv) != c[i].want)
			fail_msg("%s: %s %s %s %s %s ...", c[i].want == PV_DENY ? "not refused" : "refused", c[i].argv[0],
				 c[i].argv[1] ? c[i].argv[1] : "", c[i].argv[1] && c[i].argv[2] ? c[i].argv[2] : "",
				 c[i].argv[1] && c[i].argv[2] && c[i].argv[3] ? c[i].argv[3] : "",
				 c[i].argv[1] && c[i].argv[2] && c[i].argv[3] && c[i].argv[4] ? c[i].argv[4] : "");
}

static enum pverdict sh(const struct policy *pol, const char *script)
{
	return EXEC(pol, "bash", "-c", script);
}

/* Each of the N scripts REFUSED is refused as bash -c, each of the M ALLOWED
 * let through; the first that is not fails the test, named. */
static void expect_shells(const struct policy *pol, const char *const *refused, size_t n,
			  const char *const *allowed, size_t m)
{
	for (size_t i = 0; i < n; i++)
		if (sh(pol, refused[i]) != PV_DENY)
			fail_msg("not refused: %s", refused[i]);
	for (size_t i = 0; i < m; i++)
		if (sh(pol, allowed[i]) != PV_ALLOW)
			fail_msg("refused: %s", allowed[i]);
}

static enum pverdict path(const struct policy *pol, const char *p, bool write)
{
	const char *why;

	return policy_path(pol, p, write, &why);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(file, sizeof(file), "%s/p.ini", dir);
	setenv("HOME", "/home/u", 1);
	setenv("FTSBX_WORKSPACE", "/w/ws", 1);
	setenv("TMPDIR", "/w/tmp", 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

/* --- errors, each with its line -------------------------------------------------------- */

static void test_error_unknown_section(void **state)
{
	(void)state;
	fails("[policy]\nmode = audit\n\n[bogus]\n", 4, "unknown section [bogus]");
}

static void test_error_unknown_key(void **state)
{
	(void)state;
	fails("[policy]\nmode = audit\nmood = happy\n", 3, "unknown key 'mood' in [policy]");
	fails("[paths]\nwriteable = /x\n", 2, "unknown key 'writeable' in [paths]");
	fails("[network]\nblock = 1.2.3.4\n", 2, "unknown key 'block'");
	fails("[rewind]\nexcept = make\nonfailure = none\n", 3, "unknown key 'onfailure'");
	fails("[fetch-and-run]\nfetcher = curl\n", 2, "unknown key 'fetcher'");
	fails("[programs]\nelf = warn\n", 2, "unknown key 'elf'");
}

static void test_error_key_outside_section(void **state)
{
	(void)state;
	fails("# comment\nmode = audit\n", 2, "outside any section");
}

static void test_error_bad_values(void **state)
{
	static const struct { const char *text, *what; } cases[] = {
		{ "[policy]\nmode = enforcing\n", "bad value 'enforcing' for mode (expected enforce/audit/off)" },
		{ "[policy]\ndurability = disk\n", "for durability" },
		{ "[policy]\nlandlock = yes\n", "for landlock" },
		{ "[policy]\nsignals = none\n", "for signals" },
		{ "[programs]\nstatic = allow\n", "for static" },
		{ "[programs]\nsetuid = ok\n", "for setuid" },
		{ "[programs]\ngo = no\n", "for go" },
		{ "[programs]\nldso = 1\n", "for ldso" },
		{ "[fetch-and-run]\naction = warn\n", "for action" },
		{ "[network]\ndefault = local\n", "for default" },
		{ "[network]\nrecord = maybe\n", "for record" },
		{ "[rewind]\non_failure = nonzero crash\n", "bad value 'crash' for on_failure" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		fails(cases[i].text, 2, cases[i].what);
}

static void test_error_paths(void **state)
{
	(void)state;
	fails("[paths]\n\nworkspace = relative/dir\n", 3, "is not an absolute path");
	fails("[paths]\nwritable = build\n", 2, "writable root 'build' is not an absolute path");
	fails("[paths]\nhidden = ~/.ssh\nhidden = $NOPE_NOT_SET/x\n", 3, "$NOPE_NOT_SET is not set");
	fails("[paths]\nhidden = ${HOME/x\n", 2, "unterminated ${");
	fails("[paths]\nprotected = /a/[bc\n", 2, "unclosed [");
	fails("[paths]\nuntracked = /a||/b\n", 2, "empty alternative");
	fails("[paths]\nhidden = $\n", 2, "bad variable reference");
}

/* A path key's alternatives (a|b) are entries of their own, under the
 * line's rule; '[|]' is the character; a '|' a variable brought into a
 * pattern is an error (it would cut the pattern short). */
static void test_path_alternatives(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w\nhidden = /w/*.pem|/w/k/*.key|.env*|/w/lit\n"
				  "protected = /w/a[|]b*|/w/c\n");
	static const struct { const char *p; bool write; enum pverdict v; } cases[] = {
		{ "/w/x.pem", false, PV_DENY }, { "/w/k/x.key", false, PV_DENY }, { "/w/x.key", false, PV_ALLOW },
		{ "/w/d/.env.local", false, PV_DENY }, { "/w/lit/f", false, PV_DENY }, { "/w/litx", false, PV_ALLOW },
		{ "/w/a|b1", true, PV_DENY }, { "/w/ab1", true, PV_ALLOW }, { "/w/c/f", true, PV_DENY },
		{ "/w/x.pem|/w/k", false, PV_ALLOW },
	};

	(void)state;
	assert_non_null(pol);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		print_message("%s %s\n", cases[i].write ? "write" : "read", cases[i].p);
		assert_int_equal(path(pol, cases[i].p, cases[i].write), cases[i].v);
	}
	const char *why;
	assert_int_equal(policy_path(pol, "/w/k/y.key", false, &why), PV_DENY);
	assert_non_null(strstr(why, "hidden = /w/*.pem|/w/k/*.key"));
	policy_free(pol);
	setenv("FTSBX_UNIT_PIPE", "a|b", 1);
	fails("[paths]\nhidden = /w/$FTSBX_UNIT_PIPE*\n", 2, "'|' in the path pattern");
	unsetenv("FTSBX_UNIT_PIPE");
	fails("[paths]\nhidden = /w/*.pem|\n", 2, "empty alternative");
}

static void test_error_home_unset(void **state)
{
	(void)state;
	unsetenv("HOME");
	fails("[paths]\nhidden = ~/.ssh\n", 2, "HOME is not set");
	setenv("HOME", "/home/u", 1);
}

static void test_error_commands(void **state)
{
	(void)state;
	fails("[commands]\nok = git push\nbad = rm -rf|--x\n", 3, "bad flag '-rf'");
	fails("[commands]\nbad = rm -|--force\n", 2, "bad flag '-'");
	fails("[commands]\nempty = \n", 2, "empty command rule empty");
	fails("[commands]\nx = kill =\n", 2, "empty '=' token");
	fails("[commands]\nx = dd of=[abc\n", 2, "unclosed [");
	fails("[rewind]\nexcept = |pytest\n", 2, "empty alternative");
	fails("[fetch-and-run]\nfetchers = curl a|b\n", 2, "bad program name 'a|b'");
	/* negated tokens */
	fails("[commands]\nok = git push !--dry-run\nbad = git push !\n", 3, "empty negation '!' in bad");
	fails("[commands]\nbad = git push !!-n\n", 2, "double negation '!!-n'");
	fails("[commands]\nbad = !git push\n", 2, "a program cannot be negated: '!git'");
	fails("[commands]\nbad = rm !-rf\n", 2, "a negated flag is one flag or alternatives");
	fails("[commands]\nbad = rm !-|--force\n", 2, "bad flag '-'");
	fails("[commands]\nbad = kill !=\n", 2, "empty '=' token");
	fails("[commands]\nbad = dd !of=[abc\n", 2, "unclosed [");
	fails("[rewind]\nexcept = make !\n", 2, "empty negation");
}

/* The directories on the way to a root may be made; a root whose own entry
 * is outside every root may not be removed; one inside another may. */
static void test_root_ancestors_and_entries(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w/proj\nwritable = /t\nwritable = /t/ws\n"
				  "untracked = /h/.local/share/x\n");

	(void)state;
	assert_non_null(pol);
	assert_true(policy_root_ancestor(pol, "/h/.local"));
	assert_true(policy_root_ancestor(pol, "/h/.local/share"));
	assert_true(policy_root_ancestor(pol, "/w"));
	assert_false(policy_root_ancestor(pol, "/h/.local/share/x"));
	assert_false(policy_root_ancestor(pol, "/h/.loc"));
	assert_false(policy_root_ancestor(pol, "/"));
	assert_false(policy_root_ancestor(pol, "/etc"));
	assert_true(policy_root_entry_outside(pol, "/w/proj"));
	assert_true(policy_root_entry_outside(pol, "/t"));
	assert_true(policy_root_entry_outside(pol, "/h/.local/share/x"));
	assert_false(policy_root_entry_outside(pol, "/t/ws"));       /* its entry is in /t */
	assert_false(policy_root_entry_outside(pol, "/w/proj/sub"));
	assert_false(policy_root_entry_outside(pol, "/w"));
	policy_free(pol);
}

static void test_key_commands_negation(void **state)
{
	struct policy *pol = load("[commands]\n"
				  "pub = npm|cargo publish !-n|--dry-run\n"
				  "del = kubectl delete !=--dry-run*\n"
				  "stop = systemctl stop !--user !*.scope\n");
	const char *why;

	(void)state;
	assert_int_equal(EXEC(pol, "npm", "publish"), PV_DENY);
	assert_int_equal(EXEC(pol, "npm", "publish", "--access", "public"), PV_DENY);
	assert_int_equal(EXEC(pol, "npm", "publish", "--dry-run"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "npm", "publish", "--dry"), PV_ALLOW);       /* abbreviated */
	assert_int_equal(EXEC(pol, "cargo", "-n", "publish"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "cargo", "publish", "--", "--dry-run"), PV_DENY);  /* an operand */
	/* a spelling that may mean another thing exempts nothing: the letter
	 * after another in a group may be its value (cargo -pmy-crate-bin is
	 * -p my-crate-bin), and --dry-run=false is no dry run */
	assert_int_equal(EXEC(pol, "cargo", "publish", "-pmy-crate-bin"), PV_DENY);
	assert_int_equal(EXEC(pol, "cargo", "publish", "-vn"), PV_DENY);
	assert_int_equal(EXEC(pol, "cargo", "publish", "-nv"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "npm", "publish", "--dry-run=false"), PV_DENY);
	assert_int_equal(EXEC(pol, "npm", "publish", "--dry-run=0"), PV_DENY);
	assert_int_equal(EXEC(pol, "npm", "publish", "--dry-run=true"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "npm", "pack"), PV_ALLOW);
	/* a flag or an operand that must not be there */
	assert_int_equal(EXEC(pol, "systemctl", "stop", "nginx"), PV_DENY);
	assert_int_equal(EXEC(pol, "systemctl", "--user", "stop", "app"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "systemctl", "stop", "run-1.scope"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "systemctl", "stop", "--", "run-1.scope"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "systemctl", "stop", "--", "--user"), PV_DENY);
	/* an argument, options included */
	assert_int_equal(EXEC(pol, "kubectl", "delete", "pod", "x"), PV_DENY);
	assert_int_equal(EXEC(pol, "kubectl", "delete", "pod", "x", "--dry-run=client"), PV_ALLOW);
	assert_int_equal(policy_exec(pol, NULL, (char *const[]){ "npm", "publish", NULL }, "/usr/bin", &why),
			 PV_DENY);
	assert_string_equal(why, "[commands] pub = npm|cargo publish !-n|--dry-run");
	policy_free(pol);
}

static void test_error_network(void **state)
{
	(void)state;
	fails("[network]\ndeny = 1.2.3\n", 2, "bad address '1.2.3'");
	fails("[network]\ndeny = 10.0.0.0/33\n", 2, "bad prefix length '/33'");
	fails("[network]\ndeny = ::1/129\n", 2, "bad prefix length");
	fails("[network]\ndeny = 10.0.0.1 70000\n", 2, "bad port '70000'");
	fails("[network]\nallow = unix:\n", 2, "bad unix socket pattern");
}

static void test_error_syntax(void **state)
{
	(void)state;
	fails("[policy]\nmode = audit\nthis line has no equals sign\n", 3, "syntax error");
	fails("[policy\nmode = audit\n", 1, "syntax error");
}

static void test_error_long_line_and_nul(void **state)
{
	char text[8192];

	(void)state;
	memset(text, 'a', sizeof(text));
	memcpy(text, "[commands]\nx = ", 15);
	text[sizeof(text) - 1] = 0;
	fails(text, 2, "line longer than");

	struct policy *pol;
	FILE *f = fopen(file, "w");
	fwrite("[policy]\nmode = au\0dit\n", 1, 23, f);
	fclose(f);
	assert_int_not_equal(policy_load(&pol, file, err, sizeof(err)), 0);
	assert_non_null(strstr(err, ":2: NUL byte"));
}

static void test_error_unreadable(void **state)
{
	struct policy *pol;
	char missing[PATH_MAX + 16];

	(void)state;
	snprintf(missing, sizeof(missing), "%s/missing.ini", dir);
	assert_int_not_equal(policy_load(&pol, missing, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "missing.ini: No such file or directory"));
	assert_int_not_equal(policy_load(&pol, dir, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "Is a directory"));
}

static void test_error_in_base_names_base(void **state)
{
	char base[PATH_MAX + 16];

	(void)state;
	snprintf(base, sizeof(base), "%s/base.ini", dir);
	write_file(base, "[policy]\nmode = audit\n\nmode = sometimes\n");
	assert_null(load("[policy]\nbase = base.ini\n"));
	assert_non_null(strstr(err, "base.ini:4: bad value 'sometimes'"));
	fails("[policy]\nbase = nothere.ini\n", 2, "cannot read base policy");
}

/* --- every key ------------------------------------------------------------------------------ */

static void test_key_mode_durability_landlock(void **state)
{
	struct policy *pol;

	(void)state;
	pol = load("[policy]\nmode = audit\ndurability = power\nlandlock = off\n");
	assert_non_null(pol);
	assert_int_equal(policy_mode(pol), PM_AUDIT);
	assert_int_equal(policy_durability(pol), PD_POWER);
	assert_int_equal(policy_landlock(pol), PL_OFF);
	policy_free(pol);
	pol = load("[policy]\nmode = off\nlandlock = on\n");
	assert_int_equal(policy_mode(pol), PM_OFF);
	assert_int_equal(policy_landlock(pol), PL_REQUIRE);
	policy_free(pol);
	pol = load("# all defaults\n");
	assert_int_equal(policy_mode(pol), PM_ENFORCE);
	assert_int_equal(policy_durability(pol), PD_PROCESS);
	assert_int_equal(policy_landlock(pol), PL_AUTO);
	policy_free(pol);
}

static void test_key_signals(void **state)
{
	struct policy *pol = load("[policy]\nsignals = session\n");
	const char *why;

	(void)state;
	assert_int_equal(policy_signal(pol, 1234, 15, true, &why), PV_ALLOW);
	assert_int_equal(policy_signal(pol, 1234, 15, false, &why), PV_DENY);
	assert_int_equal(policy_signal(pol, -1, 9, true, &why), PV_DENY);
	assert_int_equal(policy_signal(pol, -1, 0, false, &why), PV_ALLOW);   /* a probe */
	policy_free(pol);
	pol = load("[policy]\nsignals = any\n");
	assert_int_equal(policy_signal(pol, 1234, 15, false, &why), PV_ALLOW);
	assert_int_equal(policy_signal(pol, -1, 9, false, &why), PV_DENY);
	policy_free(pol);
}

static void test_key_programs(void **state)
{
	struct policy *pol = load("[programs]\nstatic = refuse\nsetuid = warn\ngo = refuse\nldso = warn\n");

	(void)state;
	assert_int_equal(policy_opaque(pol, PO_STATIC), PO_REFUSE);
	assert_int_equal(policy_opaque(pol, PO_SETUID), PO_WARN);
	assert_int_equal(policy_opaque(pol, PO_GO), PO_REFUSE);
	assert_int_equal(policy_opaque(pol, PO_LDSO), PO_WARN);
	policy_free(pol);
}

static void test_key_workspace_and_vars(void **state)
{
	struct policy *pol;

	(void)state;
	pol = load("[paths]\nworkspace = /w/other/./x/..\nwritable = $WORKSPACE\nwritable = ${NOT_SET_X:-/fallback}\n");
	assert_non_null(pol);
	assert_string_equal(policy_workspace(pol), "/w/other");
	assert_int_equal(path(pol, "/w/other/f", true), PV_ALLOW);
	assert_int_equal(path(pol, "/fallback/f", true), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/f", true), PV_DENY);
	policy_free(pol);
	pol = load("[paths]\nwritable = $WORKSPACE\n");
	assert_string_equal(policy_workspace(pol), "/w/ws");          /* FTSBX_WORKSPACE */
	policy_free(pol);
}

static void test_key_writable_default(void **state)
{
	struct policy *pol = load("[policy]\nmode = enforce\n");

	(void)state;
	assert_int_equal(path(pol, "/w/ws/src/a.c", true), PV_ALLOW);
	assert_int_equal(path(pol, "/w/tmp/x", true), PV_ALLOW);
	assert_int_equal(path(pol, "/tmp/x", true), PV_ALLOW);
	assert_int_equal(path(pol, "/etc/passwd", true), PV_DENY);
	assert_int_equal(path(pol, "/w/wsx", true), PV_DENY);          /* a prefix, not a parent */
	assert_int_equal(path(pol, "/etc/passwd", false), PV_ALLOW);
	assert_non_null(policy_root(pol, 0));
	policy_free(pol);
}

static void test_key_hidden_protected_untracked(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w/ws\nwritable = /home/u/proj\n"
				  "hidden = ~/.ssh\nhidden = .env\nhidden = /w/ws/secret-*.txt\n"
				  "protected = .git/hooks\nprotected = /w/ws/vendor/*/LICENSE\n"
				  "untracked = ~/.cache\nuntracked = /w/ws/node_modules\nuntracked = *.pyc\n");
	const char *why;

	(void)state;
	assert_non_null(pol);
	assert_int_equal(path(pol, "/home/u/.ssh/id_rsa", false), PV_DENY);
	assert_int_equal(policy_path(pol, "/home/u/.ssh", false, &why), PV_DENY);
	assert_string_equal(why, "[paths] hidden = ~/.ssh");
	assert_int_equal(path(pol, "/home/u/.sshx", false), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/a/b/.env", false), PV_DENY);
	assert_int_equal(path(pol, "/w/ws/.envrc", false), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/secret-1.txt", false), PV_DENY);
	assert_int_equal(path(pol, "/w/ws/secret-1.txt.bak", false), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/.git/hooks/pre-commit", true), PV_DENY);
	assert_int_equal(path(pol, "/w/ws/.git/hooks/pre-commit", false), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/sub/.git/hooks", true), PV_DENY);
	assert_int_equal(path(pol, "/w/ws/.git/hooksx", true), PV_ALLOW);
	assert_int_equal(path(pol, "/w/ws/vendor/lib/LICENSE", true), PV_DENY);
	assert_int_equal(path(pol, "/w/ws/vendor/lib/x/LICENSE", true), PV_ALLOW);
	assert_int_equal(path(pol, "/home/u/.cache/pip/x", true), PV_UNTRACKED);
	assert_int_equal(path(pol, "/w/ws/node_modules/a/b.js", true), PV_UNTRACKED);
	assert_int_equal(path(pol, "/w/ws/x/y.pyc", true), PV_UNTRACKED);
	assert_int_equal(path(pol, "/home/u/other", true), PV_DENY);
	policy_free(pol);
}

/* The filters taken up with the block (the common prefix of each kind's
 * literal prefixes, whether a kind has anchored globs) decide nothing on
 * their own: the same verdicts from the loaded policy and from its block
 * mapped again, at the edges of the common prefix. */
static void test_prefix_filters(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w/ws\n"
				  "hidden = /w/ws/abc\nhidden = /w/ws/abd/e\nhidden = /w/ws/ab x\n"
				  "protected = /w/ws/p?q\nprotected = keep.me\n");
	static const struct { const char *p; bool write; enum pverdict v; } cases[] = {
		{ "/w/ws/abc", false, PV_DENY }, { "/w/ws/abc/d", false, PV_DENY },
		{ "/w/ws/abd/e", false, PV_DENY }, { "/w/ws/abd/e/f/g", false, PV_DENY },
		{ "/w/ws/ab x", false, PV_DENY }, { "/w/ws/ab x/y", false, PV_DENY },
		{ "/w/ws/ab", false, PV_ALLOW }, { "/w/ws/a", false, PV_ALLOW }, { "/w/ws", false, PV_ALLOW },
		{ "/", false, PV_ALLOW }, { "/w/ws/abd", false, PV_ALLOW }, { "/w/ws/abe", false, PV_ALLOW },
		{ "/w/ws/abcd", false, PV_ALLOW }, { "/x/ws/abc", false, PV_ALLOW },
		{ "/w/ws/pxq", true, PV_DENY }, { "/w/ws/pxq/r", true, PV_DENY }, { "/w/ws/pq", true, PV_ALLOW },
		{ "/w/ws/d/keep.me", true, PV_DENY }, { "/w/ws/keep.me", true, PV_DENY },
		{ "/w/ws/keep.mex", true, PV_ALLOW },
	};
	struct policy mapped;
	const void *p;
	size_t n;

	(void)state;
	assert_non_null(pol);
	policy_blob(pol, &p, &n);
	uint64_t *copy = malloc(n);
	memcpy(copy, p, n);
	assert_int_equal(policy_from_blob(&mapped, copy, n), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		print_message("%s %s\n", cases[i].write ? "write" : "read", cases[i].p);
		assert_int_equal(path(pol, cases[i].p, cases[i].write), cases[i].v);
		assert_int_equal(path(&mapped, cases[i].p, cases[i].write), cases[i].v);
	}
	free(copy);
	policy_free(pol);
}

/* A literal path that a symlink leads elsewhere counts at both names; one
 * that does not exist, at the name written. */
static void test_paths_through_symlinks(void **state)
{
	char real[PATH_MAX], link[PATH_MAX], text[4 * PATH_MAX], p[PATH_MAX + 32];
	struct policy *pol;

	(void)state;
	snprintf(real, sizeof(real), "%s/real-root", dir);
	snprintf(link, sizeof(link), "%s/link-root", dir);
	assert_int_equal(mkdir(real, 0700), 0);
	assert_int_equal(symlink(real, link), 0);
	snprintf(text, sizeof(text), "[paths]\nwritable = %s\nhidden = %s/secret\nhidden = %s/missing\n",
		 link, link, link);
	assert_int_equal(mkdir(strcat(strcpy(p, real), "/secret"), 0700), 0);
	pol = load(text);
	assert_non_null(pol);
	snprintf(p, sizeof(p), "%s/f", real);
	assert_int_equal(path(pol, p, true), PV_ALLOW);
	snprintf(p, sizeof(p), "%s/f", link);
	assert_int_equal(path(pol, p, true), PV_ALLOW);
	snprintf(p, sizeof(p), "%s/secret/k", real);
	assert_int_equal(path(pol, p, false), PV_DENY);
	snprintf(p, sizeof(p), "%s/missing/k", link);
	assert_int_equal(path(pol, p, false), PV_DENY);
	snprintf(p, sizeof(p), "%s/missing/k", real);
	assert_int_equal(path(pol, p, false), PV_ALLOW);
	snprintf(p, sizeof(p), "%s/other/f", dir);
	assert_int_equal(path(pol, p, true), PV_DENY);
	policy_free(pol);
}

/* Literal paths are looked up in their directories' listings (policy/
 * dirlist.c) once a directory is asked about twice, and through the
 * kernel where a listing cannot be used (a directory too large): a
 * symlink among many missing names still counts at its target, in both
 * kinds of directory and one level down. */
static void test_paths_through_listed_symlinks(void **state)
{
	char d[PATH_MAX], big[PATH_MAX], tgt[PATH_MAX], p[PATH_MAX + 64], text[16384];
	size_t n = 0;
	struct policy *pol;

	(void)state;
	snprintf(d, sizeof(d), "%s/listed", dir);
	snprintf(big, sizeof(big), "%s/big", dir);
	snprintf(tgt, sizeof(tgt), "%s/targets", dir);
	assert_int_equal(mkdir(d, 0700), 0);
	assert_int_equal(mkdir(big, 0700), 0);
	assert_int_equal(mkdir(tgt, 0700), 0);
	for (int i = 0; i < 300; i++) {         /* more entries than one listing holds */
		snprintf(p, sizeof(p), "%s/a-rather-long-file-name-to-fill-the-buffer-%03d", big, i);
		assert_int_equal(mknod(p, S_IFREG | 0600, 0), 0);
	}
	const char *made[] = { "t1", "t2", "t3", "sub-t", "sub-t/e" };
	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tgt, made[i]);
		assert_int_equal(mkdir(p, 0700), 0);
	}
	const char *links[][2] = { { "a", "t1" }, { "dangling", "nothing" }, { "sub", "sub-t" } };
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		char to[PATH_MAX + 16];
		snprintf(to, sizeof(to), "%s/%s", tgt, links[i][1]);
		snprintf(p, sizeof(p), "%s/%s", d, links[i][0]);
		assert_int_equal(symlink(to, p), 0);
		snprintf(p, sizeof(p), "%s/%s", big, links[i][0]);
		assert_int_equal(symlink(to, p), 0);
	}
	n += (size_t)snprintf(text + n, sizeof(text) - n, "[paths]\n");
	for (int k = 0; k < 2; k++) {
		const char *at = k ? big : d;
		const char *names[] = { "m1", "m2", "m3", "a", "m4", "dangling", "sub/e", "sub/m5", "m6/x", "m7" };
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			n += (size_t)snprintf(text + n, sizeof(text) - n, "hidden = %s/%s\n", at, names[i]);
	}
	pol = load(text);
	assert_non_null(pol);
	static const struct { const char *rel; enum pverdict v; } cases[] = {
		{ "targets/t1/k", PV_DENY },            /* a, a symlink among missing names */
		{ "targets/sub-t/e/k", PV_DENY },       /* sub/e, through a symlinked directory */
		{ "targets/t2/k", PV_ALLOW }, { "targets/nothing/k", PV_ALLOW }, { "targets/sub-t/m5", PV_ALLOW },
		{ "listed/m1/k", PV_DENY }, { "big/m7", PV_DENY }, { "listed/a/k", PV_DENY },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, cases[i].rel);
		print_message("read %s\n", p);
		assert_int_equal(path(pol, p, false), cases[i].v);
	}
	policy_free(pol);
}

static void test_devices(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w/ws\n");
	const char *why;

	(void)state;
	assert_int_equal(path(pol, "/dev/null", true), PV_UNTRACKED);
	assert_int_equal(policy_path_typed(pol, "/dev/pts/3", true, S_IFCHR, &why), PV_UNTRACKED);
	/* the terminals, but not the machine's virtual consoles */
	assert_int_equal(policy_path_typed(pol, "/dev/tty", true, S_IFCHR, &why), PV_UNTRACKED);
	assert_int_equal(policy_path_typed(pol, "/dev/ttyS0", true, S_IFCHR, &why), PV_UNTRACKED);
	assert_int_equal(policy_path_typed(pol, "/dev/ttyUSB0", true, S_IFCHR, &why), PV_UNTRACKED);
	assert_int_equal(policy_path_typed(pol, "/dev/tty1", true, S_IFCHR, &why), PV_DENY);
	assert_int_equal(policy_path_typed(pol, "/dev/tty63", true, S_IFCHR, &why), PV_DENY);
	assert_int_equal(policy_path_typed(pol, "/dev/tty0", true, S_IFCHR, &why), PV_DENY);
	assert_int_equal(policy_path_typed(pol, "/dev/tty1", false, S_IFCHR, &why), PV_ALLOW);
	assert_int_equal(policy_path_typed(pol, "/dev/sda", true, S_IFBLK, &why), PV_DENY);
	assert_string_equal(why, "writing a block device");
	assert_int_equal(policy_path_typed(pol, "/w/ws/disk", true, S_IFBLK, &why), PV_DENY);
	assert_int_equal(policy_path_typed(pol, "/dev/sda", false, S_IFBLK, &why), PV_ALLOW);
	assert_int_equal(policy_path_typed(pol, "/dev/newfile", true, S_IFREG, &why), PV_DENY);
	policy_free(pol);
}

/* A virtual console is allowed to the process that runs at it (its
 * standard input here, in a child: the answer is kept once a process). */
static void test_own_virtual_console(void **state)
{
	int fd = open("/dev/tty1", O_RDONLY | O_NOCTTY | O_CLOEXEC), st = -1;
	pid_t pid;

	(void)state;
	if (fd < 0)
		skip();
	pid = fork();
	if (pid == 0) {
		dup2(fd, 0);
		_exit(policy_device_here("tty1") && !policy_device_here("tty2") && policy_device_here("ttyS0") &&
		      policy_device_here("null") ? 0 : 1);
	}
	close(fd);
	assert_true(pid > 0 && waitpid(pid, &st, 0) == pid);
	assert_int_equal(st, 0);
	assert_false(policy_device_here("tty1"));       /* this process's are no console */
}

static void test_journal_dir_off_limits(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w\n");
	const char *why;

	(void)state;
	policy_set_journal(pol, "/w/state/sess/");
	assert_int_equal(policy_path(pol, "/w/state/sess/log/1.ftj", false, &why), PV_DENY);
	assert_string_equal(why, "the journal directory is off limits");
	assert_int_equal(path(pol, "/w/state/sess", true), PV_DENY);
	assert_int_equal(path(pol, "/w/state/session2", true), PV_ALLOW);
	policy_free(pol);
}

static void test_key_commands_flags_any_spelling(void **state)
{
	struct policy *pol = load("[commands]\nrmrf = rm -r|-R|--recursive -f|--force /\n"
				  "push = git push -f|--force|--force-with-lease*\nk = kill =-1\n");
	const char *why;

	(void)state;
	assert_int_equal(EXEC(pol, "rm", "-rf", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "-fr", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "-r", "-f", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "--recursive", "--force", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "--recur", "--forc", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "-Rvf", "--", "/"), PV_DENY);
	assert_int_equal(EXEC(pol, "rm", "-rf", "build"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "rm", "-r", "/"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "git", "push", "--force-with-lease=main", "origin"), PV_DENY);
	assert_int_equal(EXEC(pol, "git", "-C", "x", "push", "origin", "-f"), PV_DENY);
	assert_int_equal(EXEC(pol, "git", "push", "origin", "main"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "git", "commit", "-m", "push -f"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "git", "fetch", "-f"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "kill", "-9", "-1"), PV_DENY);
	assert_int_equal(EXEC(pol, "kill", "-15", "1234"), PV_ALLOW);
	assert_int_equal(policy_exec(pol, NULL, (char *const[]){ "git", "push", "-f", NULL }, "/usr/bin", &why),
			 PV_DENY);
	assert_string_equal(why, "[commands] push = git push -f|--force|--force-with-lease*");
	policy_free(pol);
}

static void test_wrappers(void **state)
{
	struct policy *pol = load("[commands]\nfmt = mkfs|mkfs.*\n");

	(void)state;
	assert_int_equal(EXEC(pol, "env", "-i", "A=1", "-u", "X", "mkfs.ext4", "/dev/sdb"), PV_DENY);
	assert_int_equal(EXEC(pol, "nice", "-n", "5", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "nice", "-10", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "nohup", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "timeout", "-s", "KILL", "-k", "1", "10", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "timeout", "10s", "true"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "stdbuf", "-oL", "-e", "0", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "ionice", "-c", "3", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "ionice", "-p", "1234"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "chrt", "-i", "0", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "setsid", "-f", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "xargs", "-0", "-n", "1", "mkfs.xfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "time", "-o", "out", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "/lib64/ld-linux-x86-64.so.2", "--library-path", "/x", "/sbin/mkfs.ext4"), PV_DENY);
	assert_int_equal(EXEC(pol, "busybox", "mkfs.vfat", "/dev/sdb"), PV_DENY);
	assert_int_equal(EXEC(pol, "env", "nice", "timeout", "5", "xargs", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "env", "-S", "mkfs /dev/sdb"), PV_DENY);
	assert_int_equal(EXEC(pol, "env", "-i", "make"), PV_ALLOW);
	policy_free(pol);
}

static void test_remote_commands(void **state)
{
	struct policy *pol = load("[commands]\nfmt = mkfs|mkfs.*\npush = git push -f|--force\n"
				  "[fetch-and-run]\nfetchers = curl\ninterpreters = sh\n");

	(void)state;
	/* the remote shell runs the words after the destination, joined */
	assert_int_equal(EXEC(pol, "ssh", "host", "mkfs.ext4", "/dev/sda"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-p", "22", "-i", "k", "-o", "A=b", "host", "mkfs /dev/sda"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-tp22", "host", "cd /srv && git push --force"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "host", "curl -s x | sh"), PV_DENY);
	assert_int_equal(EXEC(pol, "sshpass", "-p", "pw", "ssh", "host", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "env", "ssh", "-l", "u", "--", "host", "mkfs"), PV_DENY);
	assert_int_equal(sh(pol, "ssh host 'mkfs /dev/sda'"), PV_DENY);
	/* a login, a tunnel, a subsystem, a harmless command */
	assert_int_equal(EXEC(pol, "ssh", "host"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ssh", "-N", "-L", "8080:localhost:80", "host", "mkfs"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ssh", "-s", "host", "sftp"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ssh", "host", "uptime"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ssh", "-p", "mkfs", "host", "ls"), PV_ALLOW);
	/* options after the destination, "--" before the command, the
	 * command as an option (RemoteCommand) */
	assert_int_equal(EXEC(pol, "ssh", "host", "--", "mkfs", "/dev/sda"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "host", "-t", "-p", "22", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-o", "RemoteCommand=mkfs /dev/sda", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-oremotecommand mkfs", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-o", "RemoteCommand\tmkfs", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-o", "  RemoteCommand = mkfs", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-o", "RemoteCommand =mkfs", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "ssh", "-o", "RemoteCommand=uptime", "host"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ssh", "host", "--", "ls", "-l"), PV_ALLOW);
	/* docker exec CONTAINER COMMAND...: the container runs it */
	assert_int_equal(EXEC(pol, "docker", "exec", "-it", "-e", "A=1", "-u", "root", "db", "mkfs", "/dev/sda"), PV_DENY);
	assert_int_equal(EXEC(pol, "docker", "compose", "exec", "-T", "web", "sh", "-c", "git push -f"), PV_DENY);
	assert_int_equal(EXEC(pol, "podman", "exec", "db", "mkfs"), PV_DENY);
	assert_int_equal(EXEC(pol, "docker", "exec", "db", "ls", "/"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "docker", "logs", "mkfs"), PV_ALLOW);
	/* kubectl exec POD -- COMMAND...: the pod runs it */
	assert_int_equal(EXEC(pol, "kubectl", "-n", "p", "exec", "-it", "web", "--", "mkfs", "/dev/sda"), PV_DENY);
	assert_int_equal(EXEC(pol, "kubectl", "exec", "web", "--", "sh", "-c", "git push -f"), PV_DENY);
	assert_int_equal(EXEC(pol, "kubectl", "exec", "web", "--", "ls", "/"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "kubectl", "logs", "mkfs"), PV_ALLOW);
	policy_free(pol);
}

static void test_program_resolution(void **state)
{
	struct policy *pol = load("[commands]\nt = true\nabs = /opt/*/danger\n");
	char link[PATH_MAX + 16];
	const char *why;

	(void)state;
	snprintf(link, sizeof(link), "%s/build", dir);
	assert_int_equal(symlink("/bin/true", link), 0);
	/* a symlink named "build" on PATH leads to true */
	assert_int_equal(policy_exec(pol, NULL, (char *const[]){ "build", NULL }, dir, &why), PV_DENY);
	assert_int_equal(policy_exec(pol, NULL, (char *const[]){ "build", NULL }, "/nonexistent", &why), PV_ALLOW);
	/* execve's FILE counts, whatever argv[0] says */
	assert_int_equal(policy_exec(pol, "/bin/true", (char *const[]){ "innocent", NULL }, NULL, &why), PV_DENY);
	assert_int_equal(policy_exec(pol, "/opt/x/danger", (char *const[]){ "a", NULL }, NULL, &why), PV_DENY);
	assert_int_equal(policy_exec(pol, NULL, (char *const[]){ NULL }, NULL, &why), PV_ALLOW);
	unlink(link);
	policy_free(pol);
}

/* =PATTERN tokens see what a script feeds a command on its standard input
 * (a here-document, a here-string, echo or printf before a pipe); flags
 * and operands do not, and other commands' input is theirs. */
static void test_shell_stdin_text(void **state)
{
	struct policy *pol = load("[commands]\n"
				  "sql-drop = psql|mysql =*[Dd][Rr][Oo][Pp][!a-zA-Z0-9_]*\n"
				  "sql-update-all = psql =*[Uu][Pp][Dd][Aa][Tt][Ee]*[Ss][Ee][Tt]* !=*[Ww][Hh][Ee][Rr][Ee]*\n"
				  "rm-rf = rm -r|-R|--recursive\n");

	(void)state;
	{
		static const char *const refused[] = {
			"psql <<EOF\nselect 1;\nDROP TABLE users;\nEOF\n",
			"psql -h db <<-'SQL'\n\tDROP DATABASE prod;\n\tSQL\necho done",
			"cat <<A; psql <<B\nselect 1;\nA\ndrop table t;\nB\n",
			"psql <<< 'drop table t'",
			"echo 'DROP TABLE t;' | psql",
			"printf 'drop table t;\\n' | mysql -u root",
			"echo 'update t set a=1' | psql",
		};
		static const char *const allowed[] = {
			"cat <<A; psql <<B\nDROP x;\nA\nselect 1;\nB\n",
			"echo 'update t set a=1 where id=2' | psql",
			"psql <<EOF\nselect * from drops_log;\nEOF\n",
			"echo 'DROP TABLE t' > x.sql; psql -c 'select 1'",
			"echo 'DROP TABLE t' | tee x.sql | wc -l",
			"cat > notes.md <<EOF\nDROP the old table later\nEOF\npsql -c 'select 1'",
			"rm <<EOF\n-r\nEOF\n",             /* flags are not taken from the input */
		};
		expect_shells(pol, refused, sizeof(refused) / sizeof(refused[0]), allowed,
			      sizeof(allowed) / sizeof(allowed[0]));
	}
	policy_free(pol);

	/* the built-in default's SQL rules, a statement at a time, comments out */
	pol = load("[policy]\nbase = default\n");
	static const char *const refused[] = {
		"psql <<EOF\nselect 1;\nDROP TABLE users;\nEOF\n",
		"cat <<'SQL' | psql -h db\nTRUNCATE orders;\nSQL\n",
		"cat <<EOF | docker exec -i db psql\nDROP DATABASE prod;\nEOF\n",
		"cat <<< 'DROP TABLE t;' | psql -h db",
		"psql <<A <<B\nselect 1;\nA\nDROP TABLE t;\nB\n",
		"psql <<<'select 1' <<EOF\ndrop table t;\nEOF\n",
		"psql <<EOF\nDROP TABLE t;\n",                        /* no delimiter line: to the end */
		"psql <<EOF\r\nDROP TABLE t;\r\nEOF\r\n",
		"psql <<EOF\nselect 1;\nEOF\r\nDROP TABLE t;\nEOF\n",     /* "EOF\r" ends only "EOF\r" */
		"bash <<EOF\nmkfs.ext4 /dev/sdb\n",                       /* a shell's body with no delimiter */
		"cat <<A <<B <<C <<D >/dev/null; psql <<E\na\nA\nb\nB\nc\nC\nd\nD\nDROP TABLE t;\nE\n",
		"psql <<EOF\nDELETE FROM a WHERE id = 1; DELETE FROM b;\nEOF\n",
		"psql <<EOF\nUPDATE u SET admin = true; SELECT 1 WHERE true;\nEOF\n",
		"echo 'update users set admin=true' | mysql app",
		"mongosh <<EOF\ndb.runCommand({drop: \"users\"})\nEOF\n",
	};
	static const char *const allowed[] = {
		"psql <<EOF\nCREATE TABLE o (u int REFERENCES u ON DELETE CASCADE);\nSELECT count(*) FROM o;\nEOF\n",
		"mysql app <<'SQL'\nCREATE TABLE t (ts timestamp ON UPDATE CURRENT_TIMESTAMP) DEFAULT CHARSET=utf8mb4;\nSQL\n",
		"psql <<'SQL'\nSELECT last_update FROM film ORDER BY 1 OFFSET 20;\nSQL\n",
		"psql <<EOF\nSELECT on_delete FROM fk_rules;\nEOF\n",
		"psql <<EOF\n-- TODO: drop the old index later\n/* and DROP the view */ select 1;\nEOF\n",
		"psql <<EOF\nUPDATE t SET a = 'x;y' WHERE id = 1;\nEOF\n",
		"psql <<EOF\nDELETE FROM sessions WHERE expires < now();\nEOF\n",
		"mongosh <<EOF\ndb.ui.find({backdrop: true})\nEOF\n",
		"git commit -F - <<EOF\nDrop the old table; delete from the docs\nEOF\n",
		"cat notes.sql | psql -c 'select 1'",
		/* odd scripts end well (an unterminated quote, a backslash last) */
		"env bash -c \"psql <<E\\\"O\"", "cat <<EOF \\",
	};
	expect_shells(pol, refused, sizeof(refused) / sizeof(refused[0]), allowed,
		      sizeof(allowed) / sizeof(allowed[0]));
	policy_free(pol);
}

static void test_shell_strings(void **state)
{
	struct policy *pol = load("[commands]\nfmt = mkfs|mkfs.*\npush = git push -f|--force\n");

	(void)state;
	assert_int_equal(sh(pol, "make && mkfs.ext4 /dev/sdb"), PV_DENY);
	assert_int_equal(sh(pol, "echo ok; (cd x && git push --force)"), PV_DENY);
	assert_int_equal(sh(pol, "if true; then mkfs /dev/x; fi"), PV_DENY);
	assert_int_equal(sh(pol, "A=1 B=2 mkfs"), PV_DENY);
	assert_int_equal(sh(pol, "echo $(mkfs /dev/x)"), PV_DENY);
	assert_int_equal(sh(pol, "echo `mkfs /dev/x`"), PV_DENY);
	assert_int_equal(sh(pol, "sh -c 'bash -lc \"mkfs /dev/x\"'"), PV_DENY);
	assert_int_equal(sh(pol, "exec -a innocent mkfs"), PV_DENY);
	assert_int_equal(sh(pol, "command mkfs"), PV_DENY);
	assert_int_equal(sh(pol, "eval 'mkfs /dev/x'"), PV_DENY);
	assert_int_equal(sh(pol, "f() { mkfs; }; f"), PV_DENY);
	assert_int_equal(sh(pol, "true\nmkfs"), PV_DENY);
	assert_int_equal(sh(pol, "m\\kfs /dev/x"), PV_DENY);
	assert_int_equal(sh(pol, "'mkfs' /dev/x"), PV_DENY);
	/* words that only mention it */
	assert_int_equal(sh(pol, "echo mkfs; grep -r 'mkfs /dev' . # mkfs"), PV_ALLOW);
	assert_int_equal(sh(pol, "command -v mkfs"), PV_ALLOW);
	assert_int_equal(sh(pol, "cat <<EOF\nmkfs /dev/x\nEOF\necho done"), PV_ALLOW);
	assert_int_equal(sh(pol, "git commit -m 'git push --force'"), PV_ALLOW);
	assert_int_equal(sh(pol, "for f in mkfs; do echo $f; done"), PV_ALLOW);
	assert_int_equal(sh(pol, "echo \"unterminated"), PV_ALLOW);
	policy_free(pol);
}

/* A shell function that starts itself in a pipeline or in the background
 * is a fork bomb, in every spelling of a function; recursion run in the
 * function's own process, and a function piped or backgrounded from
 * outside its body, are not. */
static void test_shell_fork_bombs(void **state)
{
	struct policy *pol = load("[policy]\nmode = enforce\n");
	static const char *const refused[] = {
		":(){ :|:& };:", ":(){ :|: & };:", "bomb(){ bomb|bomb& };bomb", "function f { f|f& }; f",
		"function f() { f & f; }; f", "f () { f | f & }; f", "x(){ (x|x)& }; x", "b(){ b & }; b",
		"f(){\n  f |& f\n}\nf", "echo $(g(){ g|g& }; g)", "bash -c ':(){ :|:& };:'", "eval ':(){ :|:&};:'",
		"f() { echo x | f; }; f", "f(){ (f)& (f)& }; f", "f(){ (f) >/dev/null & (f) 2>&1 & }; f", "f(){ { f; } | { f; } }; f", "f(){ { f; } & }; f",
		/* a table of names filled with words that are none first */
		"a1=(); a2=(); a3=(); a4=(); a5=(); a6=(); a7=(); a8=(); a9=(); :(){ :|:& };:",
		/* functions that start each other */
		"a(){ b|b& }; b(){ a|a& }; a", "a(){ b & b; }; b(){ a; }; a", "x(){ y; }; y(){ z | z; }; z(){ x; }; x",
	};
	static const char *const allowed[] = {
		"walk(){ for d in \"$1\"/*/; do walk \"$d\"; done; }; walk .",
		"walk(){ ls \"$1\" | while read d; do walk \"$1/$d\"; done; }; walk .",
		"f(){ echo hi; }; f | grep hi; f & wait", "f(){ g | h & }; g(){ echo; }; f",
		"fact(){ [ $1 -le 1 ] && echo 1 || echo $(( $1 * $(fact $(( $1 - 1 ))) )); }; fact 5",
		"f(){ :; }; f | f", "sleep 1 & f(){ :; }; f",
		/* wrappers: command, builtin, exec, nohup run no function */
		"git(){ command git \"$@\" | cat; }; git status", "echo(){ builtin echo \"$@\" | tee -a log; }; echo hi",
		"make(){ nohup make \"$@\" & }; make", "f(){ { echo; } | cat; }; f", "f(){ (cd x && make) & wait; }; f",
		"x=(a b); f(){ echo; }; f | cat", "a(){ b | cat; }; b(){ echo; }; a", "a(){ b & }; b(){ c; }; c(){ :; }; a",
		"a(){ [ -n \"$1\" ] && b \"$1\" | sed s/x/y/; }; b(){ a \"${1#?}\"; }; a abc",
		/* recursion behind a condition or a loop ends */
		"walk(){ for d in \"$1\"/*; do [ -d \"$d\" ] && walk \"$d\" | sed 's/^/  /'; done; }; walk .",
		"f(){ [ $1 -eq 0 ] && return; echo $1; f $(($1-1)) | cat; }; f 3",
		"up(){ for f in \"$@\"; do if [ -d \"$f\" ]; then up \"$f\"/* & else cp \"$f\" /x; fi; done; wait; }",
	};

	(void)state;
	expect_shells(pol, refused, sizeof(refused) / sizeof(refused[0]), allowed, sizeof(allowed) / sizeof(allowed[0]));
	policy_free(pol);
}

/* An interpreter running a script: the rules hold on the script as the
 * program, as when the kernel runs it by its #! line. */
static void test_interpreter_scripts(void **state)
{
	struct policy *pol = load("[commands]\ngc = gcloud * delete\ndj = manage.py flush\n"
				  "[fetch-and-run]\ninterpreters = sh bash python3\n");

	static const struct exec_case cases[] = {
		{ PV_DENY, { "bash", "/usr/lib/google-cloud-sdk/bin/gcloud", "projects", "delete" } },
		{ PV_DENY, { "sh", "-e", "gcloud", "x", "delete" } },
		{ PV_DENY, { "python3", "-W", "ignore", "/usr/local/bin/gcloud", "x", "delete" } },
		{ PV_DENY, { "nice", "bash", "--", "/opt/sdk/bin/gcloud", "projects", "delete" } },
		/* a script of one's own named like a program a rule names */
		{ PV_ALLOW, { "bash", "gcloud.sh", "x", "delete" } },
		{ PV_ALLOW, { "python3", "./manage.py", "flush" } },
		/* code, a module, standard input: no script named */
		{ PV_ALLOW, { "python3", "-c", "gcloud", "delete" } },
		{ PV_ALLOW, { "python3", "-m", "manage.py", "flush" } },
		{ PV_ALLOW, { "bash", "-s", "gcloud", "delete" } },
		{ PV_ALLOW, { "python3", "./manage.py", "migrate" } },
	};

	(void)state;
	expect_execs(pol, cases, sizeof(cases) / sizeof(cases[0]));
	policy_free(pol);
}

/* A container's host mounts, and docker cp's host side, are judged as the
 * session's own change (or read) of that path would be. */
static void test_container_mounts(void **state)
{
	struct policy *pol = load("[paths]\nwritable = /w/ws\nhidden = /w/ws/secret\n");

	static const struct exec_case cases[] = {
		{ PV_DENY, { "docker", "run", "-v", "/:/host", "alpine" } },
		{ PV_DENY, { "docker", "run", "-v/etc/cron.d:/c", "alpine" } },
		{ PV_DENY, { "docker", "run", "-itv", "/etc:/e", "alpine" } },
		{ PV_DENY, { "docker", "run", "--volume=/home/u:/h", "alpine" } },
		{ PV_DENY, { "podman", "create", "--volume", "/usr:/u:rw", "alpine" } },
		{ PV_DENY, { "docker", "run", "--mount", "type=bind,source=/etc,target=/e", "a" } },
		{ PV_DENY, { "docker", "run", "--mount=type=bind,src=/etc,dst=/e,readonly=false", "a" } },
		{ PV_DENY, { "docker", "compose", "run", "-v", "/opt:/o", "web" } },
		{ PV_DENY, { "docker", "run", "-v", "/w/ws/secret:/s:ro", "alpine" } },
		{ PV_DENY, { "docker", "cp", "web:/etc/passwd", "/etc/passwd" } },
		{ PV_DENY, { "docker", "cp", "/w/ws/secret", "web:/s" } },
		{ PV_DENY, { "docker", "--config", "cp", "run", "-v", "/etc:/x", "alpine" } },
		{ PV_DENY, { "docker", "run", "-qv", "/etc:/x", "alpine" } },
		{ PV_DENY, { "docker", "compose", "run", "-Tv", "/etc:/x", "svc" } },
		{ PV_DENY, { "docker", "run", "--mount", "Type=BIND,SOURCE=/etc,dst=/x", "a" } },
		{ PV_DENY, { "docker", "run", "--mount", "type=bind,\"src=/etc\",dst=/x", "a" } },
		{ PV_DENY, { "docker", "run", "--mount", "type=bind,src=/w/ws/secret,dst=/x,readonly=f", "a" } },
		{ PV_DENY, { "docker", "run", "--mount", "type=volume,dst=/x,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/etc", "a" } },
		{ PV_DENY, { "docker", "volume", "create", "-o", "o=bind", "-o", "device=/etc", "v" } },
		{ PV_DENY, { "docker", "run", "--name", "x", "-e", "A", "-v", "/etc:/x", "alpine" } },
		/* the workspace, read-only mounts, named and anonymous volumes */
		{ PV_ALLOW, { "docker", "run", "-v", "/w/ws:/app", "-w", "/app", "python" } },
		{ PV_ALLOW, { "docker", "run", "-v", "/etc/localtime:/etc/localtime:ro", "a" } },
		{ PV_ALLOW, { "docker", "run", "--mount", "type=bind,src=/etc,dst=/e,readonly", "a" } },
		{ PV_ALLOW, { "docker", "run", "-v", "data:/data", "-v", "/anon", "alpine" } },
		{ PV_ALLOW, { "docker", "run", "--mount", "source=myvol,target=/v", "alpine" } },
		{ PV_ALLOW, { "docker", "run", "-e", "V=/etc:/x", "alpine" } },
		{ PV_ALLOW, { "docker", "cp", "web:/app/out.txt", "/w/ws/out.txt" } },
		{ PV_ALLOW, { "docker", "ps", "-v", "/etc:/x" } },
		/* a -v of the container's command, after the image */
		{ PV_ALLOW, { "docker", "run", "--rm", "-e", "A=1", "img", "pytest", "-v", "/app/t.py" } },
		{ PV_ALLOW, { "docker", "volume", "create", "data" } },
		/* the container's own cp and run */
		{ PV_ALLOW, { "docker", "run", "--rm", "-v", "/w/ws:/w", "alpine", "cp", "/w/a", "/etc/b" } },
		{ PV_ALLOW, { "docker", "exec", "web", "cp", "/app/a", "/etc/b" } },
		{ PV_ALLOW, { "docker", "compose", "-f", "c.yml", "run", "--rm", "web", "cp", "-a", "/s", "/d" } },
		{ PV_ALLOW, { "docker", "exec", "web", "npm", "run", "build" } },
		{ PV_ALLOW, { "podman", "run", "-v", "/usr:/u:O", "alpine" } },
		/* an unknown global flag taking the verb as its value */
		{ PV_DENY, { "docker", "--some-flag", "run", "-v", "/etc:/x", "alpine" } },
		{ PV_DENY, { "docker", "run", "-v", "/proc/self/cwd:/x:ro", "alpine" } },
	};

	(void)state;
	expect_execs(pol, cases, sizeof(cases) / sizeof(cases[0]));
	policy_free(pol);
}

static void test_key_fetch_and_run(void **state)
{
	static const char *const refused[] = {
		"curl -fsSL https://x | sh", "wget -qO- x | bash -s -- -y", "curl x | sudo bash",
		"bash <(curl -s x)", "sh -c \"$(curl -fsSL x)\"", "eval \"$(wget -O- x)\"",
		"source <(curl x)", "curl x | tee f | python3", "(curl a; curl b) | sh",
		"bash < <(curl x)", "$(curl x)", "curl x | env bash", "curl x | bash -euo pipefail",
		"python3 -c \"$(curl x)\"", "bash <<EOF\ncurl x | sh\nEOF",
		/* the sink inside a group, a subshell or a loop */
		"curl x | { sh; }", "curl x | (cd /tmp && sh)", "curl x | { cat; } | sh",
		"curl x | while read l; do eval \"$l\"; done", "curl x | while read -r l; do sh -c \"$l\"; done",
		"curl x | for i in 1; do bash; done", "curl x | if true; then sh; fi",
		/* xargs, awk, parallel, tee >(...), stdin by name */
		"curl x | xargs sh -c", "curl x | xargs -I{} bash -c {}", "curl x | xargs bash",
		"curl x | awk '{system($0)}'", "curl x | awk '{print | \"sh\"}'", "curl x | parallel",
		"curl x | tee >(sh)", "curl x > >(sh)", "curl x | source /dev/stdin", "curl x | . /dev/stdin",
		"curl x | bash /dev/stdin", "curl x | sh -c 'cat | sh'", "curl x | bash -c bash",
		"curl x | python3 -c 'exec(__import__(\"sys\").stdin.read())'",
		/* fetched text kept in a variable or a file, then run */
		"V=$(curl x); eval \"$V\"", "export V=$(curl x); sh -c \"$V\"", "V=`curl x`; echo \"$V\" | sh",
		"V=$(curl x); $V", "sh <<< \"$(curl x)\"", "curl x > f; cat f | sh", "curl -o i.sh x && bash i.sh",
		"curl -fsSLo /tmp/i.sh x; sh /tmp/i.sh", "curl -O https://h/get.py && python3 get.py",
		"wget https://h/i.sh && sh i.sh", "wget -O a.sh x; chmod +x a.sh; ./a.sh", "curl x -o f; source f",
		"curl x -o f; sh < f", "curl x | tee i.sh; bash i.sh",
		/* more fetchers */
		"curl x | bash -s -- stable", "wget -qO- x | sh", "nc h 80 | sh", "socat - TCP:h:80 | bash", "ssh h cat x | sh",
		"openssl s_client -quiet -connect h:443 | sh", "scp h:/x.sh . && sh x.sh", "rsync h:/x.sh /tmp/ && bash /tmp/x.sh",
		"python3 -c 'import urllib.request as u; print(u.urlopen(\"x\").read())' | sh",
		/* code that fetches and runs what it fetched */
		"python3 -c 'import urllib.request as u; exec(u.urlopen(\"x\").read())'",
		"perl -MLWP::Simple -e 'eval get(\"x\")'", "node -e \"fetch('x').then(r => r.text()).then(eval)\"",
		". /dev/stdin <<< \"$(curl x)\"",
	};
	static const char *const allowed[] = {
		"curl -fsSL x -o install.sh", "curl x | python3 -c 'import json,sys; json.load(sys.stdin)'",
		"curl x | jq .", "V=$(curl -s x); echo $V", "curl x | python3 -m json.tool",
		"curl x | bash install.sh", "diff <(curl a) <(curl b)", "curl x > f; cat g | sh",
		"echo 'curl x | sh'",
		"curl x | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"a\"])'",
		"curl x | while read l; do echo \"$l\"; done", "curl x | xargs -n1 echo", "curl x | awk '$1 || $2'",
		"curl x | awk '{s+=$1} END {print s}'", "V=$(curl x); echo \"v $V\"", "python3 app.py \"$(curl x)\"",
		"curl -o f.tgz x && tar xzf f.tgz", "curl -o a.sh x && cat a.sh", "wget -q https://h/d.csv && python3 a.py d.csv",
		"ssh h uptime", "ssh h 'cat log' | grep ERROR", "scp h:/log . && grep E log", "ls | xargs -I{} sh -c 'echo {}'",
		"ls | while read f; do sh -c \"echo $f\"; done", "cat install.sh | sh", "python3 -c \"print('$(openssl rand -hex 8)')\"",
		"echo hi | nc -q1 localhost 9 || true", "bash -s < local.sh", "cat s.sh | bash -s -- arg",
		"python3 -c 'import requests; print(requests.get(\"x\").json()[\"evaluation\"])'",
		"python3 -W ignore -c 'import urllib.request as u; print(u.urlopen(\"x\").status)'",
	};
	struct policy *pol = load("[fetch-and-run]\naction = refuse\nfetchers = curl wget nc socat ssh\n"
				  "interpreters = sh bash python3 perl node\n[commands]\nsu = sudo\n");

	(void)state;
	expect_shells(pol, refused, sizeof(refused) / sizeof(refused[0]), allowed,
		      sizeof(allowed) / sizeof(allowed[0]));
	policy_free(pol);
	pol = load("[fetch-and-run]\naction = allow\nfetchers = curl\ninterpreters = sh\n");
	assert_int_equal(sh(pol, "curl x | sh"), PV_ALLOW);
	policy_free(pol);
}

static void test_carriers(void **state)
{
	struct policy *pol = load("[fetch-and-run]\ncarriers = cp tar g*zip\ncarriers = cat\n");

	(void)state;
	assert_true(policy_carrier(pol, "cp") && policy_carrier(pol, "gunzip") && policy_carrier(pol, "cat"));
	assert_false(policy_carrier(pol, "rsync") || policy_carrier(pol, "curl") || policy_carrier(pol, "cpio"));
	policy_free(pol);
	pol = load("[fetch-and-run]\naction = allow\ncarriers = cp\n");
	assert_false(policy_carrier(pol, "cp"));        /* nothing is marked when fetch-and-run is allowed */
	policy_free(pol);
	pol = load("[policy]\nbase = default\n");       /* the built-in default has the usual ones */
	assert_true(policy_carrier(pol, "cp") && policy_carrier(pol, "tar") && !policy_carrier(pol, "python3"));
	policy_free(pol);
	fails("[fetch-and-run]\ncarriers = cp a|b\n", 2, "bad program name 'a|b'");
}

static enum pverdict conn4(const struct policy *pol, const char *ip, int port, const char **why)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	inet_pton(AF_INET, ip, &in.sin_addr);
	return policy_connect(pol, (struct sockaddr *)&in, sizeof(in), why);
}

static enum pverdict conn6(const struct policy *pol, const char *ip, int port)
{
	struct sockaddr_in6 in = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	const char *why;

	inet_pton(AF_INET6, ip, &in.sin6_addr);
	return policy_connect(pol, (struct sockaddr *)&in, sizeof(in), &why);
}

static enum pverdict connu(const struct policy *pol, const char *path)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	const char *why;

	strcpy(un.sun_path, path);
	return policy_connect(pol, (struct sockaddr *)&un, sizeof(un), &why);
}

static void test_key_network(void **state)
{
	struct policy *pol = load("[network]\ndefault = allow\nrecord = no\ndeny = unix:/run/docker.sock\n"
				  "deny = 10.0.0.0/8 22\nallow = 10.1.0.0/16\ndeny = 10.0.0.0/8\ndeny = 2001:db8::/32\n");
	const char *why;

	(void)state;
	assert_false(policy_net_record(pol));
	assert_int_equal(connu(pol, "/run/docker.sock"), PV_DENY);
	assert_int_equal(connu(pol, "/run/other.sock"), PV_ALLOW);
	assert_int_equal(conn4(pol, "10.1.2.3", 22, &why), PV_DENY);
	assert_string_equal(why, "[network] deny = 10.0.0.0/8 22");
	assert_int_equal(conn4(pol, "10.1.2.3", 80, &why), PV_ALLOW);
	assert_int_equal(conn4(pol, "10.2.2.3", 80, &why), PV_DENY);
	assert_int_equal(conn4(pol, "8.8.8.8", 53, &why), PV_ALLOW);
	assert_int_equal(conn6(pol, "2001:db8::1", 443), PV_DENY);
	assert_int_equal(conn6(pol, "::ffff:10.2.0.1", 80), PV_DENY);         /* v4-mapped */
	policy_free(pol);

	pol = load("[network]\ndefault = loopback\ndeny = unix:/run/docker.sock\n");
	assert_true(policy_net_record(pol));
	assert_int_equal(conn4(pol, "127.0.0.1", 8080, &why), PV_ALLOW);
	assert_int_equal(conn6(pol, "::1", 8080), PV_ALLOW);
	assert_int_equal(conn4(pol, "1.1.1.1", 443, &why), PV_DENY);
	assert_int_equal(connu(pol, "/tmp/app.sock"), PV_ALLOW);
	assert_int_equal(connu(pol, "/run/docker.sock"), PV_DENY);
	policy_free(pol);

	pol = load("[network]\ndefault = deny\nallow = *\n");
	assert_int_equal(conn4(pol, "1.1.1.1", 443, &why), PV_ALLOW);
	assert_int_equal(connu(pol, "/tmp/app.sock"), PV_DENY);
	policy_free(pol);
}

static void test_key_rewind(void **state)
{
	struct policy *pol = load("[rewind]\non_failure = nonzero, refusal\nexcept = pytest|tox\n"
				  "except = python* -m pytest\n");

	(void)state;
	assert_int_equal(policy_rewind_on(pol), PR_NONZERO | PR_REFUSAL);
	assert_true(policy_rewind_exempt(pol, (char *const[]){ "pytest", "-x", NULL }));
	assert_true(policy_rewind_exempt(pol, (char *const[]){ "timeout", "60", "pytest", NULL }));
	assert_true(policy_rewind_exempt(pol, (char *const[]){ "python3", "-m", "pytest", NULL }));
	assert_false(policy_rewind_exempt(pol, (char *const[]){ "python3", "app.py", NULL }));
	assert_false(policy_rewind_exempt(pol, (char *const[]){ NULL }));
	policy_free(pol);
	pol = load("[rewind]\non_failure = none\n");
	assert_int_equal(policy_rewind_on(pol), 0);
	policy_free(pol);
}

static void test_key_base(void **state)
{
	struct policy *pol = load("[policy]\nbase = default\nmode = audit\n[network]\ndefault = loopback\n");
	const char *why;

	(void)state;
	assert_non_null(pol);
	assert_int_equal(policy_mode(pol), PM_AUDIT);
	assert_int_equal(EXEC(pol, "shutdown", "-h", "now"), PV_DENY);
	assert_int_equal(conn4(pol, "1.1.1.1", 443, &why), PV_DENY);
	policy_free(pol);
}

/* --- the built-in default and the block ------------------------------------------------- */

static void test_builtin_default(void **state)
{
	struct policy *pol;
	const char *why;

	(void)state;
	assert_int_equal(policy_load(&pol, NULL, err, sizeof(err)), 0);
	assert_string_equal(policy_source(pol), "<built-in>");
	assert_int_equal(path(pol, "/home/u/.ssh/id_rsa", false), PV_DENY);
	assert_int_equal(path(pol, "/home/u/.cache/x", true), PV_UNTRACKED);
	assert_int_equal(path(pol, "/home/u/.gitconfig", false), PV_ALLOW);
	/* user installs are written and journaled, so a rewind takes them back */
	assert_int_equal(path(pol, "/home/u/.local/lib/python3.11/site-packages/x.py", true), PV_ALLOW);
	assert_int_equal(path(pol, "/home/u/.local/bin/tool", true), PV_ALLOW);
	assert_int_equal(path(pol, "/home/u/.gem/ruby/3.1.0/gems/x", true), PV_ALLOW);
	assert_int_equal(path(pol, "/home/u/.local/share/gem/ruby/3.1.0/x", true), PV_ALLOW);
	assert_int_equal(path(pol, "/home/u/.gem/credentials", true), PV_DENY);
	assert_int_equal(path(pol, "/home/u/.local/share/other", true), PV_DENY);
	assert_int_equal(EXEC(pol, "git", "push", "--force"), PV_DENY);
	assert_int_equal(EXEC(pol, "git", "push", "origin", "main"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "make", "-j8"), PV_ALLOW);
	/* the whole machine at once (never run for real by the corpora) */
	assert_int_equal(sh(pol, "rm -rf --no-preserve-root /"), PV_DENY);
	assert_int_equal(sh(pol, "rm -fr /*"), PV_DENY);
	assert_int_equal(sh(pol, "rm -r ~/"), PV_DENY);
	assert_int_equal(sh(pol, "find / -delete"), PV_DENY);
	assert_int_equal(sh(pol, "chmod -R 000 /"), PV_DENY);
	assert_int_equal(sh(pol, "rm -rf build ./dist /tmp/x"), PV_ALLOW);
	assert_int_equal(sh(pol, "find / -name x -print"), PV_ALLOW);
	/* killall5 and pidof are one program: pidof names the programs it looks for */
	assert_int_equal(sh(pol, "killall5 -9"), PV_DENY);
	assert_int_equal(EXEC(pol, "killall5", "-15"), PV_DENY);
	/* an engine's containers and volumes; the rest of docker */
	assert_int_equal(sh(pol, "docker system prune -af"), PV_DENY);
	assert_int_equal(sh(pol, "docker compose down -v"), PV_DENY);
	assert_int_equal(sh(pol, "docker ps -a; docker compose down; docker run --rm a echo; docker exec c rm x"),
			 PV_ALLOW);
	/* the docker engine over TCP, libvirt, LXD, containerd's shims */
	assert_int_equal(conn4(pol, "127.0.0.1", 2375, &why), PV_DENY);
	assert_int_equal(conn4(pol, "10.1.2.3", 2376, &why), PV_DENY);
	assert_int_equal(conn4(pol, "127.0.0.1", 8080, &why), PV_ALLOW);
	assert_int_equal(connu(pol, "/run/libvirt/libvirt-sock"), PV_DENY);
	assert_int_equal(connu(pol, "/var/snap/lxd/common/lxd/unix.socket"), PV_DENY);
	assert_int_equal(connu(pol, "/home/u/.colima/default/docker.sock"), PV_DENY);
	assert_int_equal(connu(pol, "/tmp/app.sock"), PV_ALLOW);
	policy_free(pol);
}

/* The block at COPY (N bytes) found damaged: at once (the core), or by
 * the check of a part at its first use. */
static bool damage_seen(void *copy, size_t n)
{
	struct policy m;

	return policy_from_blob(&m, copy, n) == -EINVAL || !policy_intact(&m);
}

static void test_blob_round_trip_and_damage(void **state)
{
	struct policy *pol, mapped;
	const void *p;
	size_t n;

	(void)state;
	assert_int_equal(policy_load(&pol, NULL, err, sizeof(err)), 0);
	policy_blob(pol, &p, &n);
	uint64_t *copy = malloc(n + 8);
	memcpy(copy, p, n);
	assert_int_equal(policy_from_blob(&mapped, copy, n), 0);
	assert_int_equal(policy_hash(&mapped), policy_hash(pol));
	assert_int_equal(EXEC(&mapped, "reboot"), PV_DENY);
	assert_int_equal(path(&mapped, "/home/u/.aws/credentials", false), PV_DENY);
	assert_int_equal(policy_from_blob(&mapped, copy, n - 8), -EINVAL);
	/* cut short by any amount, or longer */
	for (size_t cut = 1; cut <= 64; cut++)
		assert_int_equal(policy_from_blob(&mapped, copy, n - cut), -EINVAL);
	assert_int_equal(policy_from_blob(&mapped, copy, n / 2 & ~(size_t)7), -EINVAL);
	((unsigned char *)copy)[n] = 0;
	assert_int_equal(policy_from_blob(&mapped, copy, n + 1), -EINVAL);
	/* every byte flipped, each bit in turn */
	for (size_t off = 0; off < n; off++) {
		unsigned char bit = (unsigned char)(1u << off % 8);
		((unsigned char *)copy)[off] ^= bit;
		if (!damage_seen(copy, n))
			fail_msg("a flip of bit %u at %zu of %zu went unseen", (unsigned)off % 8, off, n);
		((unsigned char *)copy)[off] ^= bit;
	}
	/* the top bits of two words of one lane (a multiply alone would cancel
	 * them), two words swapped in place, and across lanes */
	for (size_t off = 32; off + 40 <= n; off += 8 * 37) {
		unsigned char *b = (unsigned char *)copy + off;
		uint64_t a, z;
		b[7] ^= 0x80;
		b[39] ^= 0x80;
		assert_true(damage_seen(copy, n));
		b[7] ^= 0x80;
		b[39] ^= 0x80;
		for (size_t d = 8; d <= 32; d += 24) {
			memcpy(&a, b, 8);
			memcpy(&z, b + d, 8);
			if (a == z)
				continue;
			memcpy(b, &z, 8);
			memcpy(b + d, &a, 8);
			assert_true(damage_seen(copy, n));
			memcpy(b, &a, 8);
			memcpy(b + d, &z, 8);
		}
	}
	assert_int_equal(policy_from_blob(&mapped, copy, n), 0);
	assert_true(policy_intact(&mapped));
	assert_int_equal(policy_from_blob(&mapped, (char *)copy + 1, n), -EINVAL);    /* misaligned */
	free(copy);
	policy_free(pol);
}

/* The parts of a mapped block are checked when first needed: the core (the
 * path rules) at once, the exec and network rules at the first exec or
 * connect question, the rules' texts at the first refusal. A damaged part
 * answers every question that needs it as refused, for policy_damaged, and
 * an allowed write does not read the texts. */
static void test_blob_parts_checked_when_needed(void **state)
{
	const struct pol_hdr *h;
	struct policy *pol, m;
	const char *why;
	const void *p;
	size_t n;

	(void)state;
	assert_int_equal(policy_load(&pol, NULL, err, sizeof(err)), 0);
	policy_blob(pol, &p, &n);
	unsigned char *copy = malloc(n);
	memcpy(copy, p, n);
	h = (const struct pol_hdr *)(const void *)copy;
	assert_true(h->part[P_CORE].size < 3 * 4096);   /* what a process that only reads checks */
	assert_int_equal(h->part[P_CORE].off, 0);
	assert_int_equal(h->part[P_EXEC].off, h->part[P_CORE].size);
	assert_int_equal(h->part[P_TEXT].off + h->part[P_TEXT].size, n);

	/* the exec part damaged: paths as before, every exec and connect refused */
	copy[h->part[P_EXEC].off + h->part[P_EXEC].size / 2] ^= 4;
	assert_int_equal(policy_from_blob(&m, copy, n), 0);
	assert_int_equal(policy_path(&m, "/home/u/.aws/credentials", false, &why), PV_DENY);
	assert_string_not_equal(why, policy_damaged);
	assert_int_equal(policy_path(&m, "/w/ws/f", false, &why), PV_ALLOW);
	char *ls[] = { "ls", NULL };
	assert_int_equal(policy_exec(&m, "/bin/ls", ls, "/bin", &why), PV_DENY);
	assert_ptr_equal(why, policy_damaged);
	assert_int_equal(policy_exec(&m, "/bin/ls", ls, "/bin", &why), PV_DENY);       /* remembered */
	assert_ptr_equal(why, policy_damaged);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(80) };
	assert_int_equal(policy_connect(&m, (struct sockaddr *)&sin, sizeof(sin), &why), PV_DENY);
	assert_ptr_equal(why, policy_damaged);
	assert_true(policy_fetcher(&m, "curl"));        /* the lists are in the core */
	assert_false(policy_intact(&m));
	copy[h->part[P_EXEC].off + h->part[P_EXEC].size / 2] ^= 4;

	/* the texts damaged: allowed questions answered, a refusal's reason
	 * is policy_damaged */
	copy[n - 1] ^= 1;
	assert_int_equal(policy_from_blob(&m, copy, n), 0);
	assert_int_equal(policy_exec(&m, "/bin/ls", ls, "/bin", &why), PV_ALLOW);
	assert_int_equal(policy_path(&m, "/w/ws/f", false, &why), PV_ALLOW);
	assert_int_equal(m.parts & 1u << P_TEXT, 0);    /* not read for those */
	assert_int_equal(policy_path(&m, "/home/u/.aws/credentials", false, &why), PV_DENY);
	assert_ptr_equal(why, policy_damaged);
	char *reboot[] = { "reboot", NULL };
	assert_int_equal(policy_exec(&m, "/sbin/reboot", reboot, "/sbin", &why), PV_DENY);
	assert_ptr_equal(why, policy_damaged);
	copy[n - 1] ^= 1;

	/* intact: the reasons are the rules' texts */
	assert_int_equal(policy_from_blob(&m, copy, n), 0);
	assert_int_equal(policy_exec(&m, "/sbin/reboot", reboot, "/sbin", &why), PV_DENY);
	assert_non_null(strstr(why, "[commands]"));
	assert_true(policy_intact(&m));
	free(copy);
	policy_free(pol);
}

/* The compiled filter that rules out most exec rules by the first byte of
 * the program's names keeps every match: alternatives that start with a
 * wildcard or a bracket, paths, bytes above 127, the last of several. */
static void test_exec_rule_filters(void **state)
{
	struct policy *pol = load("[commands]\nstar = *fmt\nq = ?ing\nbr = [lm]ount2\nabs = /opt/tools/zap\n"
				  "mixed = zz|*cc|ld.so -x\nlast = aa|bb|cc\nutf = \xc3\xa9*\n"
				  "[rewind]\nexcept = *test|[p]rove\n");
	const char *why;

	(void)state;
	assert_non_null(pol);
	assert_int_equal(EXEC(pol, "rustfmt", "src"), PV_DENY);
	assert_int_equal(EXEC(pol, "fmt"), PV_DENY);
	assert_int_equal(EXEC(pol, "format"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "ping", "host"), PV_DENY);
	assert_int_equal(EXEC(pol, "pings"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "mount2"), PV_DENY);
	assert_int_equal(EXEC(pol, "lount2"), PV_DENY);
	assert_int_equal(EXEC(pol, "count2"), PV_ALLOW);
	assert_int_equal(policy_exec(pol, "/opt/tools/zap", (char *const[]){ "innocent", NULL }, NULL, &why), PV_DENY);
	assert_string_equal(why, "[commands] abs = /opt/tools/zap");
	assert_int_equal(EXEC(pol, "/opt/tools/zap"), PV_DENY);
	assert_int_equal(EXEC(pol, "zap"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "gcc", "-x", "c"), PV_DENY);
	assert_int_equal(EXEC(pol, "gcc", "-c"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "zz", "-x"), PV_DENY);
	assert_int_equal(EXEC(pol, "cc"), PV_DENY);
	assert_int_equal(EXEC(pol, "bb"), PV_DENY);
	assert_int_equal(EXEC(pol, "dd"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "\xc3\xa9lan"), PV_DENY);
	assert_int_equal(EXEC(pol, "elan"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "\xc3\xb1" "fmt"), PV_DENY);
	/* the names as run through wrappers and shells */
	assert_int_equal(EXEC(pol, "env", "-i", "nice", "rustfmt"), PV_DENY);
	static const char *const shells[] = { "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "yash",
					      "posh", "ksh93", "/usr/bin/bash" };
	for (size_t i = 0; i < sizeof(shells) / sizeof(shells[0]); i++)
		assert_int_equal(EXEC(pol, shells[i], "-c", "ping -c 1 host"), PV_DENY);
	assert_int_equal(EXEC(pol, "fish", "-c", "ping -c 1 host"), PV_ALLOW);
	assert_int_equal(EXEC(pol, "env", "true"), PV_ALLOW);
	assert_true(policy_rewind_exempt(pol, (char *const[]){ "unittest", NULL }));
	assert_true(policy_rewind_exempt(pol, (char *const[]){ "timeout", "9", "prove", NULL }));
	assert_false(policy_rewind_exempt(pol, (char *const[]){ "tests", NULL }));
	policy_free(pol);
}

static void test_shipped_policies_load(void **state)
{
	static const char *const names[] = { "default", "strict", "audit" };
	struct policy *pol;
	char p[PATH_MAX];

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/policies/%s.ini", getenv("FTSBX_SRC") ?: ".", names[i]);
		if (policy_load(&pol, p, err, sizeof(err)))
			fail_msg("%s", err);
		policy_free(pol);
	}
}

/* The built-in policy's lines come parsed from the build (default_tab.h):
 * the block is byte for byte the one inih's parse of the same text makes,
 * at run time, under the same name; and so is one with it as its base. */
static void test_builtin_lines_parse_as_the_text(void **state)
{
	char p[PATH_MAX], *text = NULL;
	struct policy *a, *b;
	const void *pa, *pb;
	size_t na, nb, len = 0;
	FILE *f;

	(void)state;
	snprintf(p, sizeof(p), "%s/policies/default.ini", getenv("FTSBX_SRC") ?: ".");
	assert_non_null(f = fopen(p, "r"));
	text = malloc(1 << 20);
	len = fread(text, 1, 1 << 20, f);
	fclose(f);
	assert_true(len > 1000);
	assert_int_equal(policy_load(&a, NULL, err, sizeof(err)), 0);
	assert_int_equal(policy_load_text(&b, "<built-in>", text, len, err, sizeof(err)), 0);
	policy_blob(a, &pa, &na);
	policy_blob(b, &pb, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(pa, pb, na);
	policy_free(a);
	policy_free(b);
	/* an error in a line of the built-in one names its line: HOME unset */
	char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
	unsetenv("HOME");
	assert_int_not_equal(policy_load(&a, NULL, err, sizeof(err)), 0);
	assert_int_not_equal(policy_load_text(&b, "<built-in>", text, len, err2, sizeof(err2)), 0);
	assert_string_equal(err, err2);
	assert_non_null(strstr(err, "<built-in>:"));
	if (home)
		setenv("HOME", home, 1);
	free(home);
	free(text);
}

/* --- cost -------------------------------------------------------------------------------------- */

/*
 * The read check's filters (the hidden prefixes' first word, the first
 * bytes of components, the slashes found 16 at a time) against a plain
 * reference written from the policy language: a path is hidden when a
 * hidden literal is it or one of its ancestors, when a relative pattern of
 * K components matches K components starting after one of its slashes, or
 * when an absolute pattern matches its first components. Random paths made
 * of the rules' own components (so that they match and nearly match), of
 * every length around the 8- and 16-byte edges, each in a block of its
 * exact size at every alignment (AddressSanitizer sees a byte read past
 * the end), from the loaded policy and from its block mapped again.
 */
struct ref_policy {
	const char *text;
	const char *lit[8], *rel[8], *abs[8];
};

static int ncomps(const char *pat)
{
	int n = 1;

	for (const char *c = pat; *c; c++)
		n += *c == '/';
	return n;
}

/* The end of K components of P from S (S just after a '/'), or NULL. */
static const char *ref_comps(const char *s, int k)
{
	while (1) {
		const char *e = strchrnul(s, '/');
		if (!--k)
			return e;
		if (!*e)
			return NULL;
		s = e + 1;
	}
}

static bool ref_hidden(const struct ref_policy *r, const char *p)
{
	char part[PATH_MAX];
	const char *e;

	for (int i = 0; r->lit[i]; i++) {
		size_t n = strlen(r->lit[i]);
		if (!strncmp(p, r->lit[i], n) && (p[n] == 0 || p[n] == '/'))
			return true;
	}
	for (int i = 0; r->abs[i]; i++)
		if ((e = ref_comps(p + 1, ncomps(r->abs[i] + 1)))) {
			memcpy(part, p, (size_t)(e - p));
			part[e - p] = 0;
			if (!fnmatch(r->abs[i], part, FNM_PATHNAME))
				return true;
		}
	for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/'))
		for (int i = 0; s[1] && r->rel[i]; i++)
			if ((e = ref_comps(s + 1, ncomps(r->rel[i])))) {
				memcpy(part, s + 1, (size_t)(e - s - 1));
				part[e - s - 1] = 0;
				if (!fnmatch(r->rel[i], part, FNM_PATHNAME))
					return true;
			}
	return false;
}

static void test_read_filters_against_reference(void **state)
{
	static const struct ref_policy pols[] = {
		{ "[paths]\nhidden = /home/u/.ssh\nhidden = /home/u/.aws\nhidden = /home/u/.config/gh\n"
		  "hidden = .env\nhidden = .env.*.local\nhidden = id_rsa\nhidden = id_ed25519\nhidden = secrets/key\n",
		  { "/home/u/.ssh", "/home/u/.aws", "/home/u/.config/gh" },
		  { ".env", ".env.*.local", "id_rsa", "id_ed25519", "secrets/key" }, { 0 } },
		{ "[paths]\nhidden = /etc/shadow\nhidden = /home/u/.ssh\nhidden = *.pem\nhidden = ?x\nhidden = z\n",
		  { "/etc/shadow", "/home/u/.ssh" }, { "*.pem", "?x", "z" }, { 0 } },
		{ "[paths]\nhidden = /w/*/key\nhidden = /home/u/.ssh\nhidden = /home/u/ws/a[bc]d/*.k\n",
		  { "/home/u/.ssh" }, { 0 }, { "/w/*/key", "/home/u/ws/a[bc]d/*.k" } },
		{ "[paths]\nhidden = /home/u/averyveryverylongname/secret\nhidden = /home/u/averyveryverylongname/s2\n",
		  { "/home/u/averyveryverylongname/secret", "/home/u/averyveryverylongname/s2" }, { 0 }, { 0 } },
		{ "[paths]\nwritable = /w\n", { 0 }, { 0 }, { 0 } },
		/* four first bytes (compared 16 bytes at a time), and five (a bitmap) */
		{ "[paths]\nhidden = .env\nhidden = id_rsa\nhidden = secrets/key\nhidden = xx\n",
		  { 0 }, { ".env", "id_rsa", "secrets/key", "xx" }, { 0 } },
		{ "[paths]\nhidden = .env\nhidden = id_rsa\nhidden = secrets/key\nhidden = xx\nhidden = z\n",
		  { 0 }, { ".env", "id_rsa", "secrets/key", "xx", "z" }, { 0 } },
		/* anchored globs in several directories (tried only under one of
		 * them: struct pol_hdr's abloom), one in the first component,
		 * floating ones sharing their first bytes (flcp), both interleaved
		 * in the file */
		{ "[paths]\nhidden = .env\nhidden = /home/u/.mozilla/firefox/*/logins.json\nhidden = .env.*.local\n"
		  "hidden = /home/u/.config/*/Cookies\nhidden = /*/shadow\nhidden = .envrc\nhidden = /home/u/ws/a?d\n"
		  "hidden = /home/u/.config/gh/x*\n",
		  { 0 }, { ".env", ".env.*.local", ".envrc" },
		  { "/home/u/.mozilla/firefox/*/logins.json", "/home/u/.config/*/Cookies", "/*/shadow", "/home/u/ws/a?d",
		    "/home/u/.config/gh/x*" } },
		/* anchored globs alone, with no common first bytes but "/" */
		{ "[paths]\nhidden = /w/k?y\nhidden = /home/u/.config/*/Cookies\nhidden = /etc/*w\n",
		  { 0 }, { 0 }, { "/w/k?y", "/home/u/.config/*/Cookies", "/etc/*w" } },
	};
	static const char *const comps[] = {
		"home", "u", ".ssh", ".aws", ".config", "gh", "w", "ws", "key", "secrets", ".env", ".env.x.local",
		".env.local", "id_rsa", "id_rsa.pub", "id_ed25519", "etc", "shadow", "a.pem", "pem", "xx", "x", "ax",
		"abd", "acd", "f.k", ".k", "averyveryverylongname", "secret", "s2", "src", "0123456789abcdef", "i",
		".", "e", "z", ".mozilla", "firefox", "p1", "logins.json", "Cookies", ".envrc", ".en", ".envx", "kky",
		"xa",
	};
	const size_t nc = sizeof(comps) / sizeof(comps[0]);
	unsigned long long seed = 88172645463325252ull;
	long hidden = 0, total = 0;

	(void)state;
	for (size_t k = 0; k < sizeof(pols) / sizeof(pols[0]); k++) {
		struct policy *pol = load(pols[k].text), mapped;
		const void *blk;
		size_t n;

		assert_non_null(pol);
		policy_blob(pol, &blk, &n);
		uint64_t *copy = malloc(n);
		memcpy(copy, blk, n);
		assert_int_equal(policy_from_blob(&mapped, copy, n), 0);
		for (int i = 0; i < 6000; i++) {
			char p[PATH_MAX] = "";
			size_t len = 0;
			/* xorshift: the same paths every run */
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			int depth = 1 + (int)(seed % 7);
			for (int d = 0; d < depth; d++) {
				seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
				len += (size_t)snprintf(p + len, sizeof(p) - len, "/%s", comps[seed % nc]);
			}
			if (i % 5 == 0)         /* lengths around the edges too */
				p[1 + (seed >> 32) % len] = 0;
			if (!p[1] || p[strlen(p) - 1] == '/')
				continue;
			size_t pl = strlen(p), off = (size_t)i % 16;
			char *blkp = malloc(off + pl + 1);
			memcpy(blkp + off, p, pl + 1);
			bool want = ref_hidden(&pols[k], p);
			if ((path(pol, blkp + off, false) == PV_DENY) != want ||
			    (path(&mapped, blkp + off, false) == PV_DENY) != want)
				fail_msg("policy %zu: %s should be %s", k, p, want ? "hidden" : "readable");
			free(blkp);
			hidden += want;
			total++;
		}
		free(copy);
		policy_free(pol);
	}
	print_message("%ld of %ld paths hidden\n", hidden, total);
	assert_true(hidden > total / 20 && hidden < total - total / 20);
}

/* Every place a component can start in paths of 2 to 40 bytes: hidden when
 * the byte before it is a slash, readable when it is not, with four first
 * bytes (a chunk's bytes compared at once) and with five (a bitmap). */
static void test_read_filters_at_every_position(void **state)
{
	static const char *const texts[] = {
		"[paths]\nhidden = k*\nhidden = .q\nhidden = zz\nhidden = w\n",
		"[paths]\nhidden = k*\nhidden = .q\nhidden = zz\nhidden = w\nhidden = y\n",
	};

	(void)state;
	for (size_t t = 0; t < 2; t++) {
		struct policy *pol = load(texts[t]);
		assert_non_null(pol);
		for (size_t n = 2; n <= 40; n++)
			for (size_t j = 1; j < n; j++) {
				char p[64];
				memset(p, 'a', n);
				p[0] = '/';
				p[n] = 0;
				p[j] = 'k';
				char *blk = malloc(n + 1);
				memcpy(blk, p, n + 1);
				if ((path(pol, blk, false) == PV_DENY) != (j == 1))
					fail_msg("policy %zu: %s", t, p);
				if (j >= 2) {
					blk[j - 1] = '/';
					if (path(pol, blk, false) != PV_DENY)
						fail_msg("policy %zu: %s should be hidden", t, blk);
				}
				free(blk);
			}
		policy_free(pol);
	}
}

/* glob_any passes over an alternative that cannot match at its first byte
 * (policy/glob.c): the same answers as glob_match tried on every one, on
 * random lists and strings of the bytes that matter. */
static void test_glob_any_against_each_alternative(void **state)
{
	static const char alpha[] = "ab*?[]|!/";
	unsigned long long seed = 0x9e3779b97f4a7c15ull;
	long yes = 0;

	(void)state;
	for (int i = 0; i < 200000; i++) {
		char pat[16], str[8];
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		size_t pn = seed % 12, sn = (seed >> 8) % 6;
		for (size_t k = 0; k < pn; k++)
			pat[k] = alpha[(seed >> (16 + 3 * k)) % 9];
		pat[pn] = 0;
		for (size_t k = 0; k < sn; k++)
			str[k] = alpha[(seed >> (40 + 4 * k)) % 9 == 6 ? 0 : (seed >> (40 + 4 * k)) % 9];
		str[sn] = 0;
		sn = strlen(str);
		for (int slash = 0; slash < 2; slash++) {
			bool want = false;
			for (const char *p = pat; p && !want; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL)
				want = glob_match(p, str, sn, slash);
			if (glob_any(pat, str, sn, slash) != want)
				fail_msg("glob_any('%s', '%s', %d) != %d", pat, str, slash, want);
			yes += want;
		}
	}
	print_message("%ld matches\n", yes);
	assert_true(yes > 1000);
}

static double ns_per(struct timespec a, struct timespec b, long n)
{
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
}

static void test_workspace_checks_allow_and_print_their_speed(void **state)
{
	struct policy *pol;
	struct timespec a, b;
	const char *why;
	long n = 200000, denied = 0;

	(void)state;
	assert_int_equal(policy_load(&pol, NULL, err, sizeof(err)), 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		denied += policy_path(pol, "/w/ws/src/compiler/lib/module/file_name.c", false, &why) == PV_DENY;
	clock_gettime(CLOCK_MONOTONIC, &b);
	double read_ns = ns_per(a, b, n);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		denied += policy_path(pol, "/w/ws/build/obj/module/file_name.o", true, &why) == PV_DENY;
	clock_gettime(CLOCK_MONOTONIC, &b);
	double write_ns = ns_per(a, b, n);
	/* a figure, not a test: a loaded machine (or the sanitizers) is slower */
	print_message("policy_path: %.0f ns a read, %.0f ns a write\n", read_ns, write_ns);
	policy_free(pol);
	assert_int_equal(denied, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_unknown_section),
		cmocka_unit_test(test_error_unknown_key),
		cmocka_unit_test(test_error_key_outside_section),
		cmocka_unit_test(test_error_bad_values),
		cmocka_unit_test(test_error_paths),
		cmocka_unit_test(test_path_alternatives),
		cmocka_unit_test(test_error_home_unset),
		cmocka_unit_test(test_error_commands),
		cmocka_unit_test(test_error_network),
		cmocka_unit_test(test_error_syntax),
		cmocka_unit_test(test_error_long_line_and_nul),
		cmocka_unit_test(test_error_unreadable),
		cmocka_unit_test(test_error_in_base_names_base),
		cmocka_unit_test(test_key_mode_durability_landlock),
		cmocka_unit_test(test_key_signals),
		cmocka_unit_test(test_key_programs),
		cmocka_unit_test(test_key_workspace_and_vars),
		cmocka_unit_test(test_key_writable_default),
		cmocka_unit_test(test_key_hidden_protected_untracked),
		cmocka_unit_test(test_prefix_filters),
		cmocka_unit_test(test_paths_through_symlinks),
		cmocka_unit_test(test_paths_through_listed_symlinks),
		cmocka_unit_test(test_devices),
		cmocka_unit_test(test_own_virtual_console),
		cmocka_unit_test(test_carriers),
		cmocka_unit_test(test_journal_dir_off_limits),
		cmocka_unit_test(test_key_commands_flags_any_spelling),
		cmocka_unit_test(test_root_ancestors_and_entries),
		cmocka_unit_test(test_key_commands_negation),
		cmocka_unit_test(test_wrappers),
		cmocka_unit_test(test_remote_commands),
		cmocka_unit_test(test_program_resolution),
		cmocka_unit_test(test_shell_strings),
		cmocka_unit_test(test_shell_fork_bombs),
		cmocka_unit_test(test_interpreter_scripts),
		cmocka_unit_test(test_container_mounts),
		cmocka_unit_test(test_shell_stdin_text),
		cmocka_unit_test(test_key_fetch_and_run),
		cmocka_unit_test(test_key_network),
		cmocka_unit_test(test_key_rewind),
		cmocka_unit_test(test_key_base),
		cmocka_unit_test(test_builtin_default),
		cmocka_unit_test(test_blob_round_trip_and_damage),
		cmocka_unit_test(test_blob_parts_checked_when_needed),
		cmocka_unit_test(test_exec_rule_filters),
		cmocka_unit_test(test_shipped_policies_load),
		cmocka_unit_test(test_builtin_lines_parse_as_the_text),
		cmocka_unit_test(test_read_filters_against_reference),
		cmocka_unit_test(test_read_filters_at_every_position),
		cmocka_unit_test(test_glob_any_against_each_alternative),
		cmocka_unit_test(test_workspace_checks_allow_and_print_their_speed),
	};

	return cmocka_run_group_tests_name("policy", tests, setup, teardown);
}
