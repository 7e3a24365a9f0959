/*
 * internal.h - what the journal's own files share and nobody else needs.
 */
#ifndef FTSBX_JOURNAL_INTERNAL_H
#define FTSBX_JOURNAL_INTERNAL_H

#include <limits.h>
#include "journal.h"

/* Long-lived descriptors move at or above this number, out of the way of
 * programs that dup2() onto low numbers. */
#define JFD_FLOOR 700

static inline uint32_t jcrc_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }
static inline uint32_t jcrc_unmask(uint32_t m) { uint32_t r = m - 0xa282ead8u; return (r >> 17) | (r << 15); }

int  jframe(const struct jsession *s, uint8_t link[J_LINK_LEN], struct jbuild *b, uint64_t seq, int64_t t);
void jfile_header(uint8_t h[J_FILE_HDR], const uint8_t salt[J_SALT_LEN], unsigned kind, uint32_t features);
void jchain_start(uint8_t link[J_LINK_LEN], const uint8_t salt[J_SALT_LEN], const uint8_t h[J_FILE_HDR]);
/* Check a file header, giving its salt and features; 0, -EPROTO (not
 * ours), -EPROTONOSUPPORT (another version, or a feature not in JI_KNOWN). */
int  jfile_header_check(const uint8_t *h, size_t n, unsigned kind, uint8_t salt[J_SALT_LEN],
			uint32_t *features);
uint32_t jseed(const uint8_t salt[J_SALT_LEN]);
int  jwrite_all(int fd, const void *p, size_t n);
struct iovec;
int  jwritev_all(int fd, struct iovec *iov, int n);
int  jlocks_create(int dfd, bool shared, bool reserve);
int  jlocks_map(struct jsession *s);
size_t jlocks_size(void);
int  jshared_release_reserve(struct jsession *s);
int  jshared_make_reserve(struct jsession *s);
int  jfd_high(int fd);
bool jpath_parent(const char *path, char out[PATH_MAX]);

#endif
