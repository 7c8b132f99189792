// Command httpd serves one 1400-byte HTML page on a loopback port: the
// target of bench/table2.sh's web-server row (Chopstix Table 2 used
// apachebench against a 1400-byte file).
//
//	httpd 127.0.0.1:8089
package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

func main() {
	addr := "127.0.0.1:8089"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	page := []byte("<html><body><p>" + strings.Repeat("holter ", 196) + "</p></body></html>\n")[:1400]
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write(page)
	})
	if err := http.ListenAndServe(addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		os.Exit(1)
	}
}
