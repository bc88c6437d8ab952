package lifecycle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/storage"
)

// The copy of the evidence at evidence.uri (docs/receipt.md).
//
// At the end of every run, whatever its outcome and after teardown, the
// evidence directory is copied to <uri>/<run id>/ through the storage layer.
// evidence-manifest.json lists every file but the receipt and the summary
// with its size and SHA-256; the receipt records the URI and the manifest's
// SHA-256 and is uploaded last, beside the summary. So the receipt vouches
// for the manifest, and the manifest for every other file.
//
// An upload never delays teardown (it runs after it, bounded by
// evidenceUploadLimit) and a failed one never hides the run's own outcome:
// it is annotated, recorded in the receipt, and returned as
// *EvidenceUploadError next to the run's error.

// EvidenceManifestName is the manifest of an uploaded evidence directory.
const EvidenceManifestName = "evidence-manifest.json"

// EvidenceManifestSchema versions EvidenceManifestName's JSON.
const EvidenceManifestSchema = "vastrun.evidence-manifest/v1"

// evidenceUploadLimit bounds the whole upload (wall clock: it is I/O to a
// store, not marketplace time).
const evidenceUploadLimit = 3 * time.Minute

// ErrEvidenceUpload classifies a failed copy of the evidence to evidence.uri.
var ErrEvidenceUpload = errors.New("evidence upload failed")

// EvidenceUploadError is a failed copy of the evidence to URI.
type EvidenceUploadError struct {
	URI string
	Err error
}

func (e *EvidenceUploadError) Error() string {
	return fmt.Sprintf("upload evidence to %s: %v", e.URI, e.Err)
}
func (e *EvidenceUploadError) Unwrap() []error { return []error{ErrEvidenceUpload, e.Err} }

// EvidenceFile is one entry of the manifest.
type EvidenceFile struct {
	Path   string `json:"path"` // slash-separated, relative to the run's prefix
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// EvidenceManifest is EvidenceManifestName's content.
type EvidenceManifest struct {
	Schema string         `json:"schema"`
	RunID  string         `json:"run_id"`
	Files  []EvidenceFile `json:"files"`
}

// receiptFiles are written after the manifest and uploaded last.
var receiptFiles = []string{"receipt.json", "summary.md"}

// evidenceBase is evidence.uri as draft freezes it into the manifest: its
// ${NAME}s were expanded when the engine was built (config.ExpandVars).
func evidenceBase(e *Scope) string { return e.Config.Evidence.URI }

// evidenceURI is where this run's evidence goes: <base>/<run id>.
func evidenceURI(e *Scope) string {
	u := e.Frozen().EvidenceURI
	if u == "" || e.state == nil || e.state.RunID == "" {
		return ""
	}
	return runScoped(u, e.state.RunID)
}

// checkEvidenceURI refuses, before renting, an evidence.uri that cannot name
// a store (whether it is reachable is only known at the end: a failed
// upload is reported then, never blocking the run).
func checkEvidenceURI(e *Scope) error {
	u := e.Frozen().EvidenceURI
	if u == "" {
		return nil
	}
	// Opening parses the URI (file: an absolute directory, created here).
	if _, err := storage.Open(u, storage.Options{Getenv: e.Getenv}); err != nil {
		return fmt.Errorf("evidence.uri: %w", err)
	}
	return nil
}

// uploadEvidence copies the evidence directory (but the receipt files) and
// its manifest; finish then records e.evidenceUp in the receipt.
func uploadEvidence(ctx context.Context, e *Scope) error {
	uri := evidenceURI(e)
	if uri == "" {
		return nil
	}
	up := &receipt.EvidenceUpload{URI: uri + "/", Manifest: EvidenceManifestName}
	e.evidenceUp = up
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), evidenceUploadLimit)
	defer cancel()
	t0 := e.Now()
	defer func() { e.timings.add("evidence_upload", e.Now().Sub(t0)) }()
	err := putEvidence(uctx, e, uri, up)
	if err != nil {
		return evidenceFailed(e, up, err)
	}
	up.Uploaded = true
	e.Infof("evidence uploaded to %s (%d files, manifest sha256 %s)", up.URI, up.Files, up.ManifestSHA256)
	return nil
}

func putEvidence(ctx context.Context, e *Scope, uri string, up *receipt.EvidenceUpload) error {
	st, err := storage.Open(uri, storage.Options{Getenv: e.Getenv})
	if err != nil {
		return err
	}
	files, err := evidenceFiles(e)
	if err != nil {
		return err
	}
	if err := refuseSecrets(e, files); err != nil {
		return err
	}
	objs, err := storage.PutFiles(ctx, st, files)
	if err != nil {
		return err
	}
	m := EvidenceManifest{Schema: EvidenceManifestSchema, RunID: e.state.RunID, Files: []EvidenceFile{}}
	for i, o := range objs {
		sum := o.SHA256
		if sum == "" {
			if sum, err = fileSHA256(files[i].Path); err != nil {
				return err
			}
		}
		m.Files = append(m.Files, EvidenceFile{Path: files[i].Key, Size: o.Size, SHA256: sum})
		up.Bytes += o.Size
	}
	up.Files = len(m.Files)
	b, _ := json.MarshalIndent(m, "", "  ")
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	up.ManifestSHA256 = hex.EncodeToString(sum[:])
	if err := e.writeFileAtomic(filepath.Join(e.EvidenceDir, EvidenceManifestName), b, 0o644); err != nil {
		return err
	}
	o, err := st.Put(ctx, EvidenceManifestName, bytes.NewReader(b))
	if err != nil {
		return err
	}
	if o.SHA256 != "" && o.SHA256 != up.ManifestSHA256 {
		return fmt.Errorf("%s: the store recorded sha256 %s, not %s", EvidenceManifestName, o.SHA256, up.ManifestSHA256)
	}
	return nil
}

// evidenceFiles lists the evidence directory, sorted, without the receipt
// files, the manifest and temporary files.
func evidenceFiles(e *Scope) ([]storage.FileTransfer, error) {
	skip := map[string]bool{EvidenceManifestName: true}
	for _, n := range receiptFiles {
		skip[n] = true
	}
	var out []storage.FileTransfer
	err := filepath.WalkDir(e.EvidenceDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(e.EvidenceDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skip[rel] || strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		out = append(out, storage.FileTransfer{Key: rel, Path: p})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // opened read-only: a failed read surfaces in io.Copy
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// uploadReceipt copies the receipt files written by finish, last. A failure
// is reported; the receipt already written locally keeps saying what the
// manifest upload did.
func uploadReceipt(ctx context.Context, e *Scope) error {
	up := e.evidenceUp
	if up == nil || !up.Uploaded {
		return nil
	}
	uri := strings.TrimSuffix(up.URI, "/")
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), evidenceUploadLimit)
	defer cancel()
	st, err := storage.Open(uri, storage.Options{Getenv: e.Getenv})
	if err != nil {
		return evidenceFailed(e, up, err)
	}
	var files []storage.FileTransfer
	for _, n := range receiptFiles {
		files = append(files, storage.FileTransfer{Key: n, Path: filepath.Join(e.EvidenceDir, n)})
	}
	if err := refuseSecrets(e, files); err != nil {
		return evidenceFailed(e, up, err)
	}
	if _, err := storage.PutFiles(uctx, st, files); err != nil {
		return evidenceFailed(e, up, err)
	}
	return nil
}

// ErrSecretInEvidence means an evidence file still holds a form of a
// secret: the upload is refused whole, before anything is copied.
var ErrSecretInEvidence = errors.New("still holds a form of a secret; nothing was uploaded")

// refuseSecrets checks every file about to leave this machine for a form
// of a registered secret. Every writer masks through the sink, so this is
// the last line, for what reached the directory another way.
func refuseSecrets(e *Scope, files []storage.FileTransfer) error {
	for _, f := range files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return err
		}
		if e.Redactor.Contains(b) {
			return fmt.Errorf("evidence file %s %w", f.Key, ErrSecretInEvidence)
		}
	}
	return nil
}

// evidenceFailed records, annotates and returns a failed upload.
func evidenceFailed(e *Scope, up *receipt.EvidenceUpload, err error) error {
	ue := &EvidenceUploadError{URI: up.URI, Err: err}
	msg := e.Redactor.String(ue.Error())
	if up.Error == "" {
		up.Error = msg
	}
	e.Infof("%s (the run's own outcome and its teardown are unaffected)", msg)
	e.CI.Annotate(e.annotationWriter(), "error", msg)
	return ue
}

// withEvidenceErr adds failed uploads to the run's error, leaving err as it
// is when there are none.
func withEvidenceErr(err error, upload ...error) error {
	if errors.Join(upload...) == nil {
		return err
	}
	return errors.Join(append([]error{err}, upload...)...)
}
