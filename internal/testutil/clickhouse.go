package testutil

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ClickHouse is a throwaway ClickHouse server (Debian's clickhouse-server)
// with its own data directory and ports, for fleet tests.
type ClickHouse struct {
	URL    string // http://ADDR:PORT of the first listen address
	dir    string
	config string
	cmd    *exec.Cmd
	t      testing.TB
}

// StartClickHouse starts a server listening on the given addresses (at
// least one; e.g. 127.0.0.1 and a veth's address) on free ports, and kills
// it when the test ends.
func StartClickHouse(t testing.TB, listen ...string) *ClickHouse {
	t.Helper()
	bin := RequireTool(t, "clickhouse-server")
	dir := t.TempDir()
	httpPort, tcpPort := freePort(t), freePort(t)
	var hosts strings.Builder
	for _, h := range listen {
		fmt.Fprintf(&hosts, "<listen_host>%s</listen_host>", h)
	}
	cfg := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/error.log</errorlog></logger>
  <http_port>%[2]d</http_port>
  <tcp_port>%[3]d</tcp_port>
  %[4]s
  <path>%[1]s/data/</path>
  <tmp_path>%[1]s/tmp/</tmp_path>
  <user_files_path>%[1]s/user_files/</user_files_path>
  <format_schema_path>%[1]s/format_schemas/</format_schema_path>
  <mark_cache_size>5368709</mark_cache_size>
  <uncompressed_cache_size>0</uncompressed_cache_size>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mlock_executable>false</mlock_executable>
</yandex>
`, dir, httpPort, tcpPort, hosts.String())
	users := `<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>1000000000</max_memory_usage></default></profiles>
  <users>
    <default><password></password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></default>
    <holter><password>fleet-secret</password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></holter>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`
	ch := &ClickHouse{URL: fmt.Sprintf("http://%s", net.JoinHostPort(listen[0], fmt.Sprint(httpPort))),
		dir: dir, config: filepath.Join(dir, "config.xml"), t: t}
	_ = bin
	for name, body := range map[string]string{"config.xml": cfg, "users.xml": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch.Start()
	t.Cleanup(ch.kill)
	return ch
}

// ClickHouseUser and ClickHouseParams are the test server's password-protected user.
const (
	ClickHouseUser     = "holter"
	ClickHousePassword = "fleet-secret"
)

// Start (re)starts the server on the same data and waits until it answers.
func (c *ClickHouse) Start() {
	c.t.Helper()
	c.cmd = exec.Command("clickhouse-server", "--config-file="+c.config)
	c.cmd.Dir = c.dir
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start clickhouse-server: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(c.URL + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(c.dir, "error.log"))
	c.t.Fatalf("clickhouse-server did not answer at %s within 30s:\n%s", c.URL, log)
}

// Stop stops the server (SIGTERM, then SIGKILL) and waits for it. The
// server waits for its clients' idle keep-alive connections to close
// (10 s, its keep_alive_timeout): this process's own are closed first.
func (c *ClickHouse) Stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	if tr, ok := http.DefaultTransport.(interface{ CloseIdleConnections() }); ok {
		tr.CloseIdleConnections()
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	c.cmd = nil
}

// kill ends the server at once, when the test is done with it and its
// data: stopped, it would wait for the idle keep-alive connections of
// clients in other processes too (a recorder exporting to it).
func (c *ClickHouse) kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	c.cmd.Wait()
	c.cmd = nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
