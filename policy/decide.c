/*
 * decide.c - the block (hash, checks, accessors) and the decisions on
 * paths, signals and connect(). Everything here runs inside hooks: no
 * allocation, no stdio, no locks; a path check is a few binary searches in
 * sorted prefix tables and a glob only for the rules that have wildcards.
 * A read (every open that only reads asks) is first put to a filter kept
 * in struct policy (hidden_rule): most paths are answered there, without
 * a look at the block's pages.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <netinet/in.h>
#include "internal.h"

/* A read's check (every open that only reads asks it), kept together with
 * the shim's own code of that open in .text.hot. */
#define HOT __attribute__((hot))

/*
 * The block's hash. Every process that starts checks its block, so this is
 * on the path of every exec: four independent lanes over 32-byte strides
 * (one chain waits for a multiply at every word; four overlap, and the
 * step is three instructions). Each step is a bijection of its lane for a
 * given word (xor, multiply by an odd constant, rotate), so any change of
 * one word changes that lane, and the fold at the end is a bijection in
 * each lane, so it changes the result; the length is folded in too, and
 * the tail is a zero-padded word. The hash field itself counts as zero.
 */
#define HK 0x9e3779b97f4a7c15ull

static inline uint64_t hstep(uint64_t h, uint64_t w)
{
	h = (h ^ w) * HK;
	return h << 31 | h >> 33;
}

static inline uint64_t word(const unsigned char *c)
{
	uint64_t w;

	memcpy(&w, c, 8);
	return w;
}

/* The hash of N bytes at C; SKIP16: the word at byte 16 counts as zero (the
 * core's own hash field). */
static uint64_t hash_bytes(const unsigned char *c, size_t n, bool skip16)
{
	uint64_t l0 = 0x243f6a8885a308d3ull, l1 = 0x13198a2e03707344ull, l2 = 0xa4093822299f31d0ull,
		 l3 = 0x082efa98ec4e6c89ull, h;
	size_t i = 0;

	if (n >= 32) {
		l0 = hstep(l0, word(c));
		l1 = hstep(l1, word(c + 8));
		l2 = hstep(l2, skip16 ? 0 : word(c + 16));
		l3 = hstep(l3, word(c + 24));
		for (i = 32; i + 32 <= n; i += 32) {
			l0 = hstep(l0, word(c + i));
			l1 = hstep(l1, word(c + i + 8));
			l2 = hstep(l2, word(c + i + 16));
			l3 = hstep(l3, word(c + i + 24));
		}
	}
	for (; i + 8 <= n; i += 8)
		l0 = hstep(l0, i == 16 && skip16 ? 0 : word(c + i));
	if (i < n) {
		unsigned char tail[8] = { 0 };
		memcpy(tail, c + i, n - i);
		l1 = hstep(l1, word(tail));
	}
	h = hstep(hstep(hstep(hstep(n, l0), l1), l2), l3);
	h ^= h >> 29;
	h *= HK;
	return h ^ h >> 32;
}

uint64_t pol_blob_hash(const void *p, size_t n)
{
	_Static_assert(offsetof(struct pol_hdr, hash) == 16, "the hash field is the third word");
	return hash_bytes(p, n, true);
}

uint64_t pol_part_hash(const void *p, size_t n)
{
	return hash_bytes(p, n, false);
}

/* --- the block ---------------------------------------------------------------- */

void policy_blob(const struct policy *pol, const void **p, size_t *n)
{
	*p = pol->b;
	*n = pol->n;
}

const char policy_damaged[] = "the session's compiled policy is damaged";

/* OFF is 0 or inside the string area of part P (one compare: below it
 * wraps). Whether the string is terminated is the part's check. */
static inline bool str_ok(const struct pol_hdr *h, int p, uint32_t off)
{
	return off - h->part[p].str_off < h->part[p].str_len || off == 0;
}

/* Every entry of table T refers to strings and tokens inside the block (the
 * hash catches damage, these a block made to fool it); one loop per kind,
 * since every process that starts runs them. A string of another part
 * than the table's is only checked to lie in that part's strings. */
static bool entries_ok(const struct pol_hdr *h, int t, const char *base)
{
	const char *e = base + h->tab[t].off;
	uint32_t n = h->tab[t].n, ntok = h->tab[PT_TOKEN].n;
	bool ok = true;

	if (t < PT_GLOB0) {
		const struct pol_prefix *x = (const void *)e;
		for (uint32_t i = 0; i < n && ok; i++)
			ok = x[i].path && str_ok(h, P_CORE, x[i].path) && str_ok(h, P_TEXT, x[i].rule) &&
			     x[i].len == strlen(base + x[i].path);
	} else if (t < PT_DENY) {
		const struct pol_glob *x = (const void *)e;
		uint32_t na = h->nanch[t - PT_GLOB0];
		ok = na <= n && (na == 0 || h->alcp[t - PT_GLOB0] <= x[0].litlen) &&
		     (na == n || h->flcp[t - PT_GLOB0] <= x[na].litlen);
		for (uint32_t i = 0; i < n && ok; i++)
			ok = x[i].pat && str_ok(h, P_CORE, x[i].pat) && str_ok(h, P_TEXT, x[i].rule) &&
			     x[i].litlen <= strlen(base + x[i].pat) && x[i].anchored == (i < na);
	} else if (t <= PT_EXEMPT) {
		const struct pol_erule *x = (const void *)e;
		for (uint32_t i = 0; i < n && ok; i++)
			ok = x[i].prog && str_ok(h, P_EXEC, x[i].prog) && str_ok(h, P_TEXT, x[i].rule) &&
			     x[i].tok <= ntok && x[i].ntok <= ntok - x[i].tok;
	} else if (t == PT_TOKEN) {
		const struct pol_etok *x = (const void *)e;
		for (uint32_t i = 0; i < n && ok; i++)
			ok = x[i].pat && str_ok(h, P_EXEC, x[i].pat) && x[i].kind <= ET_EXACT;
	} else {
		const struct pol_net *x = (const void *)e;
		for (uint32_t i = 0; i < n && ok; i++)
			ok = str_ok(h, P_EXEC, x[i].path) && str_ok(h, P_TEXT, x[i].rule) && x[i].family <= NF_UNIX &&
			     (x[i].family != NF_UNIX || x[i].path) && x[i].plen <= 128;
	}
	return ok;
}

/* The common prefix of a sorted table is that of its first and last
 * entries. */
void pol_filters(struct policy *pol)
{
	_Static_assert(PK_COUNT <= sizeof(pol->lcp) / sizeof(pol->lcp[0]), "one filter per kind");
	for (int k = 0; k < PK_COUNT; k++) {
		const struct pol_prefix *t = POL_TAB(pol, PT_PREFIX0 + k, struct pol_prefix);
		uint32_t n = pol->b->tab[PT_PREFIX0 + k].n;

		if (n) {
			const char *a = pol_str(pol, t[0].path), *z = pol_str(pol, t[n - 1].path);
			uint32_t i = 0;
			while (a[i] && a[i] == z[i])
				i++;
			pol->lcp[k] = i;
		}
		pol->anchored[k] = pol->b->nanch[k] > 0;
	}

	/* the read check's own line (struct policy): no prefix is a head no
	 * word matches under a mask of 0 */
	const struct pol_prefix *t = POL_TAB(pol, PT_PREFIX0 + PK_HIDDEN, struct pol_prefix);
	unsigned char head[8] = { 0 }, mask[8] = { 0 };
	uint32_t n = pol->lcp[PK_HIDDEN] < 8 ? pol->lcp[PK_HIDDEN] : 8;

	memcpy(pol->hidden_first, pol->b->firstbits[PK_HIDDEN], sizeof(pol->hidden_first));
	if (pol->b->tab[PT_PREFIX0 + PK_HIDDEN].n) {
		memcpy(head, pol_str(pol, t[0].path), n);
		memset(mask, 0xff, n);
	} else {
		head[0] = 1;
	}
	memcpy(&pol->hidden_head, head, 8);
	memcpy(&pol->hidden_mask, mask, 8);
	pol->hidden_nfirst = 0;
	for (unsigned c = 0; c < 256; c++)
		if (pol_bit(pol->hidden_first, c)) {
			if (pol->hidden_nfirst == 4) {
				pol->hidden_nfirst = 255;
				break;
			}
			pol->hidden_firstc[pol->hidden_nfirst++] = (unsigned char)c;
		}
	for (unsigned i = pol->hidden_nfirst; i < 4 && pol->hidden_nfirst; i++)
		pol->hidden_firstc[i] = pol->hidden_firstc[0];
}

/* The parts of H (a block of N bytes) follow each other from its start to
 * its end, on 8-byte boundaries, each with its string area inside it, and
 * every array lies inside its part; nothing of the block is read but the
 * header. */
static bool parts_ok(const struct pol_hdr *h, size_t n)
{
	uint64_t at = 0;

	if (n > UINT32_MAX)
		return false;
	for (int p = 0; p < POL_PARTS; p++) {
		const struct pol_part *q = &h->part[p];
		uint64_t lo = q->off + (p == P_CORE ? sizeof(*h) : 0), end = (uint64_t)q->off + q->size;
		if (q->off != at || q->off % 8 || end > n || q->str_len == 0 || q->str_off < lo ||
		    (uint64_t)q->str_off + q->str_len > end)
			return false;
		at = end;
	}
	if (at != n)
		return false;
	for (int t = 0; t < PT_COUNT; t++) {
		const struct pol_span *s = &h->tab[t];
		const struct pol_part *q = &h->part[pol_tpart[t]];
		if (s->off % 4 || s->off < q->off || s->off > q->off + q->size ||
		    (q->off + q->size - s->off) / pol_esize[t] < s->n)
			return false;
	}
	return true;
}

/* Part P's hash, its last string's end, and its arrays' entries. */
static bool part_ok(const struct pol_hdr *h, int p)
{
	const char *base = (const char *)h;
	const struct pol_part *q = &h->part[p];

	if (p == P_CORE ? h->hash != pol_blob_hash(h, q->size) : q->hash != pol_part_hash(base + q->off, q->size))
		return false;
	if (base[q->str_off + q->str_len - 1] != 0)
		return false;
	for (int t = 0; t < PT_COUNT; t++)
		if (pol_tpart[t] == p && !entries_ok(h, t, base))
			return false;
	return true;
}

bool pol_part(const struct policy *pol, int p)
{
	uint32_t *parts = (uint32_t *)&pol->parts;     /* written in place, by any thread */
	uint32_t now = __atomic_load_n(parts, __ATOMIC_ACQUIRE);

	if (__builtin_expect(now & 1u << p, 1))
		return true;
	if (now & 1u << (8 + p))
		return false;
	bool ok = part_ok(pol->b, p);
	__atomic_fetch_or(parts, ok ? 1u << p : 1u << (8 + p), __ATOMIC_ACQ_REL);
	return ok;
}

bool policy_intact(const struct policy *pol)
{
	bool ok = true;

	for (int p = 0; p < POL_PARTS; p++)
		ok &= pol_part(pol, p);
	return ok;
}

int policy_from_blob(struct policy *pol, const void *p, size_t n)
{
	const struct pol_hdr *h = p;

	if (n < sizeof(*h) || ((uintptr_t)p & 7) || h->magic != POL_MAGIC || h->version != POL_VERSION ||
	    h->size != n || !parts_ok(h, n) || !part_ok(h, P_CORE))
		return -EINVAL;
	if (!str_ok(h, P_CORE, h->workspace) || !str_ok(h, P_TEXT, h->source) || !str_ok(h, P_CORE, h->fetchers) ||
	    !str_ok(h, P_CORE, h->interpreters) || !str_ok(h, P_CORE, h->carriers) || h->mode > PM_OFF ||
	    h->landlock > PL_REQUIRE)
		return -EINVAL;
	memset(pol, 0, sizeof(*pol));
	pol->b = h;
	pol->n = n;
	pol->parts = 1u << P_CORE;
	pol_filters(pol);
	return 0;
}

uint64_t policy_hash(const struct policy *pol)
{
	return pol->b->hash;
}

void policy_set_journal(struct policy *pol, const char *dir)
{
	size_t n = dir ? strlen(dir) : 0;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	pol->journal = dir;
	pol->journal_len = n;
}

/* --- settings ------------------------------------------------------------------ */

enum pmode policy_mode(const struct policy *pol) { return (enum pmode)pol->b->mode; }
enum pdurability policy_durability(const struct policy *pol) { return (enum pdurability)pol->b->durability; }
enum plandlock policy_landlock(const struct policy *pol) { return (enum plandlock)pol->b->landlock; }
unsigned policy_rewind_on(const struct policy *pol) { return pol->b->rewind_on; }
bool policy_net_record(const struct policy *pol) { return pol->b->net_record; }
const char *policy_workspace(const struct policy *pol) { return pol_str(pol, pol->b->workspace); }
const char *policy_source(const struct policy *pol) { return pol_text(pol, pol->b->source); }
bool policy_fetch_run(const struct policy *pol) { return pol->b->fetch_run; }
bool policy_fetcher(const struct policy *pol, const char *name) { return pol->b->fetch_run && pol_is_fetcher(pol, name); }
bool policy_carrier(const struct policy *pol, const char *name) { return pol->b->fetch_run && pol_is_carrier(pol, name); }

enum popaque policy_opaque(const struct policy *pol, enum popaque_kind kind)
{
	return kind < PO_KINDS && pol->b->opaque[kind] == PO_WARN ? PO_WARN : PO_REFUSE;
}

const char *policy_root(const struct policy *pol, size_t i)
{
	for (int k = PK_WRITABLE; k >= PK_UNTRACKED; k--) {
		uint32_t n = pol->b->tab[PT_PREFIX0 + k].n;
		if (i < n)
			return pol_str(pol, POL_TAB(pol, PT_PREFIX0 + k, struct pol_prefix)[i].path);
		i -= n;
	}
	return NULL;
}

bool policy_root_ancestor(const struct policy *pol, const char *abs)
{
	size_t n = strlen(abs);
	const char *r;

	if (n < 2)
		return false;
	for (size_t i = 0; (r = policy_root(pol, i)); i++)
		if (!strncmp(r, abs, n) && r[n] == '/')
			return true;
	return false;
}

bool policy_signals_session(const struct policy *pol)
{
	return pol->b->signals;
}

bool policy_rewind_exempt(const struct policy *pol, char *const argv[])
{
	return argv && argv[0] && pol_part(pol, P_EXEC) && pol_rules_match(pol, PT_EXEMPT, NULL, argv, NULL);
}

/* --- paths --------------------------------------------------------------------- */

/* Is P[0..N) a path in the sorted prefix table of KIND? */
static const struct pol_prefix *find_prefix(const struct policy *pol, int kind, const char *p, size_t n)
{
	const struct pol_prefix *t = POL_TAB(pol, PT_PREFIX0 + kind, struct pol_prefix);
	size_t lo = 0, hi = pol->b->tab[PT_PREFIX0 + kind].n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const char *s = pol_str(pol, t[mid].path);
		size_t m = t[mid].len < n ? t[mid].len : n;
		int c = memcmp(s, p, m);
		if (!c)
			c = t[mid].len < n ? -1 : t[mid].len > n;
		if (!c)
			return &t[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The rule of the first prefix of KIND that is P or one of its ancestors
 * (its text's offset in the entry, as all the *_rule below: a path's
 * question reads no text unless the answer is a refusal). */
static const uint32_t *prefix_rule(const struct policy *pol, int kind, const char *p, size_t n)
{
	const struct pol_prefix *e;

	if (!pol->b->tab[PT_PREFIX0 + kind].n || n < pol->lcp[kind] ||
	    memcmp(p, pol_str(pol, POL_TAB(pol, PT_PREFIX0 + kind, struct pol_prefix)[0].path), pol->lcp[kind]))
		return NULL;
	const uint64_t *bloom = pol->b->bloom[kind];
	uint32_t h = POL_PHASH0;

	/* each ancestor P[0..i) (and "/") is looked up only if the filter
	 * has its hash */
	for (size_t i = 0; i < n; i++) {
		h = pol_phash(h, (unsigned char)p[i]);
		if ((i == 0 || i + 1 == n || p[i + 1] == '/') && pol_bit(bloom, h % POL_BLOOM_BITS) &&
		    (e = find_prefix(pol, kind, p, i + 1)))
			return &e->rule;
	}
	return NULL;
}

bool policy_root_entry_outside(const struct policy *pol, const char *abs)
{
	char parent[PATH_MAX];
	const char *why, *slash = strrchr(abs, '/');
	size_t n = slash ? (size_t)(slash - abs) : 0;
	size_t len = strlen(abs);
	uint32_t h = POL_PHASH0;
	bool root = false;

	/* a removal asks this of every file: the filter of each table first,
	 * then its sorted search */
	for (size_t i = 0; i < len; i++)
		h = pol_phash(h, (unsigned char)abs[i]);
	for (int k = PK_WRITABLE; !root && k >= PK_UNTRACKED; k--)
		root = pol_bit(pol->b->bloom[k], h % POL_BLOOM_BITS) && find_prefix(pol, k, abs, len);
	if (!root || n >= sizeof(parent))
		return root;
	memcpy(parent, abs, n);
	parent[n ? n : 1] = 0;
	if (!n)
		parent[0] = '/';
	return policy_path(pol, parent, true, &why) == PV_DENY;
}

/*
 * The first J >= FROM (FROM > 0: the previous answer) where a component of
 * P[0..N) starts, after a '/', with a byte that FIRST has; N if none. The
 * slashes are found 16 bytes at a time where SSE2 is there: a path has a
 * handful of components, and a loop over its bytes costs a branch per byte
 * just after the system call of the previous open has emptied the branch
 * predictor. Reads no byte at or past P[N].
 */
static size_t next_comp(const char *p, size_t n, size_t from, const uint64_t first[4])
{
	size_t s = from;        /* where the search for slashes goes on */

#ifdef __SSE2__
	const __m128i slash = _mm_set1_epi8('/');

	while (n >= 16 && s + 1 < n) {
		/* the last 16 bytes once fewer are left, without the ones seen */
		size_t at = n - s >= 16 ? s : n - 16;
		unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const void *)(p + at)), slash));
		m &= ~0u << (s - at);
		for (; m; m &= m - 1) {
			size_t j = at + (size_t)__builtin_ctz(m) + 1;
			if (j < n && pol_bit(first, (unsigned char)p[j]))
				return j;
		}
		s = at + 16;
	}
#endif
	for (; s + 1 < n; s++)
		if (p[s] == '/' && pol_bit(first, (unsigned char)p[s + 1]))
			return s + 1;
	return n;
}

/*
 * Whether a component of P[0..N) starts, after a '/', with one of the four
 * bytes C (next_comp's question for a set of at most four bytes, the
 * usual one: the default policy's hidden globs start with '.' or 'i'): a
 * chunk of 16 bytes is compared with the slash and the four bytes at once,
 * and the bytes after slashes found by a shift of the slashes' mask.
 */
HOT static bool comp_starts_with(const char *p, size_t n, const unsigned char c[4])
{
#ifdef __SSE2__
	if (n >= 16) {
		const __m128i slash = _mm_set1_epi8('/'), c0 = _mm_set1_epi8((char)c[0]),
			      c1 = _mm_set1_epi8((char)c[1]), c2 = _mm_set1_epi8((char)c[2]),
			      c3 = _mm_set1_epi8((char)c[3]);
		unsigned keep = ~0u, before = 0;        /* the bytes not seen yet; P[AT - 1] is '/' */

		for (size_t at = 0;;) {
			__m128i v = _mm_loadu_si128((const void *)(p + at));
			__m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, c0), _mm_cmpeq_epi8(v, c1)),
						   _mm_or_si128(_mm_cmpeq_epi8(v, c2), _mm_cmpeq_epi8(v, c3)));
			unsigned sl = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, slash));
			/* bit Q: P[AT + Q - 1] is '/' */
			if ((sl << 1 | before) & keep & (unsigned)_mm_movemask_epi8(hit))
				return true;
			if (n - at <= 16)
				return false;
			/* the next 16 bytes, or the last 16 without the ones seen */
			size_t next = n - at >= 32 ? at + 16 : n - 16;
			keep = ~0u << (at + 16 - next);
			before = sl >> (next - 1 - at) & 1;
			at = next;
		}
	}
	if (n > 8) {
		/* 9 to 15 bytes (/dev/null, /etc/passwd): the first 8 and the
		 * last 8 as one chunk; lane Q is P[Q] below 8, P[N - 16 + Q]
		 * from 8 on. Lane 8's byte, P[N - 8], is lane N - 8's too, whose
		 * byte before is in the chunk: lane 8 is left out. */
		const __m128i slash = _mm_set1_epi8('/');
		uint64_t lo, hi;

		memcpy(&lo, p, 8);
		memcpy(&hi, p + n - 8, 8);
		__m128i v = _mm_set_epi64x((long long)hi, (long long)lo);
		__m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)c[0])),
							_mm_cmpeq_epi8(v, _mm_set1_epi8((char)c[1]))),
					   _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)c[2])),
							_mm_cmpeq_epi8(v, _mm_set1_epi8((char)c[3]))));
		unsigned sl = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, slash));
		unsigned after = sl << 1 & ~0x100u;
		return after & (unsigned)_mm_movemask_epi8(hit);
	}
#endif
	for (size_t s = 1; s < n; s++)
		if (p[s - 1] == '/' && (p[s] == c[0] || p[s] == c[1] || p[s] == c[2] || p[s] == c[3]))
			return true;
	return false;
}

/* The end of NCOMP components of P starting at S, or NULL. */
static const char *comps_end(const char *s, unsigned ncomp)
{
	while (ncomp--) {
		s = strchrnul(s, '/');
		if (ncomp && !*s)
			return NULL;
		if (ncomp)
			s++;
	}
	return s;
}

static bool glob_at(const struct policy *pol, const struct pol_glob *g, const char *s)
{
	const char *pat = pol_str(pol, g->pat);
	const char *e;

	if (strncmp(s, pat, g->litlen))
		return false;
	e = comps_end(s + g->anchored, g->ncomp);
	return e && glob_match(pat, s, (size_t)(e - s), true);
}

/* Whether P (N bytes) may lie under the literal directory of one of the
 * anchored globs of KIND (they are tried only then): it starts with the
 * bytes all their literal parts start with, and one of its ancestors has
 * a bit in their bloom filter. */
static bool anchored_may(const struct policy *pol, int kind, const char *p, size_t n)
{
	const struct pol_glob *t = POL_TAB(pol, PT_GLOB0 + kind, struct pol_glob);
	const uint64_t *bloom = pol->b->abloom[kind];
	size_t l = pol->b->alcp[kind];
	uint32_t h = POL_PHASH0;

	if (n < l || memcmp(p, pol_str(pol, t[0].pat), l))
		return false;
	for (size_t i = 0; i < n; i++) {
		h = pol_phash(h, (unsigned char)p[i]);
		if ((i == 0 || (i + 1 < n && p[i + 1] == '/')) && pol_bit(bloom, h % POL_ABLOOM_BITS))
			return true;
	}
	return false;
}

/* Whether the component at S (N bytes to the path's end) starts with the
 * bytes every floating glob of KIND starts with (FLCP, at most 8). */
static inline bool floating_may(const struct policy *pol, int kind, const char *s, size_t n, const char *head)
{
	size_t l = pol->b->flcp[kind];

	return n >= l && !memcmp(s, head, l);
}

/* The first anchored glob of KIND that matches P (LEN bytes), tried only
 * where anchored_may says one could. */
static const uint32_t *anchored_rule(const struct policy *pol, int kind, const char *p, size_t len)
{
	const struct pol_glob *t = POL_TAB(pol, PT_GLOB0 + kind, struct pol_glob);
	uint32_t na = pol->b->nanch[kind];

	if (na && anchored_may(pol, kind, p, len))
		for (uint32_t i = 0; i < na; i++)
			if (glob_at(pol, &t[i], p))
				return &t[i].rule;
	return NULL;
}

/* The first floating glob of KIND that matches at a component of P, tried
 * at each component whose first bytes they can start with. */
static const uint32_t *floating_rule(const struct policy *pol, int kind, const char *p, size_t len)
{
	const struct pol_glob *t = POL_TAB(pol, PT_GLOB0 + kind, struct pol_glob);
	const uint64_t *first = pol->b->firstbits[kind];
	uint32_t n = pol->b->tab[PT_GLOB0 + kind].n, na = pol->b->nanch[kind];

	if (na == n)
		return NULL;
	const char *head = pol_str(pol, t[na].pat);
	for (size_t j = next_comp(p, len, 0, first); j < len; j = next_comp(p, len, j, first))
		if (floating_may(pol, kind, p + j, len - j, head))
			for (uint32_t i = na; i < n; i++)
				if (glob_at(pol, &t[i], p + j))
					return &t[i].rule;
	return NULL;
}

/* The anchored globs first, as in the file's order each class. */
static const uint32_t *glob_rule(const struct policy *pol, int kind, const char *p, size_t len)
{
	const uint32_t *r = anchored_rule(pol, kind, p, len);

	return r ? r : floating_rule(pol, kind, p, len);
}

static const uint32_t *path_rule(const struct policy *pol, int kind, const char *p, size_t n)
{
	const uint32_t *r = prefix_rule(pol, kind, p, n);

	return r ? r : glob_rule(pol, kind, p, n);
}

/*
 * The hidden rules, as path_rule, for every read: struct policy's own
 * filter rules out a path that no hidden prefix and no glob can match
 * without a look at the block (its table, bloom filter and strings are
 * pages a read then never touches). The prefixes only when the path begins
 * with the bytes all of them begin with (its first word compared; a path
 * shorter than a word is asked of prefix_rule), the floating globs only
 * when one of its components begins with a byte one can begin with, the
 * anchored ones only when anchored_may finds their directory among its
 * ancestors (the default policy's are under ~/.config, ~/.mozilla ...:
 * trying each of its 30 on every read cost more than the open itself).
 */
HOT static bool hidden_glob_may(const struct policy *pol, const char *p, size_t n)
{
	if (pol->hidden_nfirst == 255)
		return next_comp(p, n, 0, pol->hidden_first) < n;
	return pol->hidden_nfirst && comp_starts_with(p, n, pol->hidden_firstc);
}

HOT static const uint32_t *hidden_rule(const struct policy *pol, const char *p, size_t n)
{
	const uint32_t *r = NULL;
	uint64_t w;

	if (n < 8 || (memcpy(&w, p, 8), (w & pol->hidden_mask) == pol->hidden_head))
		r = prefix_rule(pol, PK_HIDDEN, p, n);
	if (!r && pol->anchored[PK_HIDDEN])
		r = anchored_rule(pol, PK_HIDDEN, p, n);
	if (!r && hidden_glob_may(pol, p, n))
		r = floating_rule(pol, PK_HIDDEN, p, n);
	return r;
}

static bool under(const char *p, size_t n, const char *dir, size_t dn)
{
	return n >= dn && !memcmp(p, dir, dn) && (n == dn || p[dn] == '/' || dn == 1);
}

/* --- devices ------------------------------------------------------------------- */

const char *const policy_devices[] = {
	"null", "zero", "full", "random", "urandom",            /* bit buckets, randomness */
	"tty*", "console", "ptmx", "pts/", "hvc*",              /* terminals */
	"nvidia*", "nvidia-caps/", "dri/", "kfd", "accel/", "dxg", "kvm", /* accelerators */
	NULL,
};

/* A virtual console (tty0 ... tty63): the machine's screens, not the
 * session's terminal (that is /dev/tty, a pts, or a serial line) unless the
 * agent runs at one (policy_device_here). A write there draws on a login's
 * screen, its ioctls switch consoles or type into them; and its 64 names
 * were 2/3 of the session's Landlock rules. */
static bool virtual_console(const char *name)
{
	if (strncmp(name, "tty", 3) || !name[3])
		return false;
	for (name += 3; *name; name++)
		if (*name < '0' || *name > '9')
			return false;
	return true;
}

bool policy_device_ok(const char *name)
{
	if (virtual_console(name))
		return false;
	for (const char *const *d = policy_devices; *d; d++) {
		size_t n = strlen(*d);
		if ((*d)[n - 1] == '*' ? !strncmp(name, *d, n - 1) && !strchr(name + n - 1, '/')
		    : (*d)[n - 1] == '/' ? !strncmp(name, *d, n)
					 : !strcmp(name, *d))
			return true;
	}
	return false;
}

uint64_t policy_own_consoles(void)
{
	struct stat st;
	uint64_t m = 0;

	for (int fd = 0; fd <= 2; fd++)
		if (fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 4 && minor(st.st_rdev) < 64)
			m |= 1ull << minor(st.st_rdev);
	return m;
}

int policy_console_number(const char *name)
{
	return virtual_console(name) && strlen(name) <= 5 && strtoul(name + 3, NULL, 10) < 64 ?
	       (int)strtoul(name + 3, NULL, 10) : -1;
}

bool policy_device_here(const char *name)
{
	int n;

	if (policy_device_ok(name))
		return true;
	return (n = policy_console_number(name)) >= 0 && (policy_own_consoles() >> n & 1);
}

/* A character device at ABS (under /dev, or a /proc/PID/fd link to one):
 * one of policy_devices, or the virtual console this process runs at. */
static bool device_ok(const char *abs, size_t n)
{
	char t[64];
	ssize_t k;

	if (under(abs, n, "/dev", 4))
		return n > 5 && policy_device_here(abs + 5);
	k = readlink(abs, t, sizeof(t) - 1);
	if (k <= 5 || memcmp(t, "/dev/", 5))
		return false;
	t[k] = 0;
	return policy_device_here(t + 5);
}

/* An untracked root (/dev/shm, ~/.cache) that holds the workspace itself
 * would leave the agent's whole work unjournaled, silently: inside the
 * workspace, such a root's rule does not hold (nor do the untracked rules
 * within it: everything there is journaled). ABS (N bytes) matched one. */
static bool untracked_workspace(const struct policy *pol, const char *abs, size_t n)
{
	const char *ws = policy_workspace(pol);
	size_t wn = ws ? strlen(ws) : 0;

	return wn > 1 && ws[0] == '/' && under(abs, n, ws, wn) && path_rule(pol, PK_UNTRACKED, ws, wn);
}

/* A write past the journal and hidden checks: the rest of the rules. Apart
 * from policy_path_typed, so that a read (every open that only reads asks)
 * pays for a small frame only. */
static __attribute__((noinline)) enum pverdict write_verdict(const struct policy *pol, const char *abs, size_t n,
							     mode_t type, const char **why)
{
	const uint32_t *r;

	if ((r = path_rule(pol, PK_PROTECTED, abs, n))) {
		*why = pol_text(pol, *r);
		return PV_DENY;
	}
	if (!type && (under(abs, n, "/dev", 4) || under(abs, n, "/proc", 5))) {
		struct stat st;
		if (stat(abs, &st) == 0)
			type = st.st_mode & S_IFMT;
	}
	if (type == S_IFBLK) {
		*why = "writing a block device";
		return PV_DENY;
	}
	if ((r = path_rule(pol, PK_UNTRACKED, abs, n)) && !untracked_workspace(pol, abs, n)) {
		*why = pol_text_known(pol, *r);
		return PV_UNTRACKED;
	}
	if ((r = path_rule(pol, PK_WRITABLE, abs, n))) {
		*why = pol_text_known(pol, *r);
		return PV_ALLOW;
	}
	if ((type == S_IFCHR || type == S_IFIFO || type == S_IFSOCK) &&
	    (under(abs, n, "/dev", 4) || under(abs, n, "/proc", 5))) {
		if (type == S_IFCHR && !device_ok(abs, n)) {
			*why = "a device that is not a terminal, null, zero, random or an accelerator";
			return PV_DENY;
		}
		*why = "a character device, fifo or socket";
		return PV_UNTRACKED;
	}
	*why = "outside the writable roots";
	return PV_DENY;
}

HOT enum pverdict policy_path_typed(const struct policy *pol, const char *abs, bool write, mode_t type,
				    const char **why)
{
	size_t n = strlen(abs);
	const uint32_t *r;

	*why = NULL;
	if (pol->journal_len && under(abs, n, pol->journal, pol->journal_len)) {
		*why = "the journal directory is off limits";
		return PV_DENY;
	}
	if ((r = hidden_rule(pol, abs, n))) {
		*why = pol_text(pol, *r);
		return PV_DENY;
	}
	return write ? write_verdict(pol, abs, n, type, why) : PV_ALLOW;
}

HOT enum pverdict policy_path(const struct policy *pol, const char *abs, bool write, const char **why)
{
	return policy_path_typed(pol, abs, write, 0, why);
}

/* --- signals ------------------------------------------------------------------- */

enum pverdict policy_signal(const struct policy *pol, pid_t target, int sig, bool in_session,
			    const char **why)
{
	*why = NULL;
	if (sig == 0)
		return PV_ALLOW;
	if (target == -1) {
		*why = "a signal to every process (pid -1)";
		return PV_DENY;
	}
	if (!pol->b->signals || in_session)
		return PV_ALLOW;
	*why = "[policy] signals = session: the target is outside the session";
	return PV_DENY;
}

/* --- connect ------------------------------------------------------------------- */

static bool prefix_bits(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, bytes))
		return false;
	return !rest || ((a[bytes] ^ b[bytes]) & (0xff00 >> rest) & 0xff) == 0;
}

struct dest {
	int family;             /* NF_* */
	uint8_t addr[16];
	uint16_t port;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
	size_t plen;
};

static bool net_match(const struct policy *pol, const struct pol_net *r, const struct dest *d)
{
	if (r->port && r->port != d->port)
		return false;
	if (r->family == NF_UNIX)
		return d->family == NF_UNIX && glob_match(pol_str(pol, r->path), d->path, d->plen, false);
	if (d->family == NF_UNIX)
		return false;
	if (r->plen == 0 && r->family == NF_INET6)
		return true;            /* "*" */
	return r->family == d->family && prefix_bits(r->addr, d->addr, r->plen);
}

static bool loopback(const struct dest *d)
{
	static const uint8_t one6[16] = { [15] = 1 };

	return d->family == NF_UNIX || (d->family == NF_INET && d->addr[0] == 127) ||
	       (d->family == NF_INET6 && !memcmp(d->addr, one6, 16));
}

static bool get_dest(const struct sockaddr *sa, socklen_t len, struct dest *d)
{
	memset(d, 0, sizeof(*d));
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		d->family = NF_INET;
		memcpy(d->addr, &in->sin_addr, 4);
		d->port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in = (const void *)sa;
		d->port = ntohs(in->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in->sin6_addr)) {
			d->family = NF_INET;
			memcpy(d->addr, in->sin6_addr.s6_addr + 12, 4);
		} else {
			d->family = NF_INET6;
			memcpy(d->addr, &in->sin6_addr, 16);
		}
	} else if (sa->sa_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path)) {
		const struct sockaddr_un *un = (const void *)sa;
		size_t n = len - offsetof(struct sockaddr_un, sun_path);
		if (n > sizeof(un->sun_path))
			n = sizeof(un->sun_path);
		d->family = NF_UNIX;
		if (un->sun_path[0] == 0) {             /* abstract: "@name" */
			d->path[0] = '@';
			memcpy(d->path + 1, un->sun_path + 1, n - 1);
			d->plen = n;
		} else {
			d->plen = strnlen(un->sun_path, n);
			memcpy(d->path, un->sun_path, d->plen);
		}
	} else {
		return false;
	}
	return true;
}

enum pverdict policy_connect(const struct policy *pol, const struct sockaddr *sa, socklen_t len,
			     const char **why)
{
	const struct pol_net *t = POL_TAB(pol, PT_NET, struct pol_net);
	struct dest d;

	*why = NULL;
	if (!sa || !get_dest(sa, len, &d))
		return PV_ALLOW;        /* AF_UNSPEC, netlink ...: not a destination */
	if (!pol_part(pol, P_EXEC)) {
		*why = policy_damaged;
		return PV_DENY;
	}
	for (uint32_t i = 0; i < pol->b->tab[PT_NET].n; i++)
		if (net_match(pol, &t[i], &d)) {
			if (t[i].action != NA_DENY) {
				*why = pol_text_known(pol, t[i].rule);
				return PV_ALLOW;
			}
			*why = pol_text(pol, t[i].rule);
			return PV_DENY;
		}
	if (pol->b->net_default == ND_DENY || (pol->b->net_default == ND_LOOPBACK && !loopback(&d))) {
		*why = pol->b->net_default == ND_DENY ? "[network] default = deny" :
			"[network] default = loopback: not a loopback address";
		return PV_DENY;
	}
	return PV_ALLOW;
}
