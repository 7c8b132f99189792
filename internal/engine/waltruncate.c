// DuckDB 1.4 ends the process (std::terminate) when a commit's log write
// succeeded, its fsync failed, and truncating the log back then fails too:
// DuckTransaction::Commit is noexcept, and the truncation throws from its
// catch block. That is what a read-only remount between the write and the
// fsync does (ftruncate fails with EROFS), and a failing disk (EIO).
//
// The store closes its DuckDB instance at the first failed write and opens
// a new one once the fault clears, which reads the log from the file as it
// is; so a truncation that cannot happen changes nothing but the closing
// instance's idea of the log's length. This ftruncate, which DuckDB's
// static library binds to instead of the C library's, reports such a
// truncation of a write-ahead log as done, so that the commit fails with
// its own error rather than aborting the recorder. Every other call, and
// every other failure, is the system call's.

#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_ulong wal_truncations_skipped;

unsigned long holter_wal_truncations_skipped(void) { return atomic_load(&wal_truncations_skipped); }

// is_wal says whether fd is a DuckDB write-ahead log: its path ends in ".wal".
static int is_wal(int fd) {
	char link[64], path[4096];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof path - 1);
	if (n < 4) {
		return 0;
	}
	path[n] = 0;
	return strcmp(path + n - 4, ".wal") == 0;
}

int ftruncate(int fd, off_t length) {
	if (syscall(SYS_ftruncate, fd, length) == 0) {
		return 0;
	}
	int err = errno;
	if ((err == EROFS || err == EIO) && is_wal(fd)) {
		atomic_fetch_add(&wal_truncations_skipped, 1);
		return 0;
	}
	errno = err;
	return -1;
}
