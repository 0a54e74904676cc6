package main

import (
	"testing"

	"github.com/alecthomas/kong"
)

// TestGrammarFor: each command of the whole CLI, named as kong names it,
// gets a grammar holding that one command with the same flags and
// sub-commands; anything else gets the whole CLI.
func TestGrammarFor(t *testing.T) {
	t.Parallel()
	whole, err := kong.New(&CLI{}, cliVars())
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range whole.Model.Children {
		t.Run(cmd.Name, func(t *testing.T) {
			t.Parallel()
			one, err := kong.New(grammarFor([]string{cmd.Name, "--help"}), cliVars())
			if err != nil {
				t.Fatal(err)
			}
			if len(one.Model.Children) != 1 || one.Model.Children[0].Name != cmd.Name {
				t.Fatalf("grammar for %q has commands %v, want just it", cmd.Name, names(one.Model.Children))
			}
			got := one.Model.Children[0]
			if len(got.Flags) != len(cmd.Flags) || len(got.Children) != len(cmd.Children) {
				t.Errorf("grammar for %q: %d flags and %d sub-commands, want %d and %d",
					cmd.Name, len(got.Flags), len(got.Children), len(cmd.Flags), len(cmd.Children))
			}
		})
	}
	for _, args := range [][]string{nil, {"--help"}, {"generat"}, {""}} {
		if _, ok := grammarFor(args).(*CLI); !ok {
			t.Errorf("grammarFor(%q) is not the whole CLI", args)
		}
	}
}

func names(nodes []*kong.Node) []string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.Name)
	}
	return s
}
