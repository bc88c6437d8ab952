package publish

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// valueRE splits "image: VALUE  # comment" into its parts.
var valueRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(image:[ \t]*)("[^"]*"|'[^']*'|[^ \t#]*)(.*)$`) })

// PinConfig rewrites the top-level image: of the YAML file at path to ref,
// changing only that value: comments, order and layout stay as written.
// A file without a top-level image: gets one added at the top.
func PinConfig(path, ref string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("pin image in %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("pin image in %s: %w", path, err)
	}
	line := 0
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "image" {
				k, v := m.Content[i], m.Content[i+1]
				if v.Line != k.Line || v.Kind != yaml.ScalarNode {
					return fmt.Errorf("pin image in %s: image: at line %d is not a one-line value; write it as image: REF", path, k.Line)
				}
				line = k.Line
			}
		}
	}
	lines := strings.SplitAfter(string(b), "\n")
	if line == 0 {
		out := append([]byte("image: "+ref+"\n"), b...)
		return writeSame(path, out)
	}
	l := lines[line-1]
	nl := ""
	if strings.HasSuffix(l, "\n") {
		l, nl = strings.TrimSuffix(l, "\n"), "\n"
	}
	cr := strings.HasSuffix(l, "\r")
	l = strings.TrimSuffix(l, "\r")
	m := valueRE().FindStringSubmatch(l)
	if m == nil {
		return fmt.Errorf("pin image in %s: line %d is not image: VALUE", path, line)
	}
	l = m[1] + ref + m[3]
	if cr {
		l += "\r"
	}
	lines[line-1] = l + nl
	out := []byte(strings.Join(lines, ""))
	// The result must still parse, with the new value.
	var check struct {
		Image string `yaml:"image"`
	}
	if err := yaml.Unmarshal(out, &check); err != nil || check.Image != ref {
		return fmt.Errorf("pin image in %s: the rewritten file does not read back image: %s (%v)", path, ref, err) //nolint:errorlint // err may be nil: the check failed, not the parser
	}
	if bytes.Equal(out, b) {
		return nil
	}
	return writeSame(path, out)
}

// writeSame replaces path atomically, keeping its mode.
func writeSame(path string, b []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp := path + ".vastrun-tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
