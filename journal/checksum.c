/*
 * checksum.c - crc32c for framing, BLAKE2b (libsodium) for the hash chain and
 * pre-image hashes, and the small conversions both halves share.
 */
#if defined(__x86_64__)
#include <cpuid.h>
#include <features.h>
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
#include <sys/platform/x86.h>
#endif
#endif
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

static uint32_t crc_bytes(uint32_t crc, const uint8_t *s, size_t n)
{
	while (n--)
		crc = crc_table[(crc ^ *s++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
/* The same polynomial in the SSE4.2 instruction: eight bytes a cycle or so
 * instead of one by table (it was a sixth of the shim's instructions per
 * removed file). */
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const uint8_t *s, size_t n)
{
	uint64_t c = crc, w;

	for (; n >= 8; s += 8, n -= 8) {
		memcpy(&w, s, 8);
		c = __builtin_ia32_crc32di(c, w);
	}
	crc = (uint32_t)c;
	for (; n; s++, n--)
		crc = __builtin_ia32_crc32qi(crc, *s);
	return crc;
}

/* Asked at the first checksum, not at load: libgcc's
 * __builtin_cpu_supports would add a constructor that runs cpuid (a
 * hypervisor exit under a VM, about 4.6 us here) in every process the shim
 * is loaded into. glibc has asked the CPU already, at the start of the
 * process: its answer is read where it keeps it (2.33 and later); cpuid
 * only with an older one. */
static int has_sse42 = -1;

static int ask_sse42(void)
{
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
	return CPU_FEATURE_ACTIVE(SSE4_2) ? 1 : 0;
#else
	unsigned a, b, c = 0, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2) ? 1 : 0;
#endif
}
#endif

uint32_t jcrc32c(uint32_t crc, const void *p, size_t n)
{
#if defined(__x86_64__)
	if (has_sse42 < 0)
		has_sse42 = ask_sse42();
	if (has_sse42)
		return ~crc_sse42(~crc, p, n);
#endif
	return ~crc_bytes(~crc, p, n);
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
