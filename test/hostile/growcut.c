/* growcut N: for each of gK.bin (K < N, 1 MiB each), one thread writes
 * 128 KiB past the end while the main thread cuts the file to 64 KiB past
 * the end, a little later each time (test_shim_range.py). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OLD (1 << 20)

static int fd;
static pthread_barrier_t go;

static void *grow(void *arg)
{
	static char buf[128 << 10];

	(void)arg;
	memset(buf, 'G', sizeof(buf));
	pthread_barrier_wait(&go);
	if (pwrite(fd, buf, sizeof(buf), OLD) != (ssize_t)sizeof(buf))
		exit(3);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;

	for (int k = 0; k < n; k++) {
		char name[32];
		pthread_t t;

		snprintf(name, sizeof(name), "g%d.bin", k);
		if ((fd = open(name, O_RDWR)) < 0)
			return 2;
		pthread_barrier_init(&go, NULL, 2);
		pthread_create(&t, NULL, grow, NULL);
		pthread_barrier_wait(&go);
		for (volatile long spin = 0; spin < (k % 6) * 10000L; spin++)
			;
		if (ftruncate(fd, OLD + (64 << 10)) < 0)
			return 4;
		pthread_join(t, NULL);
		pthread_barrier_destroy(&go);
		close(fd);
	}
	return 0;
}
