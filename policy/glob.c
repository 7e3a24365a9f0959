/*
 * glob.c - the policy's own glob matcher: '*', '?' and '[...]' over a byte
 * string of known length. glibc's fnmatch may allocate (it converts to wide
 * characters in a multibyte locale), and a decision must never allocate;
 * this one is a loop with one backtracking point, as in the classic
 * wildcard matchers.
 */
#include <string.h>
#include "internal.h"

/* Match the bracket expression at P against C; *END gets the byte after
 * ']'. A '[' with no closing ']' is matched literally. */
static bool bracket(const char *p, unsigned char c, const char **end)
{
	bool neg = false, hit = false;
	const char *q = p + 1;

	if (*q == '!' || *q == '^') {
		neg = true;
		q++;
	}
	for (bool first = true; *q && (*q != ']' || first); first = false) {
		unsigned char lo = (unsigned char)*q, hi = lo;
		if (q[1] == '-' && q[2] && q[2] != ']') {
			hi = (unsigned char)q[2];
			q += 2;
		}
		if (c >= lo && c <= hi)
			hit = true;
		q++;
	}
	if (*q != ']') {
		*end = p + 1;
		return c == '[';
	}
	*end = q + 1;
	return hit != neg;
}

bool glob_match(const char *pat, const char *s, size_t n, bool slash)
{
	const char *p = pat, *star = NULL;
	size_t i = 0, mark = 0;

	while (i < n) {
		const char *next;
		if (*p == '*') {
			star = ++p;
			mark = i;
			continue;
		}
		if (*p && *p != '|' && (*p == '?' ? !(slash && s[i] == '/') :
				       *p == '[' ? bracket(p, (unsigned char)s[i], &next) :
				       *p == s[i])) {
			p = *p == '[' ? next : p + 1;
			i++;
			continue;
		}
		if (!star || (slash && s[mark] == '/'))
			return false;
		p = star;
		i = ++mark;
	}
	while (*p == '*')
		p++;
	return *p == 0 || *p == '|';
}

/* An exec's checks ask lists of names ("sh|bash|dash|zsh ...") about the
 * program some 170 times: an alternative that starts with a literal byte
 * other than the string's first is passed over without a call. */
bool glob_any(const char *pat, const char *s, size_t n, bool slash)
{
	for (const char *p = pat;; p++) {
		unsigned char c = (unsigned char)*p;
		bool may = c == '*' || c == '?' || c == '[' || (n ? c == (unsigned char)s[0] : c == 0 || c == '|');
		if (may && glob_match(p, s, n, slash))
			return true;
		p = strchr(p, '|');
		if (!p)
			return false;
	}
}

bool glob_has_magic(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] == '*' || p[i] == '?' || p[i] == '[')
			return true;
	return false;
}
