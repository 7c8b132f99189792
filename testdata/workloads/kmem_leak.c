/* Rule #2 workload: kernel memory allocated and never freed. Appends 1 MiB
 * to a file on a tmpfs every RATE-th of a second and keeps it, so the page
 * cache (kernel pages nobody frees while the file exists) grows steadily:
 * the net allocation of a leak. Arguments: file, seconds, MiB per second. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) int holter_leak_chunk(int fd, const char *buf)
{
	return write(fd, buf, CHUNK) == CHUNK ? 0 : -1;
}

int main(int argc, char **argv)
{
	static char buf[CHUNK];
	double seconds, rate, start, end;
	long n = 0;
	int fd;

	if (argc < 4) {
		fprintf(stderr, "usage: kmem_leak FILE SECONDS MIB_PER_SECOND\n");
		return 2;
	}
	seconds = atof(argv[2]);
	rate = atof(argv[3]);
	fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	memset(buf, 'x', sizeof(buf));
	start = now();
	end = start + seconds;
	while (now() < end) {
		if (holter_leak_chunk(fd, buf) != 0) {
			perror("write");
			return 1;
		}
		n++;
		/* Paced: the n-th MiB is written at n/rate seconds. */
		while (now() < start + n / rate && now() < end)
			usleep(1000);
	}
	return 0;
}
