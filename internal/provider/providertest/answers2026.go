package providertest

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/vastrun/vastrun/internal/provider"
)

// answers2026Cases pin the answers of Vast's 2026 documents (vast-api.md
// §12): attaching a key twice, bulk calls on ids that are gone, the
// documented template example, and the account routes official clients
// call.
var answers2026Cases = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"AttachingAKeyTwiceIsAttached", testAttachTwice},
	{"BulkCallsOnGoneIdsAreNotFound", testBulkGone},
	{"DocumentedTemplateExampleResolves", testTemplateExample},
	{"SpendRateEarningsPriceIncreases", testAccount2026},
	{"DeletedKeyIsAnAuthError", testDeletedKey},
}

func newAuthorizedKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}

// testAttachTwice: Vast answers a second attach of the same key 200
// {"success": false, "msg": "SSH key already associated with instance."};
// the client reads the instance's keys and calls that attached. A
// different key is still added.
func testAttachTwice(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-attach"))
	id := res.InstanceID
	waitRunning(t, h, id)
	key := newAuthorizedKey(t, "vastrun-conformance")
	for i := 1; i <= 2; i++ {
		if err := h.Market.AttachSSHKey(ctx, id, key); err != nil {
			t.Fatalf("attach %d of the same key: %v, want success (already attached is attached)", i, err)
		}
	}
	keys, err := ops.InstanceSSHKeys(ctx, id)
	if err != nil {
		t.Fatalf("list the instance's keys: %v", err)
	}
	n := 0
	for _, k := range keys {
		if strings.Fields(k)[1] == strings.Fields(key)[1] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the key is on the instance %d times after two attaches (keys %q), want once", n, keys)
	}
	other := newAuthorizedKey(t, "vastrun-conformance-2")
	if err := h.Market.AttachSSHKey(ctx, id, other); err != nil {
		t.Fatalf("attach a second key: %v", err)
	}
	if keys, err := ops.InstanceSSHKeys(ctx, id); err != nil || len(keys) < 2 {
		t.Errorf("after two different keys the instance lists %q (%v)", keys, err)
	}
}

// testBulkGone: the bulk destroy's documented answers (vast-api.md
// §12.1), on which vastrun's cleanup in O(1) calls rests: ids none of
// which is the account's are 404 instances_not_found, and so is a second
// destroy of ids already gone; an empty id list is 400 invalid_args; a
// call of provider.MaxBulkIDs ids (the chunk vastrun sends) destroys. A
// bulk stop with one live id among gone ones succeeds for the live one.
func testBulkGone(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-bulkgone"))
	id := res.InstanceID
	waitRunning(t, h, id)
	err := ops.DestroyInstances(ctx, []provider.InstanceID{1, 2})
	var ae *provider.APIError
	if !errors.Is(err, provider.ErrNotFound) || !errors.As(err, &ae) || ae.Code != "instances_not_found" {
		t.Errorf("bulk destroy of ids that are not the account's: %v, want 404 instances_not_found", err)
	}
	if err := ops.StopInstances(ctx, []provider.InstanceID{1, 2}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("bulk stop of ids that are not the account's: %v, want not found", err)
	}
	if err := ops.StopInstances(ctx, []provider.InstanceID{1, id}); err != nil {
		t.Fatalf("bulk stop of one live id among unknown ones: %v, want success for the live one", err)
	}
	waitFor(t, h, id, "stopped", func(i provider.Instance, err error) bool { return err == nil && i.IntendedStatus == "stopped" })
	many := make([]provider.InstanceID, 65)
	for i := range many {
		many[i] = id
	}
	if err := ops.StartInstances(ctx, many); err == nil {
		t.Errorf("a bulk start of 65 ids was accepted; Vast takes 64 a call")
	}
	if err := ops.DestroyInstances(ctx, nil); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_args" {
		t.Errorf("bulk destroy of no ids: %v, want 400 invalid_args", err)
	}
	chunk := make([]provider.InstanceID, provider.MaxBulkIDs)
	for i := range chunk {
		chunk[i] = id
	}
	if err := ops.DestroyInstances(ctx, chunk); err != nil {
		t.Fatalf("bulk destroy of %d ids: %v", len(chunk), err)
	}
	waitFor(t, h, id, "gone", func(i provider.Instance, err error) bool { return errors.Is(err, provider.ErrNotFound) })
	if err := ops.DestroyInstances(ctx, []provider.InstanceID{id}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("a second bulk destroy of the same id: %v, want 404 instances_not_found", err)
	}
}

// exampleTemplate is the hash of both official clients' documented
// `create instance --template_hash` example.
const exampleTemplate = "661d064bbda1f2a133816b6d55da07c3"

func testTemplateExample(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	tmpls, err := ops.Templates(ctx)
	if err != nil {
		t.Fatalf("templates: %v", err)
	}
	var image string
	for _, tm := range tmpls {
		if tm.HashID == exampleTemplate {
			image = tm.Image
		}
	}
	if image == "" {
		t.Fatalf("the catalog lacks the documented example template %s", exampleTemplate)
	}
	if h.Live {
		return
	}
	offers, err := h.Market.SearchOffers(ctx, h.Query)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, TemplateHashID: exampleTemplate, DiskGB: 64,
		Label: uniqueLabel("vastrun-conformance-example")})
	if err != nil {
		t.Fatalf("create --template_hash %s --disk 64 (the documented example): %v", exampleTemplate, err)
	}
	t.Cleanup(func() {
		if err := h.Market.DestroyInstance(ctxFor(t), res.InstanceID); err != nil {
			t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
		}
	})
	if inst := waitFor(t, h, res.InstanceID, "visible", func(i provider.Instance, err error) bool { return err == nil }); inst.ImageUUID != image {
		t.Errorf("instance from the example template runs %q, want %q", inst.ImageUUID, image)
	}
}

func testAccount2026(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	if _, err := ops.PendingPriceIncreases(ctx); err != nil {
		t.Errorf("pending price increases: %v", err)
	}
	now := h.now()
	if _, err := ops.MachineEarnings(ctx, now.Add(-7*24*time.Hour), now); err != nil {
		t.Errorf("machine earnings: %v", err)
	}
	if h.Live {
		if _, err := ops.SpendRate(ctx); err != nil {
			t.Errorf("spend rate: %v", err)
		}
		return
	}
	idle, err := ops.SpendRate(ctx)
	if err != nil {
		t.Fatalf("spend rate: %v", err)
	}
	if idle.HasActiveResources || idle.GPU != 0 {
		t.Errorf("spend rate with nothing rented: %+v", idle)
	}
	_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-spend"))
	inst := waitRunning(t, h, res.InstanceID)
	busy, err := ops.SpendRate(ctx)
	if err != nil {
		t.Fatalf("spend rate: %v", err)
	}
	if !busy.HasActiveResources || busy.GPU <= 0 || busy.ContainerStorage <= 0 || busy.GPU+busy.ContainerStorage < inst.DPHTotal-1e-4 {
		t.Errorf("spend rate with one running instance at $%v/h: %+v", inst.DPHTotal, busy)
	}
}

// testDeletedKey: a key that was deleted is told 401 "Invalid user key"
// (vast-api.md §12.3), an authentication failure to the client like an
// unknown key's 404. An instance's own key (CONTAINER_API_KEY) is deleted
// with its instance.
func testDeletedKey(t *testing.T, h Harness) {
	if h.Live || h.WithKey == nil {
		t.Skip("needs a client with another key, and a key to delete")
	}
	ctx := ctxFor(t)
	_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-deletedkey"))
	waitRunning(t, h, res.InstanceID)
	own := h.WithKey(res.InstanceAPIKey)
	if _, err := own.ShowInstance(ctx, res.InstanceID); err != nil && !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("the instance's own key before its instance is destroyed: %v", err)
	}
	if err := h.Market.DestroyInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	_, err := own.ShowInstance(ctx, res.InstanceID)
	var ae *provider.APIError
	if !errors.Is(err, provider.ErrAuth) || !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("a deleted key: %v, want 401, an authentication failure", err)
	}
}
