package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/holter-dev/holter/internal/access"
)

// guard lets a request through to next once it has a role that may make
// it: on a Unix socket the peer's, over HTTP its token's, after checks
// that no web page made it (Host, Origin, Sec-Fetch-Site).
type guard struct {
	hosts      hostPolicy
	tokens     []roleToken
	cookieName string
	next       http.Handler
}

// roleToken is a token and the role it gives.
type roleToken struct {
	value []byte
	role  access.Role
}

// roleKey holds a request's role in its context.
type roleKey struct{}

// roleOf is the role of the request whose context ctx is.
func roleOf(ctx context.Context) access.Role {
	r, _ := ctx.Value(roleKey{}).(access.Role)
	return r
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	role, onSocket := socketRole(r.Context())
	if !onSocket {
		if !g.hosts.allows(r.Host) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not a name of this server (%s; add names with --api-host)", r.Host, g.hosts))
			return
		}
		if given := r.URL.Query().Get("token"); given != "" && r.Method == http.MethodGet && !isAPI(r.URL.Path) {
			g.login(w, r, given)
			return
		}
		if err := sameOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, err.Error())
			return
		}
		if role = g.tokenRole(r); role == access.None {
			writeError(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer TOKEN, or open the UI once at its login URL, http://HOST/?token=TOKEN (holter ui-url prints it)")
			return
		}
	} else if role == access.None {
		writeError(w, http.StatusForbidden, "this recorder's socket admits root, the members of its admin group (holter) and, to read, of its reader group (holter-readers)")
		return
	}
	if need := needs(r); role < need {
		writeError(w, http.StatusForbidden, fmt.Sprintf("%s %s needs the %s role (root, the admin group holter, or the admin token); you have %s", r.Method, r.URL.Path, need, role))
		return
	}
	g.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
}

// needs is the least role a request needs: what only reads is for
// readers, everything else for admins (a route added later is an admin's
// until it is listed here).
func needs(r *http.Request) access.Role {
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return access.Reader
	case r.Method == http.MethodPost && (r.URL.Path == "/api/query" || r.URL.Path == "/api/export/parquet"):
		return access.Reader // read-only SQL, in a body for its length
	}
	return access.Admin
}

func isAPI(path string) bool { return strings.HasPrefix(path, "/api/") || path == "/metrics" }

// login answers the login URL, /?token=TOKEN: a right token is set as a
// cookie, and the browser is sent on to the page without it.
func (g *guard) login(w http.ResponseWriter, r *http.Request, given string) {
	if g.role(given) == access.None {
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: g.cookieName, Value: given, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
}

func (g *guard) tokenRole(r *http.Request) access.Role {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return g.role(bearer)
	}
	if c, err := r.Cookie(g.cookieName); err == nil {
		return g.role(c.Value)
	}
	return access.None
}

func (g *guard) role(given string) access.Role {
	if given == "" {
		return access.None
	}
	for _, t := range g.tokens {
		if subtle.ConstantTimeCompare([]byte(given), t.value) == 1 {
			return t.role
		}
	}
	return access.None
}

// sameOrigin refuses what a web page of another origin could have sent: a
// request that changes something (any method but GET and HEAD), or any
// API request, whose Sec-Fetch-Site says another site or origin made it,
// or whose Origin is not this server's. Programs (the CLI, curl) send
// neither header. Pages of the UI are not API requests: a link to the
// login URL from another site still opens it.
func sameOrigin(r *http.Request) error {
	if !isAPI(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return nil
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("cross-origin request refused: Sec-Fetch-Site is %s; only this server's own pages may call %s", site, r.URL.Path)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err != nil || u.Scheme != "http" || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("cross-origin request refused: Origin %s is not this server (http://%s)", origin, r.Host)
	}
	return nil
}

// hostPolicy is which Host headers name this server. A page on a DNS name
// its attacker points at 127.0.0.1 (DNS rebinding) reaches the server
// with that name in Host: names are allowed only when configured. An IP
// address in Host cannot be rebound: the loopback ones, the bound one,
// and any when bound to every address, are allowed.
type hostPolicy struct {
	bound net.IP
	names []string // lower case; "localhost" always
}

func newHostPolicy(boundHost string, names []string) hostPolicy {
	p := hostPolicy{bound: net.ParseIP(boundHost), names: []string{"localhost"}}
	for _, n := range names {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" && !slices.Contains(p.names, n) {
			p.names = append(p.names, n)
		}
	}
	return p
}

func (p hostPolicy) allows(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback() || p.bound != nil && (p.bound.IsUnspecified() || ip.Equal(p.bound))
	}
	return host != "" && slices.Contains(p.names, strings.ToLower(host))
}

func (p hostPolicy) String() string {
	s := "loopback addresses, " + strings.Join(p.names, ", ")
	switch {
	case p.bound == nil || p.bound.IsLoopback():
	case p.bound.IsUnspecified():
		s = "IP addresses, " + strings.Join(p.names, ", ")
	default:
		s = p.bound.String() + ", " + s
	}
	return s
}
