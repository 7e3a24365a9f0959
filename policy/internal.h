/*
 * internal.h - the compiled policy block, shared by the files of policy/.
 *
 * One block, little-endian as the host, position-independent, in three
 * parts, each its NUL-terminated strings and then its arrays of fixed-size
 * entries: the core (the header, the path rules), the exec and network
 * rules, and the rules' texts (which only a refusal's message reads). Every
 * reference is an offset from the start of the block (0: none). The hash is
 * pol_blob_hash over the core with the hash field zero; the header holds
 * the other parts' hashes, so it stands for the whole block.
 *
 * Every process of a session maps the block and checks it before it trusts
 * it, and on this hypervisor each page a process first touches costs it
 * microseconds: policy_from_blob checks the core (the header, the path rules
 * and the [fetch-and-run] program lists: two pages), the exec part is
 * checked at the first exec or connect question and the texts at the first
 * refusal (pol_part). A `cat` no longer reads 21 pages of rules
 * it never asks. A damaged part answers every question as refused, with
 * policy_damaged as the reason.
 */
#ifndef FTSBX_POLICY_INTERNAL_H
#define FTSBX_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <ini.h>
#include "policy.h"

#define POL_MAGIC       0x4c4f5046u     /* "FPOL" */
#define POL_VERSION     6u      /* 3: !TOKEN in command rules; 4: carriers; 5: parts; 6: glob filters */

/* The path tables: each is a sorted array of literal prefixes and an array
 * of glob patterns. */
enum { PK_HIDDEN, PK_PROTECTED, PK_UNTRACKED, PK_WRITABLE, PK_COUNT };

/* The arrays of the block. */
enum {
	PT_PREFIX0,                     /* + PK_*: struct pol_prefix, sorted by path */
	PT_GLOB0 = PT_PREFIX0 + PK_COUNT, /* + PK_*: struct pol_glob */
	PT_DENY = PT_GLOB0 + PK_COUNT,  /* struct pol_erule: [commands] */
	PT_EXEMPT,                      /* struct pol_erule: [rewind] except */
	PT_TOKEN,                       /* struct pol_etok, for both */
	PT_NET,                         /* struct pol_net, in file order */
	PT_COUNT
};

#define POL_BLOOM_BITS  4096
#define POL_ABLOOM_BITS 1024

/* The hash of a path prefix, one byte at a time (FNV-1a 32). */
static inline uint32_t pol_phash(uint32_t h, unsigned char c)
{
	return (h ^ c) * 0x01000193u;
}
#define POL_PHASH0      0x811c9dc5u

struct pol_span {
	uint32_t off, n;
};

/* The parts of the block, in this order. */
enum { P_CORE, P_EXEC, P_TEXT, POL_PARTS };

/* A part: its bytes and its string area (both offsets in the block), and
 * its hash (the core's is pol_hdr.hash). */
struct pol_part {
	uint32_t off, size;
	uint32_t str_off, str_len;
	uint64_t hash;
};

struct pol_hdr {
	uint32_t magic, version;
	uint64_t size;
	uint64_t hash;
	uint8_t mode, durability, landlock, signals;    /* signals: 1 = session only */
	uint8_t opaque[PO_KINDS];
	uint8_t net_default, net_record, fetch_run, rewind_on;
	uint32_t workspace, source;                     /* strings: P_CORE, P_TEXT */
	/* P_CORE strings "a|b|c" (the shim asks whether a program that reads
	 * a file is a carrier at every open of a download) */
	uint32_t fetchers, interpreters, carriers, unused;
	struct pol_part part[POL_PARTS];
	struct pol_span tab[PT_COUNT];
	/* Filters that keep a path check to a few instructions: a bloom
	 * filter of the literal prefixes of each kind (one bit per prefix,
	 * at its pol_phash), and the first bytes of the floating globs (all
	 * bits set when one starts with a wildcard). */
	uint64_t bloom[PK_COUNT][POL_BLOOM_BITS / 64];
	uint64_t firstbits[PK_COUNT][4];
	/* The globs of each kind: the anchored ones first (NANCH of them, in
	 * file order, then the floating ones in file order: the anchored are
	 * tried first anyway), a bloom filter of the anchored ones' literal
	 * directories (pol_glob_dir), the bytes all their literal parts begin
	 * with (ALCP of them, the first one's), and the bytes every floating
	 * one's literal part begins with (FLCP of them, at most 8, the first
	 * floating one's). */
	uint64_t abloom[PK_COUNT][POL_ABLOOM_BITS / 64];
	uint32_t nanch[PK_COUNT];
	uint8_t alcp[PK_COUNT], flcp[PK_COUNT];
};

struct pol_prefix {
	uint32_t path, len, rule;       /* literal absolute path, its length, rule text */
};

struct pol_glob {
	uint32_t pat, rule;
	uint16_t ncomp;                 /* components of the pattern */
	uint8_t anchored;               /* absolute: matched from the root */
	uint8_t litlen;                 /* literal bytes before the first wildcard (<= 255) */
};

/* The length of an anchored glob's literal directory: PAT's literal part
 * (LITLEN bytes) up to its last '/', or 1 ("/") where the wildcard is in
 * the first component. A path the glob matches has it as an ancestor. */
static inline size_t pol_glob_dir(const char *pat, size_t litlen)
{
	size_t d = litlen;

	while (d > 1 && pat[d - 1] != '/')
		d--;
	return d > 1 ? d - 1 : 1;
}

/* An exec rule. FIRST and ANYFIRST let a program be ruled out in a few
 * instructions (most rules name programs that start with other letters):
 * the bitmap of the first bytes of the program alternatives, and whether
 * one starts with '*', '?', '[' or '/' (it may match any program). */
struct pol_erule {
	uint32_t rule, prog;            /* rule text; program alternatives "a|b*" */
	uint32_t tok, ntok;             /* into PT_TOKEN */
	uint32_t first[8];              /* bit C of first[C / 32]: an alternative starts with byte C */
	uint32_t anyfirst;
};

/* The first-byte filter of the alternatives ALTS ("a|b*"), as struct
 * pol_erule keeps it. */
static inline void pol_alt_firsts(const char *alts, uint32_t first[8], uint32_t *anyfirst)
{
	for (const char *a = alts;;) {
		unsigned char c = (unsigned char)*a;
		if (c == '*' || c == '?' || c == '[' || c == '/')
			*anyfirst = 1;
		else
			first[c >> 5] |= 1u << (c & 31);
		while (*a && *a != '|')
			a++;
		if (!*a++)
			return;
	}
}

/* -x/--long, an operand, =ANY ARGUMENT; a pattern that starts with '!' is
 * negated (!TOKEN: the rule matches where TOKEN does not) */
enum { ET_FLAG, ET_ARG, ET_EXACT };
struct pol_etok {
	uint32_t kind, pat;
};

enum { NA_ALLOW, NA_DENY };
enum { NF_INET, NF_INET6, NF_UNIX };
struct pol_net {
	uint8_t action, family, plen, pad;
	uint16_t port;                  /* 0: any */
	uint16_t pad2;
	uint8_t addr[16];
	uint32_t path;                  /* NF_UNIX: glob ("@name" for abstract) */
	uint32_t rule;
};

enum { ND_ALLOW, ND_DENY, ND_LOOPBACK };

/* The part each array is in. */
static const uint8_t pol_tpart[PT_COUNT] = {
	[PT_PREFIX0 ... PT_GLOB0 + PK_COUNT - 1] = P_CORE,
	[PT_DENY ... PT_NET] = P_EXEC,
};

/* The size of one entry of each array. */
static const size_t pol_esize[PT_COUNT] = {
	[PT_PREFIX0 ... PT_PREFIX0 + PK_COUNT - 1] = sizeof(struct pol_prefix),
	[PT_GLOB0 ... PT_GLOB0 + PK_COUNT - 1] = sizeof(struct pol_glob),
	[PT_DENY] = sizeof(struct pol_erule), [PT_EXEMPT] = sizeof(struct pol_erule),
	[PT_TOKEN] = sizeof(struct pol_etok), [PT_NET] = sizeof(struct pol_net),
};

static inline bool pol_bit(const uint64_t *bits, size_t i)
{
	return bits[i >> 6] >> (i & 63) & 1;
}

static inline void pol_setbit(uint64_t *bits, size_t i)
{
	bits[i >> 6] |= 1ull << (i & 63);
}

static inline const void *pol_at(const struct policy *pol, uint32_t off)
{
	return (const char *)pol->b + off;
}

static inline const char *pol_str(const struct policy *pol, uint32_t off)
{
	return off ? (const char *)pol->b + off : "";
}

#define POL_TAB(pol, t, type) ((const type *)pol_at(pol, (pol)->b->tab[t].off))

/* Part PART of the block checked (its hash, strings and entries), once per
 * process: false when it is damaged. The core is checked by
 * policy_from_blob; a policy compiled here has every part checked. */
bool pol_part(const struct policy *pol, int part);

/* The text of the rule at OFF (P_TEXT), or policy_damaged. */
static inline const char *pol_text(const struct policy *pol, uint32_t off)
{
	return pol_part(pol, P_TEXT) ? pol_str(pol, off) : policy_damaged;
}

/* The same where the text only tells which rule allowed a call: a policy
 * compiled in this process has it (ftsbx explain); a mapped one reads no
 * page of the texts for it (the shim reads the reason of a refusal only). */
static inline const char *pol_text_known(const struct policy *pol, uint32_t off)
{
	return __atomic_load_n(&pol->parts, __ATOMIC_ACQUIRE) & 1u << P_TEXT ? pol_str(pol, off)
									      : "a rule of the policy";
}

/* Work out the filters of struct policy for its block (decide.c). */
void pol_filters(struct policy *pol);

/* The hash of the N bytes at P (decide.c): of the core, whose hash field
 * counts as zero, and of another part. */
uint64_t pol_blob_hash(const void *p, size_t n);
uint64_t pol_part_hash(const void *p, size_t n);

/* glob.c: '*', '?', '[...]' ('!' or '^' negates). SLASH: a wildcard does
 * not match '/'. N: the length of S. */
bool glob_match(const char *pat, const char *s, size_t n, bool slash);
/* PAT is "alt|alt|..."; true if one alternative matches S. */
bool glob_any(const char *pat, const char *s, size_t n, bool slash);
bool glob_has_magic(const char *p, size_t n);

/* exec.c; IN[0..IN_N): what the command reads on its standard input, as a
 * shell script says (a here-document ...), or NULL */
enum pverdict pol_exec_argv(const struct policy *pol, const char *file, char *const argv[],
			    const char *path_value, int depth, const char **why, const char *in, size_t in_n);
bool pol_rules_match(const struct policy *pol, int table, const char *file, char *const argv[],
		     const char **why);  /* WHY: the rule's text, or NULL */
bool pol_is_interpreter(const struct policy *pol, const char *name);
bool pol_is_fetcher(const struct policy *pol, const char *name);
bool pol_is_carrier(const struct policy *pol, const char *name);
const char *pol_base(const char *p);
/* Skip the wrappers at the start of ARGV: the index of the innermost
 * program, or -1 for none (ionice -p, chrt -p ...); *SPLIT: an env -S
 * string met on the way. */
int pol_unwrap(char *const argv[], int argc, const char **split);

/* load.c: collapse "//", "/./", "dir/.." and a trailing '/' in place; the
 * kernel's name of an existing path */
void pol_normalise(char *p);
/* inih as load.c reads a policy with it (and tools/ini_table.c the
 * built-in one at build time): lines of at most POL_MAX_LINE - 2 bytes, no
 * continuation lines, the first error ends the parse. */
#define POL_MAX_LINE 4096
static inline void policy_ini_settings(void)
{
	ini_use_stack = false;
	ini_max_line = POL_MAX_LINE;
	ini_initial_alloc = POL_MAX_LINE;
	ini_allow_realloc = false;
	ini_stop_on_first_error = true;
	ini_allow_multiline = false;
}

/* A key = value line of a policy, as inih gave it to the handler, with its
 * line number: the built-in policy's, parsed at build time (default_tab.h). */
struct pol_ini_line {
	int line;
	const char *section, *key, *value;
};

bool pol_real_path(const char *p, char out[PATH_MAX]);

/* mounts.c: does the container start ARGV mount a host path the session
 * could not change (or read) itself? *WHY then says which. */
bool pol_container_mounts(const struct policy *pol, char *const argv[], int argc, const char **why);

/* shell.c: check an sh -c string; *FETCHES (if not NULL): it runs a
 * fetcher (curl ...), for a $(...) around it. */
enum pverdict pol_shell(const struct policy *pol, const char *script, size_t len, const char *path_value,
			int depth, const char **why, bool *fetches);
/* The index in AV of the command an interpreter runs as a script (bash
 * $(command -v gcloud) ARGS, python3 /usr/bin/aws ARGS), or 0: none (code,
 * a module, its stdin, a script whose name has a '.': mkfs.sh). */
int pol_script_at(const struct policy *pol, char *const av[], int ac);

#endif
