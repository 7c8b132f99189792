/* Churn workload: a short life — a few system calls, page faults on fresh
 * anonymous memory, writes to /dev/null — in holter_short_life, then exit.
 * argv[1], if given, is how many ms to linger first (so that a recorder
 * reads the samples while the process exists). The calls are one call below
 * holter_short_life because frame-pointer unwinding from inside libc skips
 * its caller. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGES 32

__attribute__((noinline)) long holter_short_call(int fd)
{
	return write(fd, "x", 1) + syscall(SYS_getppid);
}

__attribute__((noinline)) void holter_short_life(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, PAGES * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open("/dev/null", O_WRONLY);

	if (p == MAP_FAILED || fd < 0)
		exit(1);
	for (int i = 0; i < PAGES; i++)
		p[i * page] = 1;
	for (int i = 0; i < 50; i++)
		holter_short_call(fd);
	close(fd);
	munmap(p, PAGES * page);
}

int main(int argc, char **argv)
{
	holter_short_life();
	if (argc > 1)
		usleep(atoi(argv[1]) * 1000);
	return 0;
}
