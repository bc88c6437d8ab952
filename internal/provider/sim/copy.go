package sim

import (
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The copy family: instance to instance (copy_direct), instance to a local
// side (rsync: the client moves the bytes itself over SSH), and instance
// to and from a "cloud" (rclone through a cloud integration). The cloud is
// a directory the simulator keeps, one per integration.

type cloudIntegration struct {
	ID        int64
	Name      string
	CloudType string
}

// cloudDir is where integration id keeps its objects.
func (s *Server) cloudDir(id int64) string {
	return filepath.Join(s.dir, "cloud", strconv.FormatInt(id, 10))
}

// CloudDir is the directory behind cloud integration id, for assertions.
func (s *Server) CloudDir(id int64) string { return s.cloudDir(id) }

func (s *Server) handleCloudIntegrations(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_read"); !ok {
		return
	}
	list := []map[string]any{}
	for _, c := range s.clouds {
		list = append(list, map[string]any{"id": c.ID, "name": c.Name, "cloud_type": c.CloudType})
	}
	writeJSON(w, http.StatusOK, list)
}

// instanceRef reads an instance id as clients write it: "123" or "C.123".
func instanceRef(v any) (int64, bool) {
	var s string
	switch x := v.(type) {
	case string:
		s = strings.TrimPrefix(x, "C.")
	case float64:
		return int64(x), x > 0
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// handleCopyDirect is PUT /api/v0/commands/copy_direct/ {"src_id",
// "dst_id", "src_path", "dst_path"}: a remote-to-remote copy between two
// instances' containers. The simulator copies at once.
func (s *Server) handleCopyDirect(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		SrcID   any     `json:"src_id"`
		DstID   any     `json:"dst_id"`
		SrcPath *string `json:"src_path"`
		DstPath *string `json:"dst_path"`
	}
	if err := readBody(r, &b); err != nil || b.SrcPath == nil || b.DstPath == nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "src_path and dst_path are required")
		return
	}
	srcID, ok1 := instanceRef(b.SrcID)
	dstID, ok2 := instanceRef(b.DstID)
	if !ok1 || !ok2 {
		writeError(w, http.StatusBadRequest, "invalid_args", "src_id and dst_id must be instance ids")
		return
	}
	src, dst, ok := s.twoSandboxes(w, srcID, dstID)
	if !ok {
		return
	}
	if err := copyPaths(inSandbox(src), *b.SrcPath, inSandbox(dst), *b.DstPath); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true,
		"msg": "Remote to Remote copy initiated - check instance status bar for progress updates (~30 seconds delayed)."})
}

// twoSandboxes resolves two live instances' sandboxes (0: none wanted).
func (s *Server) twoSandboxes(w http.ResponseWriter, a, b int64) (string, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [2]string
	for i, id := range []int64{a, b} {
		if id == 0 {
			continue
		}
		in := s.lookupLocked(id)
		if in == nil {
			writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
			return "", "", false
		}
		out[i] = in.sandbox
	}
	return out[0], out[1], true
}

// handleRsync is PUT /api/v0/commands/rsync/: one side is local (its id
// null); Vast answers where the instance side's SSH is, and the client
// runs rsync over SSH itself.
func (s *Server) handleRsync(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		SrcID   any    `json:"src_id"`
		DstID   any    `json:"dst_id"`
		SrcPath string `json:"src_path"`
		DstPath string `json:"dst_path"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "Invalid json body")
		return
	}
	srcID, srcOK := instanceRef(b.SrcID)
	dstID, dstOK := instanceRef(b.DstID)
	if srcOK == dstOK {
		writeError(w, http.StatusBadRequest, "invalid_args", "exactly one of src_id and dst_id must be an instance (the other side is local)")
		return
	}
	side, id, p := "dst", dstID, b.DstPath
	if srcOK {
		side, id, p = "src", srcID, b.SrcPath
	}
	s.mu.Lock()
	in := s.lookupLocked(id)
	var port int
	if in != nil {
		row := s.instanceRow(in)
		port = row["ssh_port"].(int)
	}
	s.mu.Unlock()
	if in == nil {
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, side + "_addr": "127.0.0.1", side + "_port": port, side + "_path": p,
		"msg": "use rsync over ssh to " + side + "_addr:" + side + "_port"})
}

// handleRclone is POST /api/v0/commands/rclone/ {"instance_id", "src",
// "dst", "selected", "transfer", "flags"}: copies between the instance's
// container and the integration's cloud directory, and serves the
// transfer log at result_url.
func (s *Server) handleRclone(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		InstanceID any      `json:"instance_id"`
		Src        string   `json:"src"`
		Dst        string   `json:"dst"`
		Selected   any      `json:"selected"`
		Transfer   string   `json:"transfer"`
		Flags      []string `json:"flags"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "Invalid json body")
		return
	}
	id, ok := instanceRef(b.InstanceID)
	cloudID, ok2 := instanceRef(b.Selected)
	if !ok || !ok2 || b.Src == "" || b.Dst == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "msg": "instance_id, selected, src and dst are required"})
		return
	}
	var cloud *cloudIntegration
	for _, c := range s.clouds {
		if c.ID == cloudID {
			cloud = c
		}
	}
	if cloud == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "msg": fmt.Sprintf("no cloud integration %d", cloudID)})
		return
	}
	sandbox, _, ok := s.twoSandboxes(w, id, 0)
	if !ok {
		return
	}
	var err error
	switch b.Transfer {
	case "Instance To Cloud":
		err = copyPaths(inSandbox(sandbox), b.Src, inBucket(s.cloudDir(cloud.ID)), b.Dst)
	case "Cloud To Instance":
		err = copyPaths(inBucket(s.cloudDir(cloud.ID)), b.Src, inSandbox(sandbox), b.Dst)
	default:
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "msg": `transfer must be "Instance To Cloud" or "Cloud To Instance"`})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "msg": err.Error()})
		return
	}
	url := s.storeResult(r, fmt.Sprintf("Transferred: %s -> %s (%s)\n", b.Src, b.Dst, cloud.Name), ".log")
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "msg": "Sync initiated.", "result_url": url})
}

// resolver maps a path as the API names it to a host path.
type resolver func(p string) (string, error)

// inSandbox resolves container paths of an instance.
func inSandbox(sandbox string) resolver {
	return func(p string) (string, error) { return containerPath(sandbox, p), nil }
}

// inBucket resolves object paths of a cloud directory.
func inBucket(dir string) resolver {
	return func(p string) (string, error) {
		clean := filepath.Clean("/" + p)
		return filepath.Join(dir, clean), nil
	}
}

// copyPaths copies srcPath to dstPath, as rsync does: "dir/" copies dir's
// contents, "dir" copies dir itself.
func copyPaths(srcRoot resolver, srcPath string, dstRoot resolver, dstPath string) error {
	src, err := srcRoot(srcPath)
	if err != nil {
		return err
	}
	dst, err := dstRoot(dstPath)
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("source %s: no such file or directory", srcPath)
	}
	if fi.IsDir() && !strings.HasSuffix(srcPath, "/") {
		dst = filepath.Join(dst, filepath.Base(src))
	}
	if !fi.IsDir() {
		if strings.HasSuffix(dstPath, "/") {
			dst = filepath.Join(dst, filepath.Base(src))
		}
		return copyFile(src, dst, fi.Mode())
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(p, target, info.Mode())
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close() //nolint:errcheck // read-only file
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode.Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close() //nolint:errcheck // the copy error is the one to report
		return err
	}
	return out.Close()
}
