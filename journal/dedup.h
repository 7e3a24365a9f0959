/*
 * dedup.h - copy on first write (DESIGN.md invariant 2): a table shared by
 * every process of a session that remembers which paths already have their
 * pre-image in the journal for a transaction, and at which level. Used by
 * capture.c only. Also the lexical path helper capture.c and jdrive share.
 */
#ifndef FTSBX_JOURNAL_DEDUP_H
#define FTSBX_JOURNAL_DEDUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "journal.h"

/* What a record already saved of a path; a higher level covers a lower. */
enum dlevel {
	DL_META   = 1,  /* metadata (J_META) */
	DL_APPEND = 2,  /* old size and metadata (J_APPEND) */
	DL_FULL   = 3   /* everything (J_CONTENT, J_CREATE) */
};

/* The generation of weak parent-directory keys: they never need refreshing. */
#define DEDUP_WEAK_GEN 0

/* A claim on a path's slot, held while its record is written. */
struct dclaim {
	uint64_t *word;                /* the slot's state word; NULL: not tracked */
	uint64_t old;                  /* its state before the claim */
	unsigned level;
	uint32_t txn;
};

/* The generation strong keys use now (never DEDUP_WEAK_GEN), and the bump
 * that jcap_remove and jcap_rename make: afterwards every path is captured
 * afresh, since a name may now stand for another inode. */
uint64_t dedup_generation(struct jsession *s);
void dedup_bump(struct jsession *s);
/* A rewind undid records: every key, the weak ones too, is captured
 * afresh (a transaction's processes may live on and change its paths
 * again). dedup_rewinds: the count, which weak keys include. */
void dedup_rewound(struct jsession *s);
uint64_t dedup_rewinds(const struct jsession *s);

/* true: the last record of PATH at GEN is TXN's, of LEVEL or more: skip
 * the capture. false: write the record, then call dedup_done (with C
 * untracked when the table cannot help; capturing twice is always safe).
 * Waits while another process writes the record for the same slot. A claim
 * of a path another transaction recorded last bumps the session's
 * J_CTR_TURNS counter (what the shim's per-thread answers watch). */
bool dedup_claim(struct jsession *s, uint32_t txn, uint64_t gen, const char *path,
		 unsigned level, struct dclaim *c);
/* OK: the record is on disk, mark the level; else give the slot back. */
void dedup_done(struct dclaim *c, bool ok);

/* Join PATH to BASE when relative (BASE may be NULL for absolute paths) and
 * normalise it lexically (., .., //) into OUT. 0 or -ENAMETOOLONG/-EINVAL. */
int jpath_norm(char *out, size_t cap, const char *base, const char *path);

#endif
