package sim_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// stop_at_ssh: the instance runs, and its first SSH connection finds it
// stopped (refused); the API shows it stopped from then on, and the next
// instance created is not affected.
func TestStopAtSSHFault(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ctx := context.Background()
	signer, pub := newKeyPair(t)
	e.client.AddSSHKey(ctx, pub)
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultStopAtSSH}); err != nil {
		t.Fatal(err)
	}
	_, id := rent(t, e, "stop-at-ssh")
	e.clk.Advance(time.Minute)
	inst, err := e.client.ShowInstance(ctx, id)
	if err != nil || !inst.Running() {
		t.Fatalf("before its first SSH connection the instance runs: %+v %v", inst, err)
	}
	if c, err := dialSSH(inst, signer); err == nil {
		c.Close()
		t.Fatal("the first SSH connection was answered")
	}
	after, err := e.client.ShowInstance(ctx, id)
	if err != nil || after.ActualStatus != "stopped" || !after.Paused() || after.Running() {
		t.Fatalf("after the first dial the instance should show stopped: %+v %v", after, err)
	}
	e.clk.Advance(time.Minute)
	if c, err := dialSSH(inst, signer); err == nil {
		c.Close()
		t.Fatal("a stopped instance answered SSH")
	}
	// The fault was for one instance: the next one answers.
	q, _ := vast.ParseQuery("num_gpus=1", vast.QueryOptions{Order: "dph_total"})
	offers, _ := e.client.SearchOffers(ctx, q)
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img:1", DiskGB: 20, Label: "after"})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	next, _ := e.client.ShowInstance(ctx, res.InstanceID)
	c, err := dialSSH(next, signer)
	if err != nil {
		t.Fatalf("the next instance: %v", err)
	}
	c.Close()
	e.client.DestroyInstance(ctx, id)
	e.client.DestroyInstance(ctx, res.InstanceID)
	e.assertNoLeaks(t)
}

// create_late: the create's answer is lost, and the rental appears with
// its label only the given seconds later: before that no show, listing or
// destroy sees it and it bills nothing; after that it boots and bills as
// any rental. It counts as live (able to bill) for leak checks throughout.
func TestCreateLateFault(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultCreateLate}); err == nil {
		t.Fatal("create_late without seconds was accepted")
	}
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultCreateLate, Seconds: 200}); err != nil {
		t.Fatal(err)
	}
	q, _ := vast.ParseQuery("num_gpus=1", vast.QueryOptions{Order: "dph_total"})
	offers, _ := e.client.SearchOffers(ctx, q)
	const label = "late-one"
	_, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: label})
	if !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("a late create answers ambiguously: %v", err)
	}
	live := e.sim.Snapshot().Live
	if len(live) != 1 || live[0].Label != label {
		t.Fatalf("the pending rental counts as live for leak checks: %+v", live)
	}
	id := provider.InstanceID(live[0].ID)
	sent := e.clk.Now()
	for _, at := range []time.Duration{0, 100 * time.Second, 199 * time.Second} {
		e.clk.Advance(sent.Add(at).Sub(e.clk.Now()))
		list, err := e.client.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
		if err != nil || len(list) != 0 {
			t.Fatalf("at +%s: listing %+v %v, want nothing yet", at, list, err)
		}
		if _, err := e.client.ShowInstance(ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("at +%s: show %v, want not found", at, err)
		}
		// Destroy by id finds nothing to destroy (the client takes the 404
		// as done): the rental still lands below.
		code, _ := e.send(t, "DELETE", "/api/v0/instances/"+strconv.FormatInt(int64(id), 10)+"/", "{}")
		if code != 404 {
			t.Fatalf("at +%s: destroy answered %d, want 404", at, code)
		}
	}
	if snap := e.sim.Snapshot(); snap.Spent != 0 {
		t.Fatalf("a create not yet processed billed $%g", snap.Spent)
	}
	// Another rental for the same label meanwhile: the late one is not
	// counted live beside it until it lands.
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[1].ID, Image: "img", DiskGB: 10, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Snapshot().MaxLivePerLabel[label]; n != 1 {
		t.Fatalf("max live for the label before the late create lands: %d", n)
	}
	e.clk.Advance(sent.Add(201 * time.Second).Sub(e.clk.Now())) // landed
	list, err := e.client.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
	if err != nil || len(list) != 2 {
		t.Fatalf("after it lands the label lists both: %+v %v", list, err)
	}
	if n := e.sim.Snapshot().MaxLivePerLabel[label]; n != 2 {
		t.Fatalf("max live for the label after it landed: %d", n)
	}
	e.clk.Advance(time.Minute)
	inst, err := e.client.ShowInstance(ctx, id)
	if err != nil || inst.ActualStatus != "running" {
		t.Fatalf("the late rental boots: %+v %v", inst, err)
	}
	if snap := e.sim.Snapshot(); snap.Spent <= 0 {
		t.Fatal("a landed rental bills")
	}
	for _, x := range []provider.InstanceID{id, res.InstanceID} {
		if err := e.client.DestroyInstance(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	e.assertNoLeaks(t)
}
