package staging

import (
	"bytes"
	"os"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayout(data)
		if err != nil {
			return
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
	})
}
