// Package access decides who may use a recorder's API, and how much.
//
// The recorder runs as root with eBPF, so its API is a privilege boundary.
// Every caller has a Role:
//
//   - Reader: the read-only views (status, the recording, read-only SQL,
//     metrics).
//   - Admin: also what changes the recorder or loads programs into the
//     kernel: live traces, switching vitals, runs and their boost.
//   - Root: also live traces that read arbitrary user memory
//     (unsafe_read).
//
// A caller gets a role in one of two ways. On the recorder's Unix socket
// the kernel says who connected (SO_PEERCRED, SO_PEERGROUPS): uid 0 is
// Root, a member of the admin group (holter) is Admin, a member of the
// reader group (holter-readers) is Reader, anyone else nothing. Over HTTP
// a token says it: the admin token, kept in the data directory in a file
// only root reads (AdminTokenFile), is Root, as only root can have read it;
// the reader token (ReaderTokenFile), readable by the reader group, is
// Reader. Tokens are made with crypto/rand at first start and kept across
// restarts; a token file others could have read is replaced.
package access
