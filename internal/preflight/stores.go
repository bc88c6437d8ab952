package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/storage"
)

// The stores a run writes to are checked before renting, because a store
// that refuses the run is otherwise found only after money was spent (the
// checkpoint store at the first restore or commit, evidence.uri at the
// end). Each is probed the way the run will use it: an object written,
// read back and deleted under the store's prefix, with the credentials of
// whoever writes there: the agent on the instance for the checkpoint and
// output stores (only the storage variables vastrun hands it), vastrun
// itself for evidence.uri.

// probeLimit bounds one store's probe (wall clock: it is I/O to a store).
const probeLimit = 30 * time.Second

// probeRetries bounds each request's retries: a store that does not answer
// is reported in seconds, not after the client's full backoff.
const probeRetries = 2

// storeUse is one store a run writes to, and whose credentials write it.
type storeUse struct {
	field, uri string
	agent      bool // written by the agent on the instance, with AgentEnv
}

// storesOf lists the stores the workflow writes to, without those whose
// URI names an unset variable (checkVars reports those) and without
// repeats (output_uri defaults to checkpoint_uri).
func storesOf(in Input) []storeUse {
	c := in.Config
	unset := map[string]bool{}
	for _, u := range c.Unset {
		unset[u.Field] = true
	}
	var out []storeUse
	add := func(field, uri string, agent bool) {
		if uri == "" || unset[field] {
			return
		}
		for _, s := range out {
			if s.uri == uri && s.agent == agent {
				return
			}
		}
		out = append(out, storeUse{field, uri, agent})
	}
	if trainStores(in) {
		add("train.checkpoint_uri", c.Train.CheckpointURI, true)
		add("train.output_uri", c.Train.OutputURI, true)
	}
	add("evidence.uri", c.Evidence.URI, false)
	return out
}

// trainStores reports whether the run writes the training stores.
func trainStores(in Input) bool {
	return in.Config.IsTrain() && (in.Workflow == "" || in.Workflow == "train")
}

// checkVars refuses every ${NAME} of a store URI the run uses that
// vastrun's environment does not set, once per name.
func checkVars(in Input) []Problem {
	var ps []Problem
	seen := map[string]bool{}
	for _, u := range in.Config.Unset {
		if seen[u.Name] || (strings.HasPrefix(u.Field, "train.") && !trainStores(in)) {
			continue
		}
		seen[u.Name] = true
		ps = append(ps, Problem{Field: u.Field, Value: "${" + u.Name + "}",
			What: "is not set in vastrun's environment (an unset variable is never expanded to an empty string)",
			Fix:  fmt.Sprintf("export %s, or give it a default in the config: ${%s:-VALUE} (docs/config.md#variables)", u.Name, u.Name)})
	}
	return ps
}

// Stores probes every store the run writes to (see above). Problems are
// returned as *Error; nothing is left in a store that passes.
func Stores(ctx context.Context, in Input) error {
	var ps []Problem
	for _, s := range storesOf(in) {
		if p := probeStore(ctx, in, s); p != nil {
			ps = append(ps, *p)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(ps) > 0 {
		return &Error{Problems: ps}
	}
	return nil
}

// agentCredentials are what the agent's S3 client needs from its environment.
const agentCredentials = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"

func probeStore(ctx context.Context, in Input, s storeUse) *Problem {
	p := &Problem{Field: s.field, Value: s.uri}
	isS3 := strings.HasPrefix(s.uri, "s3://")
	who := "vastrun's credentials"
	opts := storage.Options{Getenv: in.Getenv, MaxRetries: probeRetries}
	if s.agent {
		who = "the agent's credentials"
		env := in.AgentEnv
		opts = storage.Options{Getenv: func(k string) string { return env[k] }, MaxRetries: probeRetries,
			AccessKey: env["AWS_ACCESS_KEY_ID"], SecretKey: env["AWS_SECRET_ACCESS_KEY"], SessionToken: env["AWS_SESSION_TOKEN"]}
		if isS3 && (opts.AccessKey == "" || opts.SecretKey == "") {
			p.What = "the agent on the instance would get no S3 credentials: " + agentCredentials + " are not both set " +
				"(only the AWS_* variables reach the instance, not ~/.aws files or profiles)"
			p.Fix = "export " + agentCredentials + " for a key that may write, read and delete under " + s.uri + " (in CI: masked secrets)"
			return p
		}
	}
	st, err := storage.Open(s.uri, opts)
	if err != nil {
		p.What = "cannot be opened: " + err.Error()
		if isS3 {
			p.Fix = "write it as s3://BUCKET/PREFIX; S3 settings come from AWS_ENDPOINT_URL, AWS_REGION and AWS_S3_FORCE_PATH_STYLE"
		} else {
			p.Fix = "point it at a directory vastrun may create and write: file:///absolute/path"
		}
		return p
	}
	pctx, cancel := context.WithTimeout(ctx, probeLimit)
	defer cancel()
	err = storage.Probe(pctx, st)
	if err == nil {
		return nil
	}
	endpoint, bucket := "", ""
	if s3, ok := st.(*storage.S3Store); ok {
		endpoint, bucket = s3.Endpoint(), s3.Bucket()
	}
	credVars := "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)"
	if !s.agent {
		credVars += " or the profile in ~/.aws/credentials"
	}
	switch {
	case errors.Is(err, storage.ErrNoBucket):
		p.What = fmt.Sprintf("bucket %q does not exist at %s", bucket, endpoint)
		p.Fix = fmt.Sprintf("create it (aws s3 mb s3://%s), or fix the bucket's name", bucket)
	case errors.Is(err, storage.ErrDenied):
		p.What = fmt.Sprintf("%s may not use it: %v", who, err)
		p.Fix = fmt.Sprintf("allow s3:PutObject, s3:GetObject, s3:DeleteObject and s3:ListBucket on %s/* to the key in %s, or use a key that has them", strings.TrimPrefix(s.uri, "s3://"), credVars)
	case errors.Is(err, storage.ErrBadCredentials):
		p.What = fmt.Sprintf("the store refuses %s (unknown key, wrong secret or expired token): %v", who, err)
		p.Fix = "check " + credVars
	case errors.Is(err, storage.ErrUnreachable):
		p.What = fmt.Sprintf("no S3 server answered at %s: %v", endpoint, err)
		p.Fix = "check the network and AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3; unset means AWS)"
		if !isS3 {
			p.What = "did not answer in time: " + err.Error()
			p.Fix = "check the mount behind it, or point it at another directory"
		}
	case errors.Is(err, storage.ErrNotWritable):
		p.What = "cannot be written: " + err.Error()
		p.Fix = "point it at a directory vastrun may create and write, or fix its permissions"
	default:
		p.What = "failed the probe: " + err.Error()
		p.Fix = fmt.Sprintf("check the store and %s: before renting vastrun writes, reads back and deletes one object named %s… at %s", who, storage.ProbePrefix, s.uri)
	}
	return p
}
