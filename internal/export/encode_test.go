package export

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// TestExportEncodeRow checks the hand-written JSONEachRow encoder against
// encoding/json's reading of it: strings with quotes, backslashes, control
// characters and non-ASCII text, integers beyond 2^53, floats, NaN (sent
// as null), booleans (0/1), NULLs and arrays.
func TestExportEncodeRow(t *testing.T) {
	names := []string{"s", "i", "u", "f", "nan", "b", "null", "arr"}
	row := []any{"a\"b\\c\n\t\x01é€", int64(math.MaxInt64), uint64(math.MaxUint64), 0.1, math.NaN(), true, nil, []any{"x", int64(2)}}
	var buf bytes.Buffer
	if err := encodeRow(&buf, names, row, nil, 7); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(buf.Bytes(), []byte("}\n")) {
		t.Fatalf("not one line: %q", buf.String())
	}
	d := json.NewDecoder(&buf)
	d.UseNumber()
	var got map[string]any
	if err := d.Decode(&got); err != nil {
		t.Fatalf("%v: %q", err, buf.String())
	}
	want := map[string]any{"s": "a\"b\\c\n\t\x01é€", "i": json.Number("9223372036854775807"), "u": json.Number("18446744073709551615"),
		"f": json.Number("0.1"), "nan": nil, "b": json.Number("1"), "null": nil, "arr": []any{"x", json.Number("2")},
		"_batch": "", "_version": json.Number("7")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %v\nwant    %v", got, want)
	}
}
