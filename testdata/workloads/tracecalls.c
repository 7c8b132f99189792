// tracecalls makes a known number of calls for holter trace's exactness and
// agreement tests: after the gate file (argv[1]) appears it calls getppid N
// times, reads /dev/zero R times cycling through sizes 1, 100, 1000 and
// 5000 bytes, and calls traced_add(i, 2*i) M times for i = 0..M-1; then,
// given a hold file (argv[5]), it makes argv[5].ran and waits while the
// hold file exists, so that the tracer can still read its mappings.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long traced_add(long a, long b)
{
	__asm__ volatile("" ::: "memory");
	return a + b;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6)
		return 2;
	long n = atol(argv[2]), r = atol(argv[3]), m = atol(argv[4]);
	struct timespec ts = {0, 1000000};
	while (access(argv[1], F_OK) != 0)
		nanosleep(&ts, NULL);
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	static char buf[5000];
	static const int sizes[] = {1, 100, 1000, 5000};
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	for (long i = 0; i < r; i++)
		if (read(fd, buf, sizes[i % 4]) != sizes[i % 4])
			return 1;
	close(fd);
	long sum = 0;
	for (long i = 0; i < m; i++)
		sum += traced_add(i, 2 * i);
	if (argc == 6) {
		char ran[4096];
		snprintf(ran, sizeof ran, "%s.ran", argv[5]);
		close(open(ran, O_CREAT | O_WRONLY, 0644));
		while (access(argv[5], F_OK) == 0)
			nanosleep(&ts, NULL);
	}
	return sum == 3 * m * (m - 1) / 2 ? 0 : 1;
}
