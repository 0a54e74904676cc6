package main

import (
	"reflect"
	"strings"
)

// grammarFor is what kong builds its parser from for args: a struct holding
// only the CLI field of the command args[0] names, or the whole CLI when
// args name none (bare kbgen, --help, a typo: the full list teaches).
//
// Why: kong.New walks every command's flags and interpolates every help
// text, which was about a quarter of `kbgen generate`'s whole-process time
// (the bootstrap step runs it on every build; goal 15 ms). A command's own
// parse, help and errors only read its own node, so they do not change.
func grammarFor(args []string) any {
	if len(args) == 0 {
		return &CLI{}
	}
	t := reflect.TypeFor[CLI]()
	for i := range t.NumField() {
		if f := t.Field(i); commandName(f) == args[0] {
			return reflect.New(reflect.StructOf([]reflect.StructField{f})).Interface()
		}
	}
	return &CLI{}
}

// commandName is the name kong gives a command field: its name tag, else
// the field name in lower case (every CLI field is one word).
func commandName(f reflect.StructField) string {
	if n := f.Tag.Get("name"); n != "" {
		return n
	}
	return strings.ToLower(f.Name)
}
