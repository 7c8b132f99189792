package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/testutil"
)

// otelPython is a python3 with the stock OpenTelemetry SDK and its OTLP/HTTP
// exporter from PyPI (pythonVenv).
func otelPython(t *testing.T) string {
	return pythonVenv(t, "otel-python", "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter",
		"opentelemetry-sdk==1.45.2", "opentelemetry-exporter-otlp-proto-http==1.45.2")
}

// pythonVenv is the python of a virtual environment named name with
// packages from PyPI, kept in the user's cache directory across runs:
// made when probe, a Python statement, fails in it.
func pythonVenv(t *testing.T, name, probe string, packages ...string) string {
	t.Helper()
	python3 := testutil.RequireTool(t, "python3")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(cache, "holter", name)
	py := filepath.Join(venv, "bin", "python")
	if exec.Command(py, "-c", probe).Run() == nil {
		return py
	}
	if out, err := exec.Command(python3, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(venv, "bin", "pip"), append([]string{"install", "-q"}, packages...)...).CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v\n%s", strings.Join(packages, " "), err, out)
	}
	return py
}

// The stock SDK's spans: a service name, no process.pid, no thread.id.
const stockSDKScript = `
import os, sys
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider(resource=Resource.create({"service.name": "pystock"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint="http://%s/v1/traces" % sys.argv[1])))
tracer = provider.get_tracer("stock")
with tracer.start_as_current_span("checkout") as span:
    with tracer.start_as_current_span("charge"):
        sum(range(100000))
    trace_id = format(span.get_span_context().trace_id, "032x")
if not provider.force_flush(10000):
    sys.exit("flush failed")
print(os.getpid(), trace_id)
`

// TestStockSDKSpansSayWhyNotAccounted sends spans from the stock
// OpenTelemetry Python SDK, which carry neither process.pid nor thread.id:
// holter status says how many are not accounted, why, which service and
// which local process (found from the exporter's loopback connection) sent
// them, and how to add the attributes; trace-path says why per span.
func TestStockSDKSpansSayWhyNotAccounted(t *testing.T) {
	testutil.RequireRoot(t)
	py := otelPython(t)
	bin := testutil.BuildHolter(t)
	dir := t.TempDir()
	otlpAddr := freeAddr(t)
	r := startRecord(t, bin, "--data", dir, "--epoch", "1s", "--api", "", "--vitals", "cpu", "--budget", "off",
		"--otlp-grpc", "off", "--otlp-http", otlpAddr)
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	r.waitEpochs(t, 1)
	script := filepath.Join(t.TempDir(), "stock.py")
	os.WriteFile(script, []byte(stockSDKScript), 0o644)
	out, err := exec.Command(py, script, otlpAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("the stock SDK's export: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("script printed %q", out)
	}
	pid, traceID := fields[0], fields[1]

	status, errOut, code := runHolter(t, bin, "status", "--data", dir)
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, errOut)
	}
	for _, want := range []string{"OTLP: 2 spans are not accounted: they carry no process.pid and thread.id",
		"service pystock", "sent by pid " + pid + " (python", "threading.get_native_id()", "process.pid"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		path, errOut, code := runHolter(t, bin, "trace-path", "--data", dir, traceID)
		if code == 0 && strings.Count(path, "not accounted: the span has no thread.id or process.pid") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace-path %s: exit %d %s\n%s", traceID, code, errOut, path)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
