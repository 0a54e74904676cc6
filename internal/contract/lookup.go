package contract

import "strings"

// Lookup is how kbgen's packages read an environment: os.LookupEnv's shape,
// so a process passes os.LookupEnv, the CLI its own Globals, and a test a
// map, and none of them reads the process environment behind the caller's
// back.
type Lookup func(name string) (value string, ok bool)

// MapLookup looks names up in m.
func MapLookup(m map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// EnvironLookup looks names up in an os.Environ-form list; the last entry
// for a name wins, as it does for a process started with that list.
func EnvironLookup(environ []string) Lookup {
	return func(name string) (string, bool) {
		for i := len(environ) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(environ[i], "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
}
