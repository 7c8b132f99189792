// Package server is holter's API: what the CLI and the web UI use to
// reach a running recorder, or `holter ui` to show a stored recording or
// the fleet's.
//
// It is served on two kinds of listener. The CLI uses Unix sockets in the
// data directory: holter.sock, mode 0600 (0660 with group holter when the
// host has that group), and holter-read.sock, mode 0660 with group
// holter-readers, made only when the host has that group and serving
// read-only routes. Every connection's peer credentials (SO_PEERCRED,
// SO_PEERGROUPS) give its role (package access); the file modes only keep
// others from connecting at all. The web UI and remote callers use HTTP,
// on loopback unless a token the operator chose is given (CheckAddr),
// and always with a token: `Authorization: Bearer TOKEN`, or a cookie the
// login URL (LoginURL, /?token=TOKEN) sets, HttpOnly and SameSite=Strict,
// before sending the browser on to the page. The admin token gives the
// root role, the reader token the reader role.
//
// Over HTTP, before a token is looked at, a request must name this server
// in its Host header (the bound address, a loopback address, localhost,
// or a name given with --api-host; anything else is a 403, so a page that
// rebinds its DNS name to 127.0.0.1 gets nothing), and must not come from
// another web page: any API request and any request that is not a GET or
// HEAD is refused (403) when its Sec-Fetch-Site is not same-origin or none,
// or when its Origin is not this server's. Neither applies on the sockets,
// which no browser reaches.
//
// A request then needs a role: GET and HEAD, and POST /api/query (read-only
// SQL), the reader role; everything else the admin role (live traces,
// switching vitals, runs, boost). A live trace with unsafe_read needs the
// root role: uid 0 on the socket, or the admin token. At most
// Options.MaxTraces live traces run at once, their maps holding at most
// Options.MaxTraceBytes together; a trace beyond either is refused with a
// 429 that names the limit (a 400 when its maps alone exceed it).
package server
