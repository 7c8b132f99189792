/* One fast system call (getppid) at a stack depth of its own: argv[1]
 * frames of 512 bytes each below main, so that each depth is a syscall
 * label of its own (the vital masks the low 8 bits of the depth). */
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

__attribute__((noinline)) long holter_descend(int n)
{
	volatile char frame[512];

	frame[0] = (char)n;
	if (n > 0)
		return holter_descend(n - 1) + frame[0];
	return syscall(SYS_getppid);
}

int main(int argc, char **argv)
{
	return holter_descend(argc > 1 ? atoi(argv[1]) : 0) < 0;
}
