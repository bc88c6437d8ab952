package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/rogpeppe/go-internal/testscript"
)

// schemaDir holds one JSON Schema per --json document (docs/json.md).
const schemaDir = "../../docs/schemas"

var (
	schemasMu sync.Mutex
	schemas   = map[string]*jsonschema.Resolved{}
)

// schemaFile is the file that documents schema ("vastrun.offers/v1" is
// docs/schemas/vastrun.offers.v1.json).
func schemaFile(schema string) string {
	return filepath.Join(schemaDir, strings.ReplaceAll(schema, "/", ".")+".json")
}

// loadSchema reads and resolves the documented schema named schema.
func loadSchema(schema string) (*jsonschema.Resolved, error) {
	schemasMu.Lock()
	defer schemasMu.Unlock()
	if rs, ok := schemas[schema]; ok {
		return rs, nil
	}
	b, err := os.ReadFile(schemaFile(schema))
	if err != nil {
		return nil, fmt.Errorf("%s is not documented: %w", schema, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", schemaFile(schema), err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schemaFile(schema), err)
	}
	schemas[schema] = rs
	return rs, nil
}

// checkDocument validates one JSON document against the schema its own
// "schema" field names; want, when set, is the schema it must name.
func checkDocument(b []byte, want string) (string, error) {
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("not one JSON document: %w", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return "", fmt.Errorf("not a JSON object")
	}
	name, _ := m["schema"].(string)
	if want != "" && name != want {
		return name, fmt.Errorf("schema %q, want %q", name, want)
	}
	rs, err := loadSchema(name)
	if err != nil {
		return name, err
	}
	if err := rs.Validate(doc); err != nil {
		return name, fmt.Errorf("%s does not match %s: %w", name, schemaFile(name), err)
	}
	return name, nil
}

// cmdJSONSchema checks a command's --json output against its documented
// schema (docs/schemas, docs/json.md):
//
//	jsonschema FILE [SCHEMA]   FILE ("stdout" for the last command's) holds
//	                           one document, valid under the schema its own
//	                           "schema" field names (and that is SCHEMA)
func cmdJSONSchema(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: jsonschema FILE [SCHEMA]")
	}
	var b []byte
	if args[0] == "stdout" {
		b = []byte(ts.ReadFile("stdout"))
	} else {
		b = []byte(ts.ReadFile(args[0]))
	}
	want := ""
	if len(args) == 2 {
		want = args[1]
	}
	name, err := checkDocument(b, want)
	switch {
	case err != nil && !neg:
		ts.Fatalf("%v", err)
	case err == nil && neg:
		ts.Fatalf("%s is valid under its schema, and should not be", name)
	}
}
