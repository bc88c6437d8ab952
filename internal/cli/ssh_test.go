package cli

import "testing"

func TestParseForward(t *testing.T) {
	for in, want := range map[string]Forward{
		"8000:8000":                   {Local: "127.0.0.1:8000", Remote: "127.0.0.1:8000"},
		"6006:localhost:6006":         {Local: "127.0.0.1:6006", Remote: "localhost:6006"},
		"0.0.0.0:9000:127.0.0.1:8888": {Local: "0.0.0.0:9000", Remote: "127.0.0.1:8888"},
		"0:127.0.0.1:22":              {Local: "127.0.0.1:0", Remote: "127.0.0.1:22"},
	} {
		got, err := ParseForward(in)
		if err != nil || got != want {
			t.Errorf("ParseForward(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"8000", "a:b", "8000:0", "1:2:3:4:5", "8000:70000", ":1:h:2"} {
		if _, err := ParseForward(bad); err == nil {
			t.Errorf("ParseForward(%q) accepted", bad)
		}
	}
}
