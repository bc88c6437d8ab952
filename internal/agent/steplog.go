package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// stepHit is one step line of the workload's log: the step, and the
// offset in the log where its line starts.
type stepHit struct {
	step, off int64
}

// stepLog reads train.step_from's steps from the workload's log as it
// grows, complete lines only, each line once.
type stepLog struct {
	field string         // json:FIELD
	re    *regexp.Regexp // regex:RE
	path  string
	off   int64     // read up to here
	hits  []stepHit // in log order; those before the last a save took are dropped
}

// maxScan bounds what one pass reads of the log: a workload that writes
// faster is read over several passes.
const maxScan = 8 << 20

// maxHits bounds the step lines kept between two saves.
const maxHits = 100000

func newStepLog(stepFrom, path string) *stepLog {
	l := &stepLog{path: path}
	if f, ok := strings.CutPrefix(stepFrom, "json:"); ok {
		l.field = f
	} else {
		l.re, _ = regexp.Compile(strings.TrimPrefix(stepFrom, "regex:")) // checked by config.CheckStepFrom
	}
	return l
}

// scan reads the log's new complete lines and returns their steps.
func (l *stepLog) scan() []stepHit {
	if l == nil || (l.re == nil && l.field == "") {
		return nil
	}
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close() //nolint:errcheck // read-only file
	fi, err := f.Stat()
	if err != nil || fi.Size() <= l.off {
		return nil
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, l.off, min(fi.Size()-l.off, maxScan)))
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		if len(b) < maxScan {
			return nil // the line is not finished
		}
		end = len(b) - 1 // one line longer than a pass: read as it is
	}
	b = b[:end+1]
	var found []stepHit
	for start := 0; start < len(b); {
		nl := bytes.IndexByte(b[start:], '\n')
		line := b[start : start+nl]
		if n, ok := l.stepIn(line); ok {
			found = append(found, stepHit{step: n, off: l.off + int64(start)})
		}
		start += nl + 1
	}
	l.off += int64(len(b))
	l.hits = append(l.hits, found...)
	if len(l.hits) > maxHits { // no save for a long time: the oldest lines label none
		l.hits = append(l.hits[:0], l.hits[len(l.hits)-maxHits/2:]...)
	}
	return found
}

// stepIn is the step one line reports: a JSON object's numeric FIELD, or
// the last match of RE's first group.
func (l *stepLog) stepIn(line []byte) (int64, bool) {
	if l.field != "" {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			return 0, false
		}
		var obj map[string]any
		if json.Unmarshal(line, &obj) != nil {
			return 0, false
		}
		v, ok := obj[l.field].(float64)
		if !ok || v != float64(int64(v)) {
			return 0, false
		}
		return int64(v), true
	}
	all := l.re.FindAllSubmatch(line, -1)
	if len(all) == 0 || len(all[len(all)-1]) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(all[len(all)-1][1]), 10, 64)
	return n, err == nil
}

// newestIn is the newest hit after offset after and before offset before.
func (l *stepLog) newestIn(after, before int64) (stepHit, bool) {
	for i := len(l.hits) - 1; i >= 0; i-- {
		h := l.hits[i]
		if h.off <= after {
			break
		}
		if h.off < before {
			return h, true
		}
	}
	return stepHit{}, false
}

// firstFrom is the first hit at or after offset from.
func (l *stepLog) firstFrom(from int64) (stepHit, bool) {
	for _, h := range l.hits {
		if h.off >= from {
			return h, true
		}
	}
	return stepHit{}, false
}

// drop forgets the hits at or before offset upTo (taken, or passed over
// by the saves that took later ones).
func (l *stepLog) drop(upTo int64) {
	if l == nil {
		return
	}
	i := 0
	for i < len(l.hits) && l.hits[i].off <= upTo {
		i++
	}
	l.hits = append(l.hits[:0], l.hits[i:]...)
}
