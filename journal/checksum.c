/*
 * checksum.c - crc32c for framing, BLAKE2b (libsodium) for the hash chain and
 * pre-image hashes, and the small conversions both halves share.
 */
#include <sodium.h>
#include <string.h>
#include <time.h>
#include "journal.h"

/* CRC-32C (Castagnoli), reflected, table-driven; the table is built at
 * compile time so no initialisation runs in a host process. */
#define P 0x82f63b78u
#define T1(c) (((c) & 1) ? ((c) >> 1) ^ P : (c) >> 1)
#define T8(c) T1(T1(T1(T1(T1(T1(T1(T1(c))))))))
#define R4(n) T8(n), T8(n + 1), T8(n + 2), T8(n + 3)
#define R16(n) R4(n), R4(n + 4), R4(n + 8), R4(n + 12)
#define R64(n) R16(n), R16(n + 16), R16(n + 32), R16(n + 48)
static const uint32_t crc_table[256] = { R64(0u), R64(64u), R64(128u), R64(192u) };

uint32_t jcrc32c(uint32_t crc, const void *p, size_t n)
{
	const uint8_t *s = p;

	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *s++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

void jhash(uint8_t out[32], const void *a, size_t an, const void *b, size_t bn)
{
	crypto_generichash_blake2b_state st;

	crypto_generichash_blake2b_init(&st, NULL, 0, 32);
	if (an)
		crypto_generichash_blake2b_update(&st, a, an);
	if (bn)
		crypto_generichash_blake2b_update(&st, b, bn);
	crypto_generichash_blake2b_final(&st, out, 32);
}

void jstat_from(struct jstat *j, const struct stat *st)
{
	memset(j, 0, sizeof(*j));
	j->dev = st->st_dev;
	j->ino = st->st_ino;
	j->rdev = st->st_rdev;
	j->size = (uint64_t)st->st_size;
	j->mode = st->st_mode;
	j->uid = st->st_uid;
	j->gid = st->st_gid;
	j->nlink = (uint32_t)st->st_nlink;
	j->atime_ns = (int64_t)st->st_atim.tv_sec * 1000000000 + st->st_atim.tv_nsec;
	j->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	j->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	j->blocks = (uint64_t)st->st_blocks;
}

int64_t jnow_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
