/* Context-switch storm: two processes bounce a byte over two pipes, like
 * lmbench's lat_ctx with two processes. Prints round trips per second. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	int a[2], b[2];
	char c = 'x';
	long n = 0;

	if (pipe(a) || pipe(b))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		close(a[1]);
		close(b[0]);
		while (read(a[0], &c, 1) == 1)
			if (write(b[1], &c, 1) != 1)
				return 1;
		return 0;
	}
	close(a[0]);
	close(b[1]);
	double start = now(), end = start + seconds;
	while (now() < end) {
		for (int i = 0; i < 1000; i++) {
			if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
				return 1;
		}
		n += 1000;
	}
	close(a[1]);
	waitpid(child, NULL, 0);
	printf("%.0f\n", n / (now() - start));
	return 0;
}
