/*
 * fuzz_reader.c - libFuzzer target for the journal reader. The input is the
 * body of one segment (after a valid file header) in a real session
 * directory; every record read back is decoded field by field and its
 * content, if any, decompressed. Built with
 * -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION so that crc and chain checks
 * pass and the fuzzer reaches the decoders behind them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../journal/internal.h"

static char dir[64];
static char seg[128];
static uint8_t hdr[J_FILE_HDR];

static void init(void)
{
	struct jsession s;
	char *argv[] = { "fuzz", NULL };
	struct jsession_info info = { .argv = argv };

	strcpy(dir, "/tmp/ftsbx-fuzz-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	strcat(dir, "/s");
	if (jsession_open(&s, dir, &info))
		abort();
	jfile_header(hdr, s.salt, J_KIND_SEGMENT, s.features);
	jsession_close(&s);
	/* log/ as its first writer makes it (JI_LAZYDIRS) */
	snprintf(seg, sizeof(seg), "%s/log", dir);
	if (mkdir(seg, 0700) && errno != EEXIST)
		abort();
	snprintf(seg, sizeof(seg), "%s/log/1-1.ftj", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jreader r;
	char err[256];
	int fd;

	if (!dir[0])
		init();
	fd = open(seg, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, hdr, sizeof(hdr)) != sizeof(hdr) ||
	    (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
	if (jreader_open(&r, dir, err, sizeof(err)) == 0) {
		int null = open("/dev/null", O_WRONLY);
		for (size_t i = 0; i < r.nrec; i++) {
			const struct jrecord *c = &r.rec[i];
			struct jstat st;
			uint64_t v;
			free(jrec_strdup(c, F_PATH));
			jrec_stat(c, F_STAT, &st);
			jrec_u64(c, F_SEQREF, &v);
			jrec_content(&r, c, null, err, sizeof(err));
		}
		close(null);
	}
	jreader_close(&r);
	return 0;
}
