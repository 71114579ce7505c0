package staging

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzExplain feeds arbitrary text to what `kvready name explain` runs: it must
// refuse or explain without panicking, and an explained name must rebuild.
func FuzzExplain(f *testing.F) {
	f.Add(goldenName)
	f.Add("")
	f.Add(goldenName[:107] + "g")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err != nil {
			return
		}
		fields, err := Explain(n)
		if err != nil {
			return
		}
		if fields.Shard.Count < 1 || fields.Shard.Index >= fields.Shard.Count {
			t.Fatalf("explained an impossible shard %+v", fields.Shard)
		}
		if !bytes.Equal(fields.Namespace[:], n[:NamespaceSize]) || !bytes.Equal(fields.Key[:], n[NamespaceSize:NamespaceSize+KeySize]) {
			t.Fatal("fields do not match the name's bytes")
		}
	})
}

// FuzzLayout feeds arbitrary JSON to the layout parser: it must refuse or return
// a layout whose id is computable and stable.
func FuzzLayout(f *testing.F) {
	golden, err := os.ReadFile("testdata/layout-simple.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add([]byte(`{"tokens_per_block":4,"pool_groups":{"1":[8,8]},"layer_groups":[{"kind":"state","window":2,"sink_blocks":0,"pool_group":1,"layers":[3],"shard":{"count":2,"index":1}}],"buffers":[{"layer":3,"role":"\u00e9","pool":[1,1],"offset":0,"size":8,"mapper":"SECTIONED","geometry":{"section_bytes":[4,4]},"transfer":false,"expansion":2}]}`))
	f.Add([]byte(`{}`))
	// What the reference hashes: two layers' buffers at one offset, no layer
	// groups, an empty group, a layer in two groups.
	f.Add([]byte(`{"tokens_per_block":32,"pool_groups":{"0":[100,40]},"layer_groups":[{"kind":"attention","pool_group":0,"layers":[0,1]}],"buffers":[{"layer":0,"role":"key","pool":[0,0],"offset":0,"size":50},{"layer":1,"role":"key","pool":[0,0],"offset":0,"size":50}]}`))
	f.Add([]byte(`{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[]}`))
	f.Add([]byte(`{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[{"kind":"attention","pool_group":0,"layers":[]},{"kind":"state","pool_group":0,"layers":[3]},{"kind":"attention","pool_group":0,"layers":[3,3]}],"buffers":[]}`))
	// What Go cannot represent as the reference does: lone surrogates, bytes
	// that are not UTF-8.
	f.Add([]byte(`{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[{"layer":0,"role":"\ud800","pool":[0,0],"offset":0,"size":8}]}`))
	f.Add([]byte(`{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[{"layer":0,"role":"\\ud800\ud83d\ude00\udc00","pool":[0,0],"offset":0,"size":8}]}`))
	f.Add([]byte("{\"tokens_per_block\":32,\"pool_groups\":{\"0\":[64]},\"layer_groups\":[],\"buffers\":[{\"layer\":0,\"role\":\"\xed\xa0\x80\",\"pool\":[0,0],\"offset\":0,\"size\":8}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayout(data)
		if err != nil {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted input that is not UTF-8: %q", data)
		}
		a, err := l.ID()
		if err != nil {
			t.Fatalf("a parsed layout has no id: %v", err)
		}
		b, _ := l.ID()
		if a != b {
			t.Fatal("layout id is not stable")
		}
		doc, _ := l.Document()
		for _, c := range doc {
			if c >= 0x80 {
				t.Fatalf("canonical JSON is not pure ASCII: %q", doc)
			}
		}
		if want := oracleDocument(l); string(doc) != want {
			t.Fatalf("document\n%s\ndiffers from the reference algorithm's\n%s", doc, want)
		}
		for _, b := range l.Buffers {
			if strings.ContainsRune(b.Role, utf8.RuneError) && !bytes.Contains(data, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`)) {
				t.Fatalf("role %q holds U+FFFD that the input never wrote: a replacement", b.Role)
			}
		}
	})
}
