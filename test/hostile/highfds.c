/*
 * highfds.c - a host that parks descriptors on high numbers with dup2()
 * (700 to 1023, where the shim keeps its own), writes files through them
 * and closes them again. Imitates shells and supervisors that move
 * descriptors out of the way: bash keeps a script on fd 255 and allocates
 * `exec {fd}>` names upwards, daemontools' fdmove and runit's chpst dup2
 * onto any number they are given.
 *
 * usage: highfds FILE...   (each FILE is overwritten, then appended to
 * through every parked descriptor: FILE holds 325 lines at the end)
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LO 700
#define HI 1023

int main(int argc, char **argv)
{
	static const char line[] = "through a parked descriptor\n";

	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
		if (fd < 0) {
			perror(argv[i]);
			return 1;
		}
		if (write(fd, "first\n", 6) != 6)
			return 1;
		for (int n = LO; n <= HI; n++) {
			if (dup2(fd, n) != n) {
				perror("dup2");
				return 1;
			}
		}
		close(fd);
		for (int n = LO; n <= HI; n++) {
			if (write(n, line, sizeof(line) - 1) != (ssize_t)sizeof(line) - 1) {
				perror("write");
				return 1;
			}
			close(n);
		}
	}
	/* The shim must still journal a change made after all of that. */
	for (int i = 1; i < argc; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.renamed", argv[i]);
		if (rename(argv[i], path) < 0 || rename(path, argv[i]) < 0) {
			perror("rename");
			return 1;
		}
	}
	return 0;
}
