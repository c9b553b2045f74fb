package rbloomtest

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2/server"
)

// TestInScriptUnknownContext checks that inScript fails loudly, rather than
// guessing, on a connection context without the field it reads: that is
// what a miniredis upgrade renaming the field would look like.
func TestInScriptUnknownContext(t *testing.T) {
	for name, ctx := range map[string]any{
		"struct without nested": &struct{ selectedDB int }{},
		"nested not a bool":     &struct{ nested int }{},
		"not a struct":          new(int),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, `no bool field "nested"`) {
					t.Errorf("inScript panicked with %q, want a message about the field \"nested\"", msg)
				}
			}()
			p := server.NewPeer(nil)
			p.Ctx = ctx
			inScript(p)
		})
	}
}

// TestInScriptKnownContext checks the contexts inScript must understand.
func TestInScriptKnownContext(t *testing.T) {
	p := server.NewPeer(nil)
	if inScript(p) {
		t.Errorf("inScript(nil Ctx) = true, want false")
	}
	p.Ctx = &struct{ nested bool }{nested: true}
	if !inScript(p) {
		t.Errorf("inScript(nested: true) = false, want true")
	}
}
