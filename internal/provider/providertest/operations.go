package providertest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// Cloud gives the suite the far side of a cloud integration: the
// simulator's bucket directory, or nothing against the live API.
type Cloud interface {
	Put(integration int64, name, content string) error
	Get(integration int64, name string) (string, error)
}

// operationCases pin the routes beyond the lifecycle core. They need
// Harness.Ops (and Cloud for the copy family).
var operationCases = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"BulkStopStartDestroy", testBulk},
	{"RebootAndExecute", testRebootExecute},
	{"ChangeBidChangesBilling", testChangeBid},
	{"DepositFiltersNamesInvoices", testReads},
	{"CopyFamily", testCopy},
	{"CreateStoppedBillsStorageOnly", testCreateStopped},
	{"TemplatesResolveToAnImage", testTemplates},
}

func needOps(t *testing.T, h Harness) provider.Operations {
	t.Helper()
	if h.Ops == nil {
		t.Skip("the implementation offers no provider.Operations")
	}
	return h.Ops
}

func waitRunning(t *testing.T, h Harness, id provider.InstanceID) provider.Instance {
	t.Helper()
	return waitFor(t, h, id, "running", func(i provider.Instance, err error) bool { return err == nil && i.Running() })
}

func testBulk(t *testing.T, h Harness) {
	ops := needOps(t, h)
	if h.Live {
		t.Skip("would rent two live instances")
	}
	ctx := ctxFor(t)
	label := uniqueLabel("vastrun-conformance-bulk")
	_, a := rentCheapest(t, h, label)
	_, b := rentCheapest(t, h, label)
	ids := []provider.InstanceID{a.InstanceID, b.InstanceID}
	for _, id := range ids {
		waitRunning(t, h, id)
	}
	if err := ops.StopInstances(ctx, ids); err != nil {
		t.Fatalf("bulk stop: %v", err)
	}
	for _, id := range ids {
		waitFor(t, h, id, "stopped", func(i provider.Instance, err error) bool {
			return err == nil && i.ActualStatus == "stopped" && i.IntendedStatus == "stopped"
		})
	}
	if err := ops.StartInstances(ctx, ids); err != nil {
		t.Fatalf("bulk start: %v", err)
	}
	for _, id := range ids {
		waitRunning(t, h, id)
	}
	if err := ops.DestroyInstances(ctx, ids); err != nil {
		t.Fatalf("bulk destroy: %v", err)
	}
	for _, id := range ids {
		waitFor(t, h, id, "gone", func(i provider.Instance, err error) bool { return errors.Is(err, provider.ErrNotFound) })
	}
	if list, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}}); err != nil || len(list) != 0 {
		t.Fatalf("bulk-destroyed instances still listed: %+v %v", list, err)
	}
}

func testRebootExecute(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-exec"))
	id := res.InstanceID
	waitRunning(t, h, id)
	out, err := ops.Execute(ctx, id, "du -a /workspace")
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	if !strings.Contains(out, "/workspace") {
		t.Errorf("execute du -a /workspace printed %q, want container paths", out)
	}
	if _, err := ops.Execute(ctx, id, "cat /etc/passwd"); err == nil {
		t.Errorf("execute accepted a command outside ls, rm, du")
	}
	// A path outside /workspace and /root is the command's business, not
	// an API error: Vast documents no such refusal (vast-api.md §2.4).
	if _, err := ops.Execute(ctx, id, "ls /etc"); err != nil {
		t.Errorf("execute ls /etc: %v, want the command's own output", err)
	}
	if err := ops.RebootInstance(ctx, id); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	waitRunning(t, h, id)
	if err := ops.RebootInstance(ctx, 1); err == nil {
		t.Errorf("reboot of an unknown instance succeeded")
	}
}

// testChangeBid: an on-demand contract keeps its price (400 invalid_args
// "Can't change price of on-demand contract.", vast-api.md §12.1); an
// interruptible one's bid changes and billing follows it.
func testChangeBid(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	onDemand, od := rentCheapest(t, h, uniqueLabel("vastrun-conformance-bid-od"))
	waitRunning(t, h, od.InstanceID)
	err := ops.ChangeBid(ctx, od.InstanceID, math.Round((onDemand.DPHBase/2+0.001)*1000)/1000)
	var ae *provider.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_args" || errors.Is(err, provider.ErrNotFound) {
		t.Errorf("change bid of an on-demand instance: %v, want 400 invalid_args", err)
	}
	if got, err := h.Market.ShowInstance(ctx, od.InstanceID); err != nil || got.IsBid {
		t.Errorf("an on-demand instance after a refused bid change: is_bid %v (%v), want it still on demand", got.IsBid, err)
	}

	offer, res, err := rentBid(t, h, uniqueLabel("vastrun-conformance-bid"), func(m float64) float64 { return provider.RoundBid(m * 1.2) })
	if err != nil {
		t.Fatalf("rent interruptible: %v", err)
	}
	id := res.InstanceID
	before := waitRunning(t, h, id)
	bid := math.Round((offer.MinBid*1.5+0.001)*1000) / 1000
	if err := ops.ChangeBid(ctx, id, bid); err != nil {
		t.Fatalf("change bid to %v: %v", bid, err)
	}
	after, err := h.Market.ShowInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !after.IsBid || math.Abs(after.DPHTotal-(bid+after.StorageTotal)) > 1e-4 {
		t.Errorf("after a bid of %v: is_bid %v, dph_total %v (storage %v; before %v)", bid, after.IsBid, after.DPHTotal, after.StorageTotal, before.DPHTotal)
	}
	if err := ops.ChangeBid(ctx, id, 0); err == nil {
		t.Errorf("a bid of 0 was accepted")
	}
	if err := ops.ChangeBid(ctx, id, 33); err == nil {
		t.Errorf("a bid of $33/h (over the 32 maximum) was accepted")
	}
	if err := ops.ChangeBid(ctx, 1, bid); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("bid on an unknown instance: %v, want ErrNotFound", err)
	}
	if h.Live {
		return // outbidding a live rental is not ours to schedule
	}
	if err := ops.ChangeBid(ctx, id, math.Max(0.001, offer.MinBid/4)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, id, "paused (outbid)", func(i provider.Instance, err error) bool { return err == nil && i.Paused() })
	if err := ops.ChangeBid(ctx, id, bid); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, id)
}

func testReads(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	label := uniqueLabel("vastrun-conformance-reads")
	offer, res := rentCheapest(t, h, label)
	waitRunning(t, h, res.InstanceID)
	if _, err := ops.Deposit(ctx, res.InstanceID); err != nil {
		t.Errorf("deposit: %v", err)
	}
	if _, err := ops.Deposit(ctx, 1); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("deposit of an unknown instance: %v, want ErrNotFound", err)
	}
	filters, err := ops.InstanceFilters(ctx)
	if err != nil || !slices.Contains(filters["label"], label) {
		t.Errorf("filters %v (err %v) lack label %q", filters, err, label)
	}
	names, err := ops.GPUNames(ctx)
	if err != nil || !slices.Contains(names, offer.GPUName) {
		t.Errorf("GPU names %v (err %v) lack %q", names, err, offer.GPUName)
	}
	if err := h.Sleep(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	from, to := h.now().Add(-48*time.Hour), h.now().Add(48*time.Hour)
	inv, err := ops.LegacyInvoices(ctx, from, to)
	if err != nil {
		t.Fatalf("legacy invoices: %v", err)
	}
	if !h.Live && !slices.ContainsFunc(inv, func(i provider.LegacyInvoice) bool {
		return i.Type == "charge" && i.InstanceID == res.InstanceID && i.Amount > 0
	}) {
		t.Errorf("legacy invoices lack a positive charge for instance %d: %+v", res.InstanceID, inv)
	}
	rows, err := ops.InvoiceRows(ctx, from, to)
	if err != nil {
		t.Fatalf("invoice search: %v", err)
	}
	if !h.Live && !slices.ContainsFunc(rows, func(r provider.InvoiceRow) bool { return r.IsCredit && r.AmountCents > 0 }) {
		t.Errorf("invoice search lacks the credit top-up: %+v", rows)
	}
}

func testCopy(t *testing.T, h Harness) {
	ops := needOps(t, h)
	if h.Cloud == nil || h.Live {
		t.Skip("needs the far side of a cloud integration (simulator only)")
	}
	ctx := ctxFor(t)
	clouds, err := ops.CloudIntegrations(ctx)
	if err != nil || len(clouds) == 0 {
		t.Fatalf("cloud integrations: %+v %v", clouds, err)
	}
	cloud := clouds[0].ID
	if err := h.Cloud.Put(cloud, "data/in.txt", "weights v1\n"); err != nil {
		t.Fatal(err)
	}
	label := uniqueLabel("vastrun-conformance-copy")
	_, a := rentCheapest(t, h, label)
	_, b := rentCheapest(t, h, label)
	waitRunning(t, h, a.InstanceID)
	waitRunning(t, h, b.InstanceID)

	if _, err := ops.CloudCopy(ctx, provider.CloudCopyRequest{Instance: a.InstanceID, Integration: cloud, Src: "data/", Dst: "/workspace/data/"}); err != nil {
		t.Fatalf("cloud to instance: %v", err)
	}
	if err := ops.CopyDirect(ctx, a.InstanceID, b.InstanceID, "/workspace/data/", "/workspace/copied/"); err != nil {
		t.Fatalf("copy_direct: %v", err)
	}
	if out, err := ops.Execute(ctx, b.InstanceID, "ls /workspace/copied"); err != nil || !strings.Contains(out, "in.txt") {
		t.Fatalf("after copy_direct, ls on the destination: %q %v", out, err)
	}
	if _, err := ops.CloudCopy(ctx, provider.CloudCopyRequest{Instance: b.InstanceID, Integration: cloud, Src: "/workspace/copied/in.txt", Dst: "back/", ToCloud: true}); err != nil {
		t.Fatalf("instance to cloud: %v", err)
	}
	if got, err := h.Cloud.Get(cloud, "back/in.txt"); err != nil || got != "weights v1\n" {
		t.Fatalf("round trip through two instances and the cloud: %q %v", got, err)
	}
	ep, err := ops.RsyncTarget(ctx, b.InstanceID, "/workspace/", true)
	if err != nil {
		t.Fatalf("rsync target: %v", err)
	}
	inst, _ := h.Market.ShowInstance(ctx, b.InstanceID)
	if !slices.Contains(inst.SSHEndpoints(), ep) {
		t.Errorf("rsync target %+v is not one of the instance's SSH endpoints %+v", ep, inst.SSHEndpoints())
	}
	if err := ops.CopyDirect(ctx, a.InstanceID, 1, "/workspace/data/", "/workspace/"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("copy to an unknown instance: %v, want ErrNotFound", err)
	}
}

func testCreateStopped(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	offers, err := h.Market.SearchOffers(ctx, h.Query)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v (%d offers)", err, len(offers))
	}
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: h.Image, DiskGB: 10,
		Label: uniqueLabel("vastrun-conformance-stopped"), Stopped: true})
	if err != nil {
		t.Fatalf("create stopped: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Market.DestroyInstance(context.WithoutCancel(ctx), res.InstanceID); err != nil {
			t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
		}
	})
	if err := h.Sleep(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	inst, err := h.Market.ShowInstance(ctx, res.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ActualStatus == "running" || inst.IntendedStatus != "stopped" {
		t.Fatalf("target_state stopped: after 5 minutes the instance is %q (intended %q)", inst.ActualStatus, inst.IntendedStatus)
	}
	if err := h.Market.StartInstance(ctx, res.InstanceID); err != nil {
		t.Fatalf("start: %v", err)
	}
	waitRunning(t, h, res.InstanceID)
	if h.Live {
		return
	}
	if err := h.Market.DestroyInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	charges, err := h.Market.Charges(ctx, provider.ChargeQuery{From: h.now().Add(-48 * time.Hour), To: h.now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charges {
		if c.InstanceID != res.InstanceID {
			continue
		}
		for _, it := range c.Items {
			// Five stopped minutes bill storage; GPU time is only what ran
			// after the start, far under five minutes' worth.
			if it.Type == "gpu" && it.Amount > offers[0].DPHBase*4/60 {
				t.Errorf("GPU billed $%v: the stopped minutes were billed as GPU time", it.Amount)
			}
			if it.Type == "disk" && it.Amount <= 0 {
				t.Errorf("no storage billed while stopped")
			}
		}
	}
}

func testTemplates(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	tmpls, err := ops.Templates(ctx)
	if err != nil || len(tmpls) == 0 {
		t.Fatalf("templates: %+v %v", tmpls, err)
	}
	tmpl := tmpls[0]
	offers, err := h.Market.SearchOffers(ctx, h.Query)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	if _, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, TemplateHashID: "0000000000000000deadbeef00000000", DiskGB: 10, Label: "x"}); err == nil {
		t.Fatalf("create from an unknown template hash succeeded")
	}
	if h.Live {
		return // renting an arbitrary catalog template live is not ours to pay for
	}
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, TemplateHashID: tmpl.HashID, DiskGB: 10,
		Label: uniqueLabel("vastrun-conformance-template")})
	if err != nil {
		t.Fatalf("create from template %s: %v", tmpl.HashID, err)
	}
	t.Cleanup(func() {
		if err := h.Market.DestroyInstance(context.WithoutCancel(ctx), res.InstanceID); err != nil {
			t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
		}
	})
	inst := waitFor(t, h, res.InstanceID, "visible", func(i provider.Instance, err error) bool { return err == nil })
	if inst.ImageUUID != tmpl.Image {
		t.Errorf("instance from template %q runs %q, want its image %q", tmpl.Name, inst.ImageUUID, tmpl.Image)
	}
}
