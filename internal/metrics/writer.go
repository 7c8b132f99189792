package metrics

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Writer writes metric families in Prometheus text.
type Writer struct{ W io.Writer }

// Family starts a metric family: its HELP and TYPE lines.
func (w Writer) Family(name, typ, help string) {
	fmt.Fprintf(w.W, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// Sample writes one sample; labels are name, value pairs.
func (w Writer) Sample(name string, v float64, labels ...string) {
	fmt.Fprintf(w.W, "%s%s %s\n", name, Labels(labels...), formatValue(v))
}

// Labels formats name, value pairs as {a="x",b="y"}, "" when there are none.
func Labels(kv ...string) string {
	if len(kv) == 0 {
		return ""
	}
	parts := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+`="`+escapeLabel(kv[i+1])+`"`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func escapeLabel(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

func escapeHelp(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return strings.ReplaceAll(s, "\n", `\n`)
}
