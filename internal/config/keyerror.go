package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/text"
)

// KeyError is a key the configuration does not have, with the keys
// allowed where it stands and those it was most likely meant to be.
type KeyError struct {
	Line       int
	Key        string
	Path       string   // the section it stands in ("" at the top level)
	Allowed    []string // sorted
	DidYouMean []string // best first; empty when nothing is near
}

func (e *KeyError) Error() string {
	where := "at the top level"
	if e.Path != "" {
		where = "in " + e.Path
	}
	s := fmt.Sprintf("line %d: unknown key %q %s", e.Line, e.Key, where)
	if len(e.DidYouMean) > 0 {
		s += fmt.Sprintf(": did you mean %s?", text.OneOf(e.DidYouMean))
	}
	return s + fmt.Sprintf(" (allowed: %s)", strings.Join(e.Allowed, ", "))
}

func newKeyError(line int, key, path string, allowed []string) *KeyError {
	return &KeyError{Line: line, Key: key, Path: path, Allowed: allowed, DidYouMean: text.Suggest(key, allowed, 2)}
}

// TypeError is a value of the wrong kind for its key ("count: one").
type TypeError struct {
	Line  int
	Key   string // dotted path, e.g. gpu.count ("" when it could not be found)
	Value string // as written, or its kind ("a mapping")
	Want  string // in words: "a whole number", "a list", …
}

func (e *TypeError) Error() string {
	key := e.Key
	if key == "" {
		key = "a value"
	}
	if strings.HasPrefix(e.Value, "a ") {
		return fmt.Sprintf("line %d: %s is %s, but it must be %s", e.Line, key, e.Value, e.Want)
	}
	return fmt.Sprintf("line %d: %s is %q, but it must be %s", e.Line, key, e.Value, e.Want)
}

// yamlTypeMsg is one line of a yaml.TypeError, as yaml.v3 writes it.
var yamlTypeMsg = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
})

// typeErrors turns yaml.v3's decoder messages into TypeErrors naming the
// key at each line; an error of another kind comes back unchanged.
func typeErrors(err error, root *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var out []error
	for _, msg := range te.Errors {
		m := yamlTypeMsg().FindStringSubmatch(msg)
		if m == nil {
			out = append(out, errors.New(msg))
			continue
		}
		line, _ := strconv.Atoi(m[1])
		value := m[3]
		if value == "" {
			value = yamlKindWords[m[2]]
		}
		out = append(out, &TypeError{Line: line, Key: keyAtLine(root, line, m[2], ""), Value: value, Want: kindWords(m[4])})
	}
	return errors.Join(out...)
}

// keyAtLine is the dotted path of the key whose value is on line and of
// the YAML kind the decoder refused ("str", "map", "seq", …).
func keyAtLine(n *yaml.Node, line int, kind, path string) string {
	matches := func(v *yaml.Node) bool {
		if v.Line != line {
			return false
		}
		switch v.Kind {
		case yaml.MappingNode:
			return kind == "map"
		case yaml.SequenceNode:
			return kind == "seq"
		}
		return kind != "map" && kind != "seq"
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if k := keyAtLine(c, line, kind, path); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			if found := keyAtLine(v, line, kind, p); found != "" {
				return found
			}
			if matches(v) {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if found := keyAtLine(c, line, kind, p); found != "" {
				return found
			}
			if matches(c) {
				return p
			}
		}
	}
	return ""
}

// yamlKindWords name the YAML kinds that yaml.v3 does not quote.
var yamlKindWords = map[string]string{"map": "a mapping", "seq": "a list"}

// kindWords says a Go type as yaml.v3 names it in words.
func kindWords(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list, e.g. [a, b]"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "config."):
		return "a mapping of keys to values"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "text"
	}
	return "a " + goType
}
