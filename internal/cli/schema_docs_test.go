package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// jsonBlock is a ```json fenced block of a Markdown page.
var jsonBlock = regexp.MustCompile("(?s)```json\n(.*?)\n```")

// TestDocumentedSchemasAndExamples holds docs/json.md to docs/schemas:
// every schema file resolves, is named on the page and has an example
// there (or, the receipt, in receipt.md) that it validates, and every
// example that names a schema is valid under it. The commands' own output
// is checked against the same files by json_everywhere.txtar.
func TestDocumentedSchemasAndExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s: %v", schemaDir, err)
	}
	page, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	receiptPage, err := os.ReadFile("../../docs/receipt.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string]int{}
	for _, m := range append(jsonBlock.FindAllSubmatch(page, -1), jsonBlock.FindAllSubmatch(receiptPage, -1)...) {
		var head struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal(m[1], &head); err != nil {
			t.Errorf("an example is not JSON: %v\n%s", err, m[1])
			continue
		}
		if head.Schema == "" {
			continue
		}
		if _, err := checkDocument(m[1], ""); err != nil {
			t.Errorf("the docs' example of %s: %v", head.Schema, err)
		}
		examples[head.Schema]++
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		i := strings.LastIndex(base, ".v")
		name := base[:i] + "/" + base[i+1:] // vastrun.offers.v1 → vastrun.offers/v1
		if _, err := loadSchema(name); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("docs/json.md does not name %s", name)
		}
		if !strings.Contains(string(page), "schemas/"+base+".json") && name != "vastrun.receipt/v1" {
			t.Errorf("docs/json.md does not link %s", f)
		}
		if examples[name] == 0 {
			t.Errorf("no example of %s in docs/json.md or docs/receipt.md", name)
		}
	}
}

// The schemas are strict: a field they do not name, a list that is null
// or a missing required field fails, so an undocumented change to a
// document fails json_everywhere.txtar.
func TestSchemasRefuseUndocumentedShapes(t *testing.T) {
	for _, bad := range []string{
		`{"schema":"vastrun.down/v1","destroyed_confirmed":[],"simulated":true}`,                                 // not_found missing
		`{"schema":"vastrun.down/v1","destroyed_confirmed":[],"not_found":null,"simulated":true}`,                // a null list
		`{"schema":"vastrun.down/v1","destroyed_confirmed":[],"not_found":[],"simulated":true,"extra":1}`,        // an undocumented field
		`{"schema":"vastrun.explain/v2","simulated":true,"decisions":[{"offer_id":1,"machine_id":2,"gpu":"x"}]}`, // v1's row
		`{"schema":"vastrun.nope/v1"}`, // no such schema
	} {
		if _, err := checkDocument([]byte(bad), ""); err == nil {
			t.Errorf("%s passed its schema", bad)
		}
	}
	if _, err := checkDocument([]byte(`{"schema":"vastrun.down/v1","destroyed_confirmed":[],"not_found":[],"simulated":true}`), "vastrun.down/v1"); err != nil {
		t.Errorf("a valid down/v1: %v", err)
	}
}
