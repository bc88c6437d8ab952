package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vastrun/vastrun/internal/remote"
)

// Runner runs one command on the instance; *remote.Client is one.
type Runner interface {
	Run(ctx context.Context, cmd remote.Command) error
}

// Streamer opens a long-lived command on the instance (the heartbeat
// channel); *remote.Client is one.
type Streamer interface {
	Stream(ctx context.Context, script string) (*remote.Stream, error)
}

// Client is the controller's end of the protocol: one typed method per
// operation, each one `agent call` on the instance with its request on
// stdin. Any failure — the command, the agent's error answer, an answer
// that does not decode — is an error naming the op and the instance.
type Client struct {
	R   Runner
	Bin string // the agent binary's path on the instance
	// Instance names the instance in errors (e.g. "instance 42").
	Instance string
	// Redact, when set, masks secrets in the stderr quoted in errors.
	Redact func(string) string
}

// CallCommand is the one command line of every call: `BIN agent call`.
func CallCommand(bin string) string { return bin + " agent call" }

// HeartbeatCommand is the heartbeat channel's command line.
func HeartbeatCommand(bin string) string { return bin + " agent heartbeat --serve" }

// Status asks for the workload's state.
func (c *Client) Status(ctx context.Context, r StatusRequest) (Report, error) {
	return call(ctx, c, r, nil, DecodeReport)
}

// Start starts the workload under the agent. env is the workload's
// environment (its secrets and storage credentials).
func (c *Client) Start(ctx context.Context, r StartRequest, env map[string]string) (StartResult, error) {
	return call(ctx, c, r, env, DecodeStart)
}

// Restore restores the newest verified checkpoint; env holds the storage
// credentials.
func (c *Client) Restore(ctx context.Context, r RestoreRequest, env map[string]string) (RestoreResult, error) {
	return call(ctx, c, r, env, DecodeRestore)
}

// Upload uploads the outputs; env holds the storage credentials.
func (c *Client) Upload(ctx context.Context, r UploadRequest, env map[string]string) (UploadResult, error) {
	return call(ctx, c, r, env, DecodeUpload)
}

// Manifest lists the files under the request's paths.
func (c *Client) Manifest(ctx context.Context, r ManifestRequest) (ManifestResult, error) {
	return call(ctx, c, r, nil, DecodeManifest)
}

// Commit has the agent commit what is complete now; env holds the
// storage credentials.
func (c *Client) Commit(ctx context.Context, r CommitRequest, env map[string]string) (CommitResult, error) {
	return call(ctx, c, r, env, DecodeCommit)
}

// RetireLost sets aside a workload killed with its instance.
func (c *Client) RetireLost(ctx context.Context) (RetireResult, error) {
	return call(ctx, c, RetireRequest{}, nil, DecodeRetire)
}

// Arm arms the instance's dead-man switch (or refreshes the armed one).
func (c *Client) Arm(ctx context.Context, r ArmRequest) (ArmResult, error) {
	return call(ctx, c, r, nil, DecodeArm)
}

// OpenHeartbeat opens the heartbeat channel on s.
func (c *Client) OpenHeartbeat(ctx context.Context, s Streamer) (HeartbeatPipe, error) {
	st, err := s.Stream(ctx, HeartbeatCommand(c.Bin))
	if err != nil {
		return nil, fmt.Errorf("agent heartbeat on %s: %w", c.Instance, err) // a nil *Stream is not a nil pipe
	}
	return st, nil
}

// call runs one request and decodes its answer.
func call[A any](ctx context.Context, c *Client, body Body, env map[string]string, decode func([]byte) (A, error)) (A, error) {
	var zero A
	op := body.Op()
	fail := func(err error) (A, error) { return zero, fmt.Errorf("agent %s on %s: %w", op, c.Instance, err) }
	req, err := EncodeRequest(body)
	if err != nil {
		return fail(err)
	}
	var out, errOut bytes.Buffer
	err = c.R.Run(ctx, remote.Command{Script: CallCommand(c.Bin), Env: env, Stdin: req, Stdout: &out, Stderr: &errOut})
	ans := bytes.TrimSpace(out.Bytes())
	if err != nil {
		// A refusal or failure the agent could say is its error answer.
		var ee *remote.ExitError
		if errors.As(err, &ee) && len(ans) > 0 {
			if re, derr := DecodeErrorAnswer(ans); derr == nil {
				re.Message = c.redact(re.Message)
				return fail(fmt.Errorf("%w (%w)", re, err))
			}
		}
		if tail := strings.TrimSpace(lastLines(errOut.String(), 5)); tail != "" {
			return fail(fmt.Errorf("%w: %s", err, c.redact(tail)))
		}
		return fail(err)
	}
	a, err := decode(ans)
	if err != nil {
		return fail(err)
	}
	return a, nil
}

func (c *Client) redact(s string) string {
	if c.Redact == nil {
		return s
	}
	return c.Redact(s)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
