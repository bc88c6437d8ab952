package run_test

import "fmt"

var fmtSprintf = fmt.Sprintf
