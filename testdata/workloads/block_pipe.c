/* blck vital workload: a process that sleeps on a pipe, woken every 20 ms
 * by its child. The read is one call below the workload function because
 * frame-pointer unwinding from inside libc's read() skips its caller. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

__attribute__((noinline)) int holter_read_once(int fd)
{
	char c;
	return read(fd, &c, 1);
}

__attribute__((noinline)) void holter_block_on_pipe(int fd)
{
	while (holter_read_once(fd) == 1)
		;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	int p[2];

	if (pipe(p) != 0)
		return 1;
	pid_t child = fork();
	if (child == 0) {
		close(p[0]);
		for (int i = 0; i < seconds * 50; i++) {
			usleep(20000);
			if (write(p[1], "x", 1) != 1)
				return 1;
		}
		return 0;
	}
	close(p[1]);
	holter_block_on_pipe(p[0]);
	waitpid(child, NULL, 0);
	return 0;
}
