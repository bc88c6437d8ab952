package config

import (
	"fmt"
	"os"
	"strings"
)

// Variables in store URIs (docs/config.md#variables).
//
// train.checkpoint_uri, train.output_uri and evidence.uri may name
// variables of vastrun's environment, so that a config needs no machine
// paths or bucket names:
//
//	${NAME}            NAME's value; NAME must be set and not empty
//	${NAME:-default}   NAME's value, or default when NAME is unset or empty
//	${PWD}             vastrun's working directory
//	$$                 a literal $
//
// Any other $ is a config error. An unset ${NAME} never becomes an empty
// string: ExpandVars keeps its name in Config.Unset and the preflight
// refuses it by name, before anything is rented.

// UnsetVar is a ${NAME} of a store URI that vastrun's environment does not
// set, and a field that names it.
type UnsetVar struct {
	Field string // e.g. train.checkpoint_uri
	Name  string
}

// varFields are the fields whose ${NAME}s come from vastrun's environment,
// by their config path.
func (c *Config) varFields() []struct {
	path string
	val  *string
} {
	return []struct {
		path string
		val  *string
	}{
		{"train.checkpoint_uri", &c.Train.CheckpointURI},
		{"train.output_uri", &c.Train.OutputURI},
		{"evidence.uri", &c.Evidence.URI},
	}
}

// ExpandVars replaces the ${NAME}s of the store URIs with their values from
// getenv, in place; a NAME that is unset (or empty) without a default is
// left out of the value and listed in c.Unset with each field naming it
// (the preflight reports each name once). It runs once
// per config: a second call does nothing, so every caller may make sure.
func (c *Config) ExpandVars(getenv func(string) string) {
	if c.varsExpanded {
		return
	}
	c.varsExpanded = true
	lookup := func(name string) (string, bool) {
		if name == "PWD" {
			if wd, err := os.Getwd(); err == nil {
				return wd, true
			}
		}
		v := getenv(name)
		return v, v != ""
	}
	for _, f := range c.varFields() {
		// Syntax was checked by Parse; a config built otherwise keeps a
		// value it cannot expand as it is.
		out, unset, err := expandVars(*f.val, lookup)
		if err != nil {
			continue
		}
		*f.val = out
		for _, n := range unset {
			c.Unset = append(c.Unset, UnsetVar{Field: f.path, Name: n})
		}
	}
}

// checkVarSyntax names each store URI whose $ is not one of the forms above.
func (c *Config) checkVarSyntax() []string {
	var errs []string
	for _, f := range c.varFields() {
		if _, _, err := expandVars(*f.val, func(string) (string, bool) { return "", true }); err != nil {
			errs = append(errs, fmt.Sprintf("%s %q: %v", f.path, *f.val, err))
		}
	}
	return errs
}

// expandVars expands s with lookup; unset lists the names lookup did not
// know and that had no default.
func expandVars(s string, lookup func(string) (string, bool)) (out string, unset []string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "$"):
			b.WriteByte('$')
			i++
			continue
		case !strings.HasPrefix(rest, "{"):
			return "", nil, fmt.Errorf("a $ must start ${NAME} or ${NAME:-default} (write $$ for a literal $)")
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", nil, fmt.Errorf("${ without a closing }")
		}
		body := rest[1:end]
		name, def, hasDef := strings.Cut(body, ":-")
		if !envName().MatchString(name) {
			return "", nil, fmt.Errorf("${%s}: %q is not a variable name (letters, digits, _; ${NAME:-default} for a default)", body, name)
		}
		switch v, ok := lookup(name); {
		case ok:
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			unset = append(unset, name)
		}
		i += end + 1
	}
	return b.String(), unset, nil
}
