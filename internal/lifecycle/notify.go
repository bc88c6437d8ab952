package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/notify"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// Notifications are the run's webhook (notify: in the config), set up by
// the CLI: the URL comes from an environment variable and is masked, so it
// is never frozen or journaled. The engine hands events to Sender, which
// never blocks and never fails the run (package notify), and the receipt
// records what became of each.
type Notifications struct {
	Sender     *notify.Notifier // nil: nothing is sent (Error says why)
	WebhookEnv string
	Events     []string
	Error      string
}

// notifyFlush bounds the wait for the last events at the end of a run.
const notifyFlush = 10 * time.Second

// record turns the journal record e just wrote into an event: every
// phase of every workflow passes through Record, so this is the one hook
// (as observeRecord is for the live line). A nil n sends nothing.
func (n *Notifications) record(e *Run, typ, step string, data any) {
	if n == nil || n.Sender == nil || e.state == nil {
		return
	}
	cur := e.state.Current()
	switch {
	case step == stepRent && typ == "intent" && len(e.state.Attempts) == 1:
		text := "renting"
		if cur != nil {
			text = fmt.Sprintf("renting a %s x%d at $%.4f/h (budget $%.2f)", cur.GPUName, cur.NumGPUs, cur.DPHTotal, e.Frozen().MaxSpendUSD)
		}
		n.send(e, notify.Start, 0, "", nil, text)
	case step == stepReady && typ == "done":
		d, _ := data.(runstate.InstanceData)
		text := fmt.Sprintf("instance %d is running", d.Instance)
		if cur != nil {
			text += fmt.Sprintf(" (%s x%d, $%.4f/h)", cur.GPUName, cur.NumGPUs, cur.DPHTotal)
		}
		n.send(e, notify.Ready, d.Instance, "", nil, text)
	case step == stepInterrupted:
		if d, ok := data.(runstate.InterruptedData); ok && d.Reason == "outbid" {
			text := fmt.Sprintf("instance %d was outbid", d.Instance)
			if d.LastCheckpoint != nil {
				text += fmt.Sprintf("; the last committed checkpoint is step %d", d.LastCheckpoint.Step)
			}
			n.send(e, notify.Outbid, d.Instance, "", nil, text)
		}
	case step == "checkpoint":
		if m, ok := data.(map[string]any); ok {
			if s, ok := m["step"].(int64); ok {
				n.send(e, notify.Checkpoint, instanceOf(cur), "", &s, fmt.Sprintf("checkpoint step %d committed", s))
			}
		}
	}
}

// outcome sends done or failed for e's outcome.
func (n *Notifications) outcome(e *Run, outcome receipt.Outcome, runErr error) {
	if n == nil || n.Sender == nil {
		return
	}
	cost := fmt.Sprintf("~$%.4f", e.SpentSoFar())
	if outcome.Succeeded() {
		n.send(e, notify.Done, 0, string(outcome), nil, fmt.Sprintf("%s, %s spent", outcome, cost))
		return
	}
	text := fmt.Sprintf("%s, %s spent", outcome, cost)
	if runErr != nil {
		text += ": " + runErr.Error()
	}
	n.send(e, notify.Failed, 0, string(outcome), nil, text)
}

// send queues one event of e's; its text is what a person reads in Slack.
func (n *Notifications) send(e *Run, name string, inst provider.InstanceID, outcome string, step *int64, text string) {
	if n == nil || n.Sender == nil {
		return
	}
	prefix := fmt.Sprintf("vastrun %s %s: ", e.Workflow, e.state.RunID)
	if e.Simulated {
		prefix = "[simulated] " + prefix
	}
	n.Sender.Send(notify.Event{Name: name, RunID: e.state.RunID, Workflow: e.Workflow, Label: e.state.Label,
		InstanceID: int64(inst), Outcome: outcome, Step: step, At: time.Now().UTC(), Simulated: e.Simulated,
		CIRun: e.CI.RunURL, Text: e.Redactor.String(prefix + text)})
}

// close waits (at most notifyFlush, detached from a cancelled run) for
// the queued events and says in the receipt what became of each, masked
// by red.
func (n *Notifications) close(ctx context.Context, red func(string) string) *receipt.Notify {
	if n == nil {
		return nil
	}
	r := &receipt.Notify{WebhookEnv: n.WebhookEnv, Events: n.Events, Deliveries: []receipt.NotifyDelivery{}, Error: n.Error}
	if r.Events == nil {
		r.Events = []string{}
	}
	if n.Sender == nil {
		return r
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyFlush)
	defer cancel()
	rep := n.Sender.Close(fctx)
	for _, d := range rep.Deliveries {
		r.Deliveries = append(r.Deliveries, receipt.NotifyDelivery{Event: d.Event, At: d.At, Delivered: d.Delivered,
			Attempts: d.Attempts, Status: d.Status, Error: red(d.Error)})
	}
	r.Dropped = rep.Dropped
	return r
}

func instanceOf(a *receipt.Attempt) provider.InstanceID {
	if a == nil {
		return 0
	}
	return a.InstanceID
}
