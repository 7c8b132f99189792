package otlp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter is a listener that holds at most a number of connections at
// once. One over the limit is not left waiting in the kernel's queue,
// where an exporter would wait with it: refuse answers it (HTTP: 503 with
// Retry-After) or it is closed, and counted.
type connLimiter struct {
	net.Listener
	slots   chan struct{}
	refuse  func(net.Conn)
	refused atomic.Uint64
}

func limitConnections(ln net.Listener, max int, refuse func(net.Conn)) *connLimiter {
	return &connLimiter{Listener: ln, slots: make(chan struct{}, max), refuse: refuse}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			l.refused.Add(1)
			if l.refuse == nil {
				c.Close()
			} else {
				go l.refuse(c)
			}
		}
	}
}

// limitedConn gives its slot back when it is closed, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// refuseWithin bounds what a refused connection may cost: its answer is
// written, and what the client sent read away, within this time.
const refuseWithin = time.Second

// refuseHTTP answers an HTTP connection over the limit with a 503 the
// exporter retries after a second. What the client sent is read away
// before closing, so that it gets the answer rather than a reset.
func refuseHTTP(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(refuseWithin))
	// The request's head is read first: an answer that comes before the
	// request was sent is one the client's transport may not take for
	// its answer (Go's drops it as unsolicited and fails the request).
	if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 64<<10))); err != nil {
		return // gone, not HTTP, or no request within the deadline
	}
	const body = "too many connections, retry later"
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"+
		"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}
