// Package label makes and checks the labels vastrun puts on every rental:
//
//	<prefix>-<run>-<expiry>-<check>     e.g. vastrun-mj4c1x0q7z3a-t5w2kq-3fa81c09
//
// run is the run id, expiry the Unix time (base 36) after which the rental
// may be reaped, and check the first 8 hex digits of SHA-256 over everything
// before it. A janitor can therefore find and judge a rental from the
// marketplace alone, with no state, and a label typed by hand or belonging
// to another tool never passes the check.
package label

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// DefaultPrefix starts every label vastrun makes unless told otherwise.
const DefaultPrefix = "vastrun"

// MaxLen keeps labels within what every Vast client is known to accept.
const MaxLen = 60

// MaxPrefixLen is the longest prefix whose labels stay within MaxLen for
// as long as run ids and expiries keep their lengths: a run id is the Unix
// milliseconds in base 36 (8 digits until 2059, then 9) and 4 random
// digits, an expiry the Unix seconds in base 36 (6 digits until 2038, then
// 7), the check 8 hex digits, and three dashes join them: 60-13-7-8-3 = 29.
const MaxPrefixLen = MaxLen - 13 - 7 - 8 - 3

// ErrBadPrefix means a label prefix cannot start a vastrun label.
var ErrBadPrefix = errors.New("not a valid label prefix")

// CheckPrefix says whether prefix can start every label vastrun makes:
// lowercase ASCII letters, digits and inner dashes (what Parse reads back
// and what a label filter on Vast matches exactly), at most MaxPrefixLen
// characters. The error wraps ErrBadPrefix.
func CheckPrefix(prefix string) error {
	switch {
	case !validToken(prefix, true):
		return fmt.Errorf("label prefix %q: use lowercase ASCII letters (a-z), digits and inner dashes: %w", prefix, ErrBadPrefix)
	case len(prefix) > MaxPrefixLen:
		return fmt.Errorf("label prefix %q is %d characters; at most %d keep a label within %d: %w", prefix, len(prefix), MaxPrefixLen, MaxLen, ErrBadPrefix)
	}
	return nil
}

// ErrNotOurs means the text is not a vastrun label (or fails its check).
var ErrNotOurs = errors.New("not a vastrun label")

// Label is a parsed label.
type Label struct {
	Prefix string
	RunID  string
	Expiry time.Time
}

func (l Label) String() string {
	body := fmt.Sprintf("%s-%s-%s", l.Prefix, l.RunID, strconv.FormatInt(l.Expiry.Unix(), 36))
	return body + "-" + check(body)
}

// Expired reports whether the label's expiry has passed at now.
func (l Label) Expired(now time.Time) bool { return !now.Before(l.Expiry) }

func check(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:4])
}

func validToken(s string, allowDash bool) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || allowDash && c == '-') {
			return false
		}
	}
	return !strings.HasPrefix(s, "-") && !strings.HasSuffix(s, "-")
}

// New makes a label, validating its parts.
func New(prefix, runID string, expiry time.Time) (Label, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := CheckPrefix(prefix); err != nil {
		return Label{}, err
	}
	if !validToken(runID, false) {
		return Label{}, fmt.Errorf("run id %q: use lowercase letters and digits", runID)
	}
	l := Label{Prefix: prefix, RunID: runID, Expiry: time.Unix(expiry.Unix(), 0).UTC()}
	if n := len(l.String()); n > MaxLen {
		return Label{}, fmt.Errorf("label for run %q would be %d characters; the limit is %d: shorten the prefix or run id", runID, n, MaxLen)
	}
	return l, nil
}

// Parse checks text and returns its parts, or an error wrapping ErrNotOurs.
func Parse(text string) (Label, error) {
	parts := strings.Split(text, "-")
	if len(parts) < 4 {
		return Label{}, fmt.Errorf("%q: %w", text, ErrNotOurs)
	}
	n := len(parts)
	sum, exp, run := parts[n-1], parts[n-2], parts[n-3]
	prefix := strings.Join(parts[:n-3], "-")
	body := strings.TrimSuffix(text, "-"+sum)
	if len(sum) != 8 || check(body) != sum || !validToken(run, false) || !validToken(prefix, true) {
		return Label{}, fmt.Errorf("%q: %w", text, ErrNotOurs)
	}
	secs, err := strconv.ParseInt(exp, 36, 64)
	if err != nil {
		return Label{}, fmt.Errorf("%q: bad expiry: %w", text, ErrNotOurs)
	}
	return Label{Prefix: prefix, RunID: run, Expiry: time.Unix(secs, 0).UTC()}, nil
}

// NewRunID returns a short, time-sortable, random run id.
func NewRunID(now time.Time) string {
	n, err := rand.Int(rand.Reader, big.NewInt(36*36*36*36))
	if err != nil {
		panic(err)
	}
	suffix := strconv.FormatInt(n.Int64(), 36)
	return strconv.FormatInt(now.UnixMilli(), 36) + strings.Repeat("0", 4-len(suffix)) + suffix
}
