package sim

import (
	"encoding/json"
	"net/http"
)

// template is one entry of the simulator's small template catalog: a
// create that names its hash_id gets its image, runtype and onstart.
type template struct {
	ID      int64
	HashID  string
	Name    string
	Image   string
	Runtype string
	Onstart string
}

// templates is the catalog. Its first entry is the template of the
// official CLI's own create example (`vastai create instance 384826
// --template_hash 661d064bbda1f2a133816b6d55da07c3 --disk 64`, "the
// PyTorch (cuDNN Devel) template"), so both official clients' documented
// invocation resolves here; the image behind it is the simulator's choice.
var templates = []template{
	{ID: 281000, HashID: "661d064bbda1f2a133816b6d55da07c3", Name: "PyTorch (cuDNN Devel)",
		Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel", Runtype: "ssh_direc ssh_proxy"},
	{ID: 281001, HashID: "4e17788f74f075dd9aab7d0d4427968f", Name: "PyTorch (cuDNN runtime)",
		Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", Runtype: "ssh_direc ssh_proxy"},
	{ID: 281002, HashID: "8f2e1d6b0c9a4b3e7d5f1a2c3b4d5e6f", Name: "NVIDIA CUDA",
		Image: "nvidia/cuda:12.4.1-runtime-ubuntu22.04", Runtype: "ssh_direc ssh_proxy"},
	{ID: 281003, HashID: "c0ffee00c0ffee00c0ffee00c0ffee00", Name: "Vast base image",
		Image: "vastai/base-image:cuda-12.4.1-auto", Runtype: "ssh_proxy", Onstart: "echo ready > /workspace/.onstart-ran"},
}

func templateByHash(hash string) *template {
	for i := range templates {
		if templates[i].HashID == hash {
			return &templates[i]
		}
	}
	return nil
}

func (t *template) row() map[string]any {
	return map[string]any{"id": t.ID, "hash_id": t.HashID, "name": t.Name, "image": t.Image, "runtype": t.Runtype,
		"onstart": t.Onstart, "private": false, "recommended": true}
}

// handleTemplates is GET /api/v0/template/?select_filters=...: the catalog,
// filterable on its columns like the v1 instance list.
func (s *Server) handleTemplates(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_read"); !ok {
		return
	}
	var filters map[string]map[string]any
	if v := r.URL.Query().Get("select_filters"); v != "" {
		if err := json.Unmarshal([]byte(v), &filters); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_args", "select_filters is not valid JSON")
			return
		}
	}
	rows := []map[string]any{}
	for i := range templates {
		if row := templates[i].row(); rowMatches(row, filters) {
			rows = append(rows, row)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "templates_found": len(rows), "templates": rows})
}
