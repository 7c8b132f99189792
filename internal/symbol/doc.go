// Package symbol turns raw kernel and user-space addresses into function names.
//
// holter's BPF programs record stacks as bare instruction addresses: up to 64
// kernel frames and up to 64 user frames per sampled event, together with the
// pid and tid of the task. Addresses alone are useless to a reader, so user
// space translates each one into a Frame naming the function, the offset of the
// address inside that function, and the module (kernel module or mapped file)
// the code belongs to.
//
// Kernel addresses are resolved with the kallsyms table (normally
// /proc/kallsyms). The table lists the start address of every kernel symbol but
// not its size, so a text symbol is taken to extend up to the next listed
// symbol. The table is loaded once, sorted, and searched with a binary search.
// Unprivileged readers see every address as zero; LoadKernel reports that as an
// error rather than silently resolving nothing.
//
// User addresses need two steps. First the address is located in the memory
// map of the process (/proc/PID/maps), which tells which file is mapped there
// and at which file offset. The file offset is then converted into the virtual
// address the ELF file itself uses, through the PT_LOAD program header that
// contains it; this is what makes the same code work for position-independent
// executables and shared libraries (loaded at a random base) as well as for
// fixed-address executables. Finally that ELF virtual address is looked up in
// the function symbols of the file (.symtab, or .dynsym for stripped files).
//
// Both steps are cached. The parsed memory map is cached per process, keyed by
// pid and process start time so that a recycled pid is never answered with the
// map of the process that previously owned it; an address that is not covered
// by the cached map triggers one re-read, since the process may have mapped a
// library after the cache was filled. Parsed symbol tables are cached by the
// GNU build id of the file, so a library mapped by hundreds of processes is
// parsed once; files without a build id are cached by path, inode and
// modification time. Files are opened through /proc/PID/map_files or
// /proc/PID/root where possible, so that binaries inside other mount
// namespaces (containers) and binaries deleted after they were started can
// still be symbolized.
//
// Symbolization never fails loudly: an address that cannot be resolved gives a
// Frame with an empty Func, and a process that has exited gives frames with
// neither Func nor Module.
package symbol
