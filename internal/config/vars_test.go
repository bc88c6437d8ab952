package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestExpandVars(t *testing.T) {
	wd, _ := os.Getwd()
	env := map[string]string{"BUCKET": "team-ckpt", "EMPTY": "", "ROOT": "/data"}
	getenv := func(k string) string { return env[k] }
	cases := []struct {
		name, ckpt, evidence string
		wantCkpt, wantEv     string
		wantUnset            []UnsetVar
	}{
		{name: "set", ckpt: "s3://${BUCKET}/runs", wantCkpt: "s3://team-ckpt/runs"},
		{name: "unset is refused by name, never empty", ckpt: "file://${CKPT_ROOT}/ckpt", wantCkpt: "file:///ckpt",
			wantUnset: []UnsetVar{{"train.checkpoint_uri", "CKPT_ROOT"}}},
		{name: "empty counts as unset", ckpt: "file://${EMPTY}/ckpt", wantCkpt: "file:///ckpt",
			wantUnset: []UnsetVar{{"train.checkpoint_uri", "EMPTY"}}},
		{name: "default when unset", ckpt: "file://${CKPT_ROOT:-/tmp/ck}/x", wantCkpt: "file:///tmp/ck/x"},
		{name: "default when empty", ckpt: "file://${EMPTY:-/e}/x", wantCkpt: "file:///e/x"},
		{name: "value wins over default", ckpt: "file://${ROOT:-/other}/x", wantCkpt: "file:///data/x"},
		{name: "PWD is the working directory", ckpt: "file://${PWD}/ck", wantCkpt: "file://" + wd + "/ck"},
		{name: "$$ is a dollar", ckpt: "s3://b/a$$b", wantCkpt: "s3://b/a$b"},
		{name: "every field that names it", ckpt: "s3://${NOPE}/a", evidence: "s3://${NOPE}/ev", wantCkpt: "s3:///a", wantEv: "s3:///ev",
			wantUnset: []UnsetVar{{"train.checkpoint_uri", "NOPE"}, {"evidence.uri", "NOPE"}}},
		{name: "evidence alone", evidence: "file://${EVROOT}/ev", wantEv: "file:///ev",
			wantUnset: []UnsetVar{{"evidence.uri", "EVROOT"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := &Config{Train: Train{CheckpointURI: c.ckpt}, Evidence: Evidence{URI: c.evidence}}
			cfg.ExpandVars(getenv)
			cfg.ExpandVars(func(string) string { return "/second" }) // once per config
			if cfg.Train.CheckpointURI != c.wantCkpt || cfg.Evidence.URI != c.wantEv {
				t.Errorf("checkpoint %q evidence %q, want %q %q", cfg.Train.CheckpointURI, cfg.Evidence.URI, c.wantCkpt, c.wantEv)
			}
			if !reflect.DeepEqual(cfg.Unset, c.wantUnset) {
				t.Errorf("unset %+v, want %+v", cfg.Unset, c.wantUnset)
			}
		})
	}
}

func TestVarSyntaxIsAConfigError(t *testing.T) {
	base := good + "evidence:\n  uri: "
	for uri, want := range map[string]string{
		"file:///ev/$HOME":      "a $ must start ${NAME}",
		"file:///ev/${HOME":     "${ without a closing }",
		"file:///ev/${1X}":      `"1X" is not a variable name`,
		"file:///ev/${A-b}":     `"A-b" is not a variable name`,
		"file:///ev/${HOME:-x}": "",
		"file:///ev/$${HOME}":   "",
	} {
		_, err := Parse([]byte(base + uri + "\n"))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", uri, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "evidence.uri") || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: err = %v, want evidence.uri and %q", uri, err, want)
		}
	}
}
