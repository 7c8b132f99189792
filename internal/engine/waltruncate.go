package engine

// #include <unistd.h>
// unsigned long holter_wal_truncations_skipped(void);
import "C"

import "os"

// localTruncationsSkipped counts the truncations of a DuckDB write-ahead
// log that failed on a read-only or failing file system and were reported
// to DuckDB as done (waltruncate.c says why) in this process.
func localTruncationsSkipped() uint64 { return uint64(C.holter_wal_truncations_skipped()) }

// truncate is ftruncate(2) as DuckDB calls it: through waltruncate.c.
func truncate(f *os.File, size int64) error {
	if r, err := C.ftruncate(C.int(f.Fd()), C.off_t(size)); r != 0 {
		return err
	}
	return nil
}
