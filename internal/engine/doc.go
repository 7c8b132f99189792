// Package engine runs DuckDB in a process of its own and gives it to the
// rest of holter as a database/sql driver.
//
// DuckDB is most of what the recorder would hold resident: some 20 MB of
// its code and tens of MB of its allocations, wanted only while an epoch
// is committed, analysed or queried. In a process of its own it costs
// nothing between those times (a Connector with a Linger ends the process
// once no connection has been open that long, and starts another at the
// next Connect), its memory is returned whole when it ends, and a crash
// in it ends a query, not the recorder.
//
// The engine process is the running binary started again (/proc/self/exe,
// named holter-engine), which this package's init catches before the
// program's own initialisation: a program or test binary that imports the
// package can start engines with nothing else to install. It is the
// single user of its database file; the parent keeps the Connector.
//
// The parent and the process talk over sockets. A SOCK_SEQPACKET pair
// carries control messages: the options to open with, one new connection
// each (a SOCK_STREAM pair whose far end is passed along), and the request
// to end. Each connection is a stream of frames (wire.go): requests (an
// exec, a query with its arguments, a prepare, a batch of rows to append,
// a cancellation) and their answers, a query's rows streamed in batches as
// DuckDB makes them. Values cross in the types DuckDB's own driver gives,
// with DECIMAL, INTERVAL, MAP and UNION as this package's types.
//
// Cancelling a query's context cancels it in the engine; a query may run
// at a lower CPU priority (WithNice) on a thread of its own there; a
// result budget (WithResultBudget) caps the bytes of its answer through a
// function the query calls (BudgetFunction). Queries run on the thread
// that asks (threads = 1): DuckDB starts no threads whose calls into Go
// would wait on the process's initialisation.
//
// When an engine process ends without being asked (killed, out of
// memory), its connections fail with an ExitedError that quotes the end
// of what it wrote to stderr; the next Connect starts another. CPUTime and
// ResidentBytes give what the engines this process started cost, for the
// recorder's own accounting.
package engine
