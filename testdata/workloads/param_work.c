/* holter run workload: does SIZE fdatasync'd 4 KiB writes to FILE, sleeping
 * SLEEP_MS between them, and prints its throughput as "ops/s: N". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: param_work FILE OPS SLEEP_MS\n");
		return 2;
	}
	int ops = atoi(argv[2]), sleep_ms = atoi(argv[3]);
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	char buf[4096] = {0};
	struct timespec a, b;
	if (fd < 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < ops; i++) {
		if (write(fd, buf, sizeof buf) != sizeof buf || fdatasync(fd) != 0)
			return 1;
		if (sleep_ms)
			usleep(sleep_ms * 1000);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ops/s: %.3f\n", ops / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9));
	return 0;
}
