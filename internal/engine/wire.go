package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"time"
)

// The wire between a client and the engine process: frames of a 32-bit
// little-endian length, a kind byte and a body, on a stream socket of
// its own per connection. A body is built of unsigned and signed varints,
// length-prefixed strings and tagged values.

// Frame kinds, client to engine.
const (
	kExec        byte = 1 // seq, sql, args → kOK | kErr
	kQuery       byte = 2 // seq, sql, budget, nice, args → kCols kRows* kEnd | kErr
	kPrepare     byte = 3 // seq, sql → kPrepared | kErr
	kStmtExec    byte = 4 // seq, stmt id, args → kOK | kErr
	kStmtQuery   byte = 5 // seq, stmt id, budget, nice, args → as kQuery
	kStmtClose   byte = 6 // seq, stmt id → kOK
	kAppendBegin byte = 7 // seq, schema, table (no answer)
	kAppendRows  byte = 8 // seq, rows (no answer)
	kAppendEnd   byte = 9 // seq → kOK | kErr, for the whole append
	kCancel      byte = 10
	kPing        byte = 11 // seq → kOK
)

// Frame kinds, engine to client.
const (
	kOK       byte = 100 // rows affected
	kErr      byte = 101 // error type, message, log truncations skipped
	kCols     byte = 102 // names, database types
	kRows     byte = 103 // row count, then each row's values
	kEnd      byte = 104 // whether the result budget was exceeded
	kPrepared byte = 105 // stmt id, inputs, statement type
)

// Control messages, client to engine, on the control socket (a sequenced
// packet socket: one message each).
const (
	cOpen    byte = 1 // the options (encoded); answered by cOpened
	cConn    byte = 2 // a new connection's socket, as an SCM_RIGHTS fd
	cExit    byte = 3 // checkpoint above (bytes of log; < 0 never); answered by cExited
	cOpened  byte = 4 // error type and message ("" opened), log truncations skipped
	cExited  byte = 5 // error of the checkpoint or close, "" none
	cStats   byte = 6 // answered by cStatsAre
	cStatsIs byte = 7 // log truncations skipped
)

// maxFrame bounds a frame's body: a row batch is flushed long before.
const maxFrame = 256 << 20

// rowBatchBytes is the size past which a batch of rows is sent.
const rowBatchBytes = 64 << 10

// Value tags.
const (
	tNil byte = iota
	tFalse
	tTrue
	tInt8
	tInt16
	tInt32
	tInt64
	tUint8
	tUint16
	tUint32
	tUint64
	tFloat32
	tFloat64
	tString
	tBytes
	tTime
	tBigInt
	tDecimal
	tInterval
	tList
	tStruct
	tMap
	tUnion
	tStrings
	tInt64s
	tInt32s
	tUint32s
	tUint64s
	tFloat64s
)

// Decimal is a DECIMAL value: Value scaled down by 10^Scale.
type Decimal struct {
	Width uint8
	Scale uint8
	Value *big.Int
}

// Float64 is the decimal's nearest float.
func (d Decimal) Float64() float64 {
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(d.Value),
		new(big.Float).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil))).Float64()
	return f
}

// String is the decimal's exact digits, without trailing zeros after the
// point.
func (d Decimal) String() string {
	if d.Value == nil || d.Value.Sign() == 0 {
		return "0"
	}
	sign, digits := "", d.Value.String()
	if digits[0] == '-' {
		sign, digits = "-", digits[1:]
	}
	scale := int(d.Scale)
	for scale > 0 && digits[len(digits)-1] == '0' {
		digits, scale = digits[:len(digits)-1], scale-1
	}
	if scale == 0 {
		return sign + digits
	}
	for len(digits) <= scale {
		digits = "0" + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}

// Interval is an INTERVAL value.
type Interval struct {
	Days   int32 `json:"days"`
	Months int32 `json:"months"`
	Micros int64 `json:"micros"`
}

// Map is a MAP value.
type Map map[any]any

// Union is a UNION value: its member's tag and value.
type Union struct {
	Value any    `json:"value"`
	Tag   string `json:"tag"`
}

// encoder builds a frame's body.
type encoder struct{ b []byte }

func (e *encoder) reset(kind byte) {
	e.b = append(e.b[:0], 0, 0, 0, 0, kind)
}

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) byte(v byte)      { e.b = append(e.b, v) }

func (e *encoder) string(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bool(v bool) {
	if v {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

func (e *encoder) strings(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.string(s)
	}
}

func (e *encoder) bigInt(v *big.Int) {
	if v.Sign() < 0 {
		e.byte(1)
	} else {
		e.byte(0)
	}
	mag := v.Bytes()
	e.uvarint(uint64(len(mag)))
	e.b = append(e.b, mag...)
}

// value appends v, tagged. Only the types a DuckDB driver gives or takes
// are carried; another is an error naming it.
func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case nil:
		e.byte(tNil)
	case bool:
		if x {
			e.byte(tTrue)
		} else {
			e.byte(tFalse)
		}
	case int8:
		e.byte(tInt8)
		e.varint(int64(x))
	case int16:
		e.byte(tInt16)
		e.varint(int64(x))
	case int32:
		e.byte(tInt32)
		e.varint(int64(x))
	case int64:
		e.byte(tInt64)
		e.varint(x)
	case int:
		e.byte(tInt64)
		e.varint(int64(x))
	case uint8:
		e.byte(tUint8)
		e.uvarint(uint64(x))
	case uint16:
		e.byte(tUint16)
		e.uvarint(uint64(x))
	case uint32:
		e.byte(tUint32)
		e.uvarint(uint64(x))
	case uint64:
		e.byte(tUint64)
		e.uvarint(x)
	case uint:
		e.byte(tUint64)
		e.uvarint(uint64(x))
	case float32:
		e.byte(tFloat32)
		e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(x))
	case float64:
		e.byte(tFloat64)
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(x))
	case string:
		e.byte(tString)
		e.string(x)
	case []byte:
		e.byte(tBytes)
		e.uvarint(uint64(len(x)))
		e.b = append(e.b, x...)
	case time.Time:
		e.byte(tTime)
		e.varint(x.Unix())
		e.uvarint(uint64(x.Nanosecond()))
	case *big.Int:
		if x == nil {
			e.byte(tNil)
			return nil
		}
		e.byte(tBigInt)
		e.bigInt(x)
	case Decimal:
		e.byte(tDecimal)
		e.byte(x.Width)
		e.byte(x.Scale)
		e.bigInt(orZero(x.Value))
	case Interval:
		e.byte(tInterval)
		e.varint(int64(x.Days))
		e.varint(int64(x.Months))
		e.varint(x.Micros)
	case []any:
		e.byte(tList)
		e.uvarint(uint64(len(x)))
		for _, el := range x {
			if err := e.value(el); err != nil {
				return err
			}
		}
	case map[string]any:
		e.byte(tStruct)
		e.uvarint(uint64(len(x)))
		for k, el := range x {
			e.string(k)
			if err := e.value(el); err != nil {
				return err
			}
		}
	case Map:
		e.byte(tMap)
		e.uvarint(uint64(len(x)))
		for k, el := range x {
			if err := e.value(k); err != nil {
				return err
			}
			if err := e.value(el); err != nil {
				return err
			}
		}
	case Union:
		e.byte(tUnion)
		e.string(x.Tag)
		return e.value(x.Value)
	case []string:
		e.byte(tStrings)
		e.strings(x)
	case []int64:
		e.byte(tInt64s)
		e.uvarint(uint64(len(x)))
		for _, n := range x {
			e.varint(n)
		}
	case []int32:
		e.byte(tInt32s)
		e.uvarint(uint64(len(x)))
		for _, n := range x {
			e.varint(int64(n))
		}
	case []uint32:
		e.byte(tUint32s)
		e.uvarint(uint64(len(x)))
		for _, n := range x {
			e.uvarint(uint64(n))
		}
	case []uint64:
		e.byte(tUint64s)
		e.uvarint(uint64(len(x)))
		for _, n := range x {
			e.uvarint(n)
		}
	case []float64:
		e.byte(tFloat64s)
		e.uvarint(uint64(len(x)))
		for _, f := range x {
			e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(f))
		}
	default:
		// Other slices (of structs' values, of pointers) as lists.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
			e.byte(tList)
			e.uvarint(uint64(rv.Len()))
			for i := range rv.Len() {
				if err := e.value(rv.Index(i).Interface()); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("a value of type %T cannot be passed to the database", v)
	}
	return nil
}

func orZero(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}

// frame is the encoded frame, its length filled in.
func (e *encoder) frame() []byte {
	binary.LittleEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

// errShort is a body that ends before its values do.
var errShort = errors.New("engine: truncated frame")

// decoder reads a frame's body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool { return d.byte() != 0 }

func (d *decoder) raw(n uint64) []byte {
	if uint64(len(d.b)) < n {
		d.fail(errShort)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.raw(d.uvarint())) }

// count is a length that the rest of the body can hold, at least a byte
// an element.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return 0
	}
	return int(n)
}

func (d *decoder) strings() []string {
	n := d.count()
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.string())
	}
	return out
}

func (d *decoder) bigInt() *big.Int {
	neg := d.byte() == 1
	v := new(big.Int).SetBytes(d.raw(d.uvarint()))
	if neg {
		v.Neg(v)
	}
	return v
}

func (d *decoder) float64() float64 {
	b := d.raw(8)
	if b == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// value reads a tagged value; depth bounds nesting.
func (d *decoder) value() any { return d.valueAt(0) }

func (d *decoder) valueAt(depth int) any {
	if depth > 64 {
		d.fail(errors.New("engine: values nested too deep"))
		return nil
	}
	switch tag := d.byte(); tag {
	case tNil:
		return nil
	case tFalse:
		return false
	case tTrue:
		return true
	case tInt8:
		return int8(d.varint())
	case tInt16:
		return int16(d.varint())
	case tInt32:
		return int32(d.varint())
	case tInt64:
		return d.varint()
	case tUint8:
		return uint8(d.uvarint())
	case tUint16:
		return uint16(d.uvarint())
	case tUint32:
		return uint32(d.uvarint())
	case tUint64:
		return d.uvarint()
	case tFloat32:
		b := d.raw(4)
		if b == nil {
			return nil
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case tFloat64:
		return d.float64()
	case tString:
		return d.string()
	case tBytes:
		return append([]byte(nil), d.raw(d.uvarint())...)
	case tTime:
		sec := d.varint()
		return time.Unix(sec, int64(d.uvarint())).UTC()
	case tBigInt:
		return d.bigInt()
	case tDecimal:
		w, s := d.byte(), d.byte()
		return Decimal{Width: w, Scale: s, Value: d.bigInt()}
	case tInterval:
		days, months := d.varint(), d.varint()
		return Interval{Days: int32(days), Months: int32(months), Micros: d.varint()}
	case tList:
		n := d.count()
		out := make([]any, 0, n)
		for range n {
			out = append(out, d.valueAt(depth+1))
		}
		return out
	case tStruct:
		n := d.count()
		out := make(map[string]any, n)
		for range n {
			k := d.string()
			out[k] = d.valueAt(depth + 1)
		}
		return out
	case tMap:
		n := d.count()
		out := make(Map, n)
		for range n {
			k := d.valueAt(depth + 1)
			if k != nil && !reflect.TypeOf(k).Comparable() {
				d.fail(fmt.Errorf("engine: a MAP key of type %T", k))
				return nil
			}
			out[k] = d.valueAt(depth + 1)
		}
		return out
	case tUnion:
		tag := d.string()
		return Union{Tag: tag, Value: d.valueAt(depth + 1)}
	case tStrings:
		return d.strings()
	case tInt64s:
		return decodeSlice(d, d.varint)
	case tInt32s:
		return decodeSlice(d, func() int32 { return int32(d.varint()) })
	case tUint32s:
		return decodeSlice(d, func() uint32 { return uint32(d.uvarint()) })
	case tUint64s:
		return decodeSlice(d, d.uvarint)
	case tFloat64s:
		return decodeSlice(d, d.float64)
	default:
		d.fail(fmt.Errorf("engine: unknown value tag %d", tag))
		return nil
	}
}

// decodeSlice reads a count and that many elements by next.
func decodeSlice[T any](d *decoder, next func() T) []T {
	n := d.count()
	out := make([]T, 0, n)
	for range n {
		out = append(out, next())
	}
	return out
}

// readFrame reads one frame: its kind and body.
func readFrame(r *bufio.Reader) (kind byte, body []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("engine: a frame of %d bytes", n)
	}
	body = make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[4], body, nil
}
