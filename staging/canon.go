package staging

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// canonWriter writes the canonical JSON the reference hashes (Python's json.dumps
// with sort_keys, compact separators and ensure_ascii). encoding/json cannot be
// used: it escapes <, > and & and leaves non-ASCII as UTF-8, and either would
// change every id.
type canonWriter struct{ b []byte }

func (w *canonWriter) raw(s string) { w.b = append(w.b, s...) }

func (w *canonWriter) int(v int) { w.b = strconv.AppendInt(w.b, int64(v), 10) }

func (w *canonWriter) ints(vs []int) {
	w.b = append(w.b, '[')
	for i, v := range vs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.int(v)
	}
	w.b = append(w.b, ']')
}

const hexDigits = "0123456789abcdef"

// str writes s as a pure-ASCII JSON string: the short escapes Python uses, every
// other control character and every non-ASCII character as a lowercase \uXXXX,
// characters beyond the BMP as a surrogate pair. DEL (0x7f) is escaped too
// (\u007f): ensure_ascii escapes everything outside printable ASCII (0x20..0x7e).
func (w *canonWriter) str(s string) {
	w.b = append(w.b, '"')
	for _, r := range s {
		switch r {
		case '"':
			w.raw(`\"`)
		case '\\':
			w.raw(`\\`)
		case '\n':
			w.raw(`\n`)
		case '\r':
			w.raw(`\r`)
		case '\t':
			w.raw(`\t`)
		case '\b':
			w.raw(`\b`)
		case '\f':
			w.raw(`\f`)
		default:
			switch {
			case r < 0x20 || (r >= 0x7f && r < 0x10000):
				w.u16(uint16(r))
			case r >= 0x10000 && r <= utf8.MaxRune:
				hi, lo := utf16.EncodeRune(r)
				w.u16(uint16(hi))
				w.u16(uint16(lo))
			default:
				w.b = append(w.b, byte(r))
			}
		}
	}
	w.b = append(w.b, '"')
}

func (w *canonWriter) u16(v uint16) {
	w.b = append(w.b, '\\', 'u', hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
}
