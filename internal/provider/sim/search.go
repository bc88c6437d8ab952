package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// offerRow renders an offer as the wire object, priced for storageGB of
// disk; bid searches price the GPU at min_bid.
func offerRow(o *offer, storageGB float64, bid bool) map[string]any {
	st := round(o.storageDPH(storageGB), 7)
	gpu := o.DPHBase
	if bid {
		gpu = o.MinBid
	}
	total := round(gpu+st, 7)
	dlperf := round(o.Model.dlperf*float64(o.NumGPUs), 2)
	flops := round(o.Model.tflops*float64(o.NumGPUs), 2)
	priceObj := map[string]any{"gpuCostPerHour": gpu, "diskHour": st, "totalHour": total, "discountTotalHour": 0, "discountedTotalPerHour": total}
	return map[string]any{
		"id": o.ID, "ask_contract_id": o.ID, "bundle_id": o.ID * 31, "bundled_results": nil,
		"machine_id": o.MachineID, "host_id": o.HostID, "hostname": nil,
		"num_gpus": o.NumGPUs, "gpu_name": o.Model.name, "gpu_arch": o.Model.gpuArch,
		"gpu_ram": o.Model.vramMB, "gpu_total_ram": o.Model.vramMB * float64(o.NumGPUs),
		"gpu_frac": o.GPUFrac, "gpu_ids": []int64{o.MachineID*10 + 1}, "gpu_lanes": 16,
		"gpu_mem_bw": round(o.Model.tflops*11, 1), "gpu_max_power": o.Model.maxPower, "gpu_max_temp": 83,
		"gpu_display_active": false, "bw_nvlink": 0, "compute_cap": o.Model.compCap,
		"cuda_max_good": o.CUDA, "driver_version": o.Driver, "driver_vers": driverInt(o.Driver),
		"cpu_name": o.CPUName, "cpu_arch": "amd64", "cpu_cores": o.CPUCores,
		"cpu_cores_effective": o.CPUEffective, "cpu_ghz": o.CPUGHz, "cpu_ram": o.CPURAM, "has_avx": 1,
		"disk_space": o.DiskSpace, "disk_bw": o.DiskBW, "disk_name": "SAMSUNG MZQL23T8HCLS",
		"inet_up": o.InetUp, "inet_down": o.InetDown, "inet_up_cost": o.InetCost, "inet_down_cost": o.InetCost,
		"internet_up_cost_per_tb": round(o.InetCost*1024, 2), "internet_down_cost_per_tb": round(o.InetCost*1024, 2),
		"direct_port_count": o.DirectPorts, "pci_gen": o.PCIGen, "pcie_bw": 24.6, "mobo_name": "H12DSG-O-CPU",
		"os_version": "22.04", "ubuntu_version": "22.04",
		"dph_base": o.DPHBase, "storage_cost": o.StorageCost, "storage_total_cost": st, "dph_total": total,
		"min_bid": o.MinBid, "is_bid": bid, "vram_costperhour": round(total/o.Model.vramMB, 8), "credit_discount_max": 0.35,
		"dlperf": dlperf, "dlperf_per_dphtotal": round(dlperf/total, 2), "total_flops": flops,
		"flops_per_dphtotal": round(flops/total, 2), "score": round(dlperf/total*o.Reliability*3, 1),
		"reliability": o.Reliability, "reliability2": o.Reliability, "reliability_mult": round(o.Reliability, 2),
		"expected_reliability": round(o.Reliability, 2), "verification": o.Verification,
		"vericode": map[string]int{"verified": 1, "unverified": 0, "deverified": -1}[o.Verification],
		"rentable": o.RentedBy == 0, "rented": false, "external": false, "hosting_type": o.HostingType,
		"static_ip": o.StaticIP, "geolocation": o.Geolocation, "geolocode": 3000 + o.HostID%100,
		"public_ipaddr": o.PublicIP, "vms_enabled": false, "is_vm_deverified": false, "resource_type": "gpu",
		"cluster_id": nil, "start_date": o.StartDate, "end_date": o.EndDate, "duration": round(o.EndDate-o.StartDate, 1),
		"search": priceObj, "instance": priceObj, "time_remaining": "", "time_remaining_isbid": "",
		"logo": "/static/logos/vastai_small2.png", "webpage": nil,
	}
}

// driverInt encodes 535.86.05 as 535086005, as the official CLI does.
func driverInt(v string) int64 {
	var b strings.Builder
	for _, p := range strings.Split(v, ".") {
		n, _ := strconv.Atoi(p)
		fmt.Fprintf(&b, "%03d", n)
	}
	n, _ := strconv.ParseInt(b.String(), 10, 64)
	return n
}

var controlKeys = map[string]bool{
	"order": true, "type": true, "limit": true, "allocated_storage": true, "disable_bundling": true,
	"select_cols": true, "extra_ids": true, "show_incompatible": true,
}

// filterOnly are accepted filter names with no same-named offer column.
var filterOnly = map[string]bool{"verified": true, "datacenter": true}

type searchError struct{ msg string }

func (e *searchError) Error() string { return e.msg }

// search evaluates a wire query over the catalog and returns the rows to
// send. Filters and the sort read single fields (offerField) instead of
// rendering every offer, so a search costs a few field reads per offer plus
// one full row per offer returned.
func search(offers []*offer, q map[string]any) ([]map[string]any, error) {
	picked, rc, err := selectOffers(offers, q)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, o := range picked {
		out = append(out, offerRow(o, rc.storage, rc.bid))
	}
	return out, nil
}

// searchResult is a search's answer, copied out of the catalog so it can
// be rendered without the server's lock.
type searchResult struct {
	offers []offer
	rc     rowCtx
}

// searchSnapshot runs q and copies the offers it returns (rows read
// RentedBy, which creates and destroys change). Call it under the lock.
func searchSnapshot(offers []*offer, q map[string]any) (searchResult, error) {
	picked, rc, err := selectOffers(offers, q)
	if err != nil {
		return searchResult{}, err
	}
	r := searchResult{offers: make([]offer, len(picked)), rc: rc}
	for i, o := range picked {
		r.offers[i] = *o
	}
	return r, nil
}

// writeTo streams the response body {"offers": [...]} one row at a time,
// so memory holds one row, not the whole answer.
func (r searchResult) writeTo(w io.Writer) error {
	// A bufio.Writer keeps its first write error and Flush returns it.
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"offers":[`) //nolint:errcheck // Flush reports it
	for i := range r.offers {
		if i > 0 {
			bw.WriteByte(',') //nolint:errcheck // Flush reports it
		}
		row, err := json.Marshal(offerRow(&r.offers[i], r.rc.storage, r.rc.bid))
		if err != nil {
			return err
		}
		bw.Write(row) //nolint:errcheck // Flush reports it
	}
	bw.WriteString("]}") //nolint:errcheck // Flush reports it
	return bw.Flush()
}

// rowCtx is what a row depends on besides the offer.
type rowCtx struct {
	storage float64
	bid     bool
}

// selectOffers filters, sorts and limits the catalog for q.
func selectOffers(offers []*offer, q map[string]any) ([]*offer, rowCtx, error) {
	rc := rowCtx{storage: 8.0} // the server's default when the client sends none
	if v, ok := q["allocated_storage"]; ok {
		f, ok := toFloat(v)
		if !ok || f < 0 {
			return nil, rc, &searchError{"allocated_storage must be a number"}
		}
		rc.storage = f
	}
	switch t := q["type"].(type) {
	case nil:
	case string:
		switch t {
		case "on-demand", "ondemand", "reserved":
		case "bid", "interruptible":
			rc.bid = true
		default:
			return nil, rc, &searchError{fmt.Sprintf("invalid type %q", t)}
		}
	default:
		return nil, rc, &searchError{"type must be a string"}
	}
	limit := 64
	if v, ok := q["limit"]; ok {
		f, ok := toFloat(v)
		if !ok {
			return nil, rc, &searchError{"limit must be a number"}
		}
		limit = int(f)
	}
	type hit struct {
		o    *offer
		keys []any
	}
	var hits []hit
	order, orderErr := parseOrder(q["order"])
	for _, o := range offers {
		v := rowView{o: o, rc: rc}
		match, err := matches(v.get, q)
		if err != nil {
			return nil, rc, err
		}
		if match {
			hits = append(hits, hit{o: o})
		}
	}
	if orderErr != nil {
		return nil, rc, orderErr
	}
	for i := range hits {
		v := rowView{o: hits[i].o, rc: rc}
		hits[i].keys = make([]any, len(order))
		for k, ok := range order {
			hits[i].keys[k], _ = v.get(ok.field)
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		for k, o := range order {
			c := compare(hits[i].keys[k], hits[j].keys[k])
			if c == 0 {
				continue
			}
			return (c < 0) != o.desc
		}
		return false
	})
	if limit > 0 && len(hits) > limit {
		hits = hits[:limit]
	}
	out := make([]*offer, len(hits))
	for i, h := range hits {
		out[i] = h.o
	}
	return out, rc, nil
}

// rowView reads single fields of an offer's row: from offerFields when the
// field has an accessor, otherwise from the rendered row (built at most
// once), so every field of offerRow stays searchable.
type rowView struct {
	o   *offer
	rc  rowCtx
	row map[string]any
}

func (v *rowView) get(field string) (any, bool) {
	if f, ok := offerFields[field]; ok {
		return f(v.o, v.rc), true
	}
	if v.row == nil {
		v.row = offerRow(v.o, v.rc.storage, v.rc.bid)
	}
	val, ok := v.row[field]
	return val, ok
}

// offerFields compute the fields clients filter and sort on most, exactly
// as offerRow renders them (TestOfferFieldsMatchOfferRow holds them to it).
var offerFields = map[string]func(o *offer, rc rowCtx) any{
	"id":                  func(o *offer, _ rowCtx) any { return o.ID },
	"machine_id":          func(o *offer, _ rowCtx) any { return o.MachineID },
	"host_id":             func(o *offer, _ rowCtx) any { return o.HostID },
	"num_gpus":            func(o *offer, _ rowCtx) any { return o.NumGPUs },
	"gpu_name":            func(o *offer, _ rowCtx) any { return o.Model.name },
	"gpu_arch":            func(o *offer, _ rowCtx) any { return o.Model.gpuArch },
	"gpu_ram":             func(o *offer, _ rowCtx) any { return o.Model.vramMB },
	"gpu_total_ram":       func(o *offer, _ rowCtx) any { return o.Model.vramMB * float64(o.NumGPUs) },
	"gpu_frac":            func(o *offer, _ rowCtx) any { return o.GPUFrac },
	"compute_cap":         func(o *offer, _ rowCtx) any { return o.Model.compCap },
	"cuda_max_good":       func(o *offer, _ rowCtx) any { return o.CUDA },
	"driver_version":      func(o *offer, _ rowCtx) any { return o.Driver },
	"cpu_cores":           func(o *offer, _ rowCtx) any { return o.CPUCores },
	"cpu_cores_effective": func(o *offer, _ rowCtx) any { return o.CPUEffective },
	"cpu_ram":             func(o *offer, _ rowCtx) any { return o.CPURAM },
	"cpu_ghz":             func(o *offer, _ rowCtx) any { return o.CPUGHz },
	"disk_space":          func(o *offer, _ rowCtx) any { return o.DiskSpace },
	"disk_bw":             func(o *offer, _ rowCtx) any { return o.DiskBW },
	"inet_up":             func(o *offer, _ rowCtx) any { return o.InetUp },
	"inet_down":           func(o *offer, _ rowCtx) any { return o.InetDown },
	"inet_up_cost":        func(o *offer, _ rowCtx) any { return o.InetCost },
	"inet_down_cost":      func(o *offer, _ rowCtx) any { return o.InetCost },
	"direct_port_count":   func(o *offer, _ rowCtx) any { return o.DirectPorts },
	"pci_gen":             func(o *offer, _ rowCtx) any { return o.PCIGen },
	"dph_base":            func(o *offer, _ rowCtx) any { return o.DPHBase },
	"storage_cost":        func(o *offer, _ rowCtx) any { return o.StorageCost },
	"storage_total_cost":  func(o *offer, rc rowCtx) any { return round(o.storageDPH(rc.storage), 7) },
	"dph_total":           func(o *offer, rc rowCtx) any { return offerTotal(o, rc) },
	"min_bid":             func(o *offer, _ rowCtx) any { return o.MinBid },
	"is_bid":              func(_ *offer, rc rowCtx) any { return rc.bid },
	"dlperf":              func(o *offer, _ rowCtx) any { return round(o.Model.dlperf*float64(o.NumGPUs), 2) },
	"dlperf_per_dphtotal": func(o *offer, rc rowCtx) any {
		return round(round(o.Model.dlperf*float64(o.NumGPUs), 2)/offerTotal(o, rc), 2)
	},
	"total_flops": func(o *offer, _ rowCtx) any { return round(o.Model.tflops*float64(o.NumGPUs), 2) },
	"flops_per_dphtotal": func(o *offer, rc rowCtx) any {
		return round(round(o.Model.tflops*float64(o.NumGPUs), 2)/offerTotal(o, rc), 2)
	},
	"score": func(o *offer, rc rowCtx) any {
		return round(round(o.Model.dlperf*float64(o.NumGPUs), 2)/offerTotal(o, rc)*o.Reliability*3, 1)
	},
	"reliability":   func(o *offer, _ rowCtx) any { return o.Reliability },
	"reliability2":  func(o *offer, _ rowCtx) any { return o.Reliability },
	"verification":  func(o *offer, _ rowCtx) any { return o.Verification },
	"rentable":      func(o *offer, _ rowCtx) any { return o.RentedBy == 0 },
	"rented":        func(*offer, rowCtx) any { return false },
	"external":      func(*offer, rowCtx) any { return false },
	"hosting_type":  func(o *offer, _ rowCtx) any { return o.HostingType },
	"static_ip":     func(o *offer, _ rowCtx) any { return o.StaticIP },
	"geolocation":   func(o *offer, _ rowCtx) any { return o.Geolocation },
	"public_ipaddr": func(o *offer, _ rowCtx) any { return o.PublicIP },
	"duration":      func(o *offer, _ rowCtx) any { return round(o.EndDate-o.StartDate, 1) },
}

// offerTotal is the row's dph_total.
func offerTotal(o *offer, rc rowCtx) float64 {
	gpu := o.DPHBase
	if rc.bid {
		gpu = o.MinBid
	}
	return round(gpu+round(o.storageDPH(rc.storage), 7), 7)
}

type orderKey struct {
	field string
	desc  bool
}

func parseOrder(v any) ([]orderKey, error) {
	if v == nil {
		return []orderKey{{"score", true}}, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, &searchError{"order must be a list of [field, direction] pairs"}
	}
	var keys []orderKey
	for _, el := range list {
		pair, ok := el.([]any)
		if !ok || len(pair) == 0 {
			return nil, &searchError{"order must be a list of [field, direction] pairs"}
		}
		f, _ := pair[0].(string)
		desc := false
		if len(pair) > 1 {
			d, _ := pair[1].(string)
			desc = strings.EqualFold(d, "desc")
		}
		keys = append(keys, orderKey{f, desc})
	}
	return keys, nil
}

func matches(get func(string) (any, bool), q map[string]any) (bool, error) {
	for field, spec := range q {
		if controlKeys[field] {
			continue
		}
		ops, ok := spec.(map[string]any)
		if !ok {
			return false, &searchError{fmt.Sprintf("filter %q must be an object of operators", field)}
		}
		var val any
		switch field {
		case "verified":
			v, _ := get("verification")
			val = v == "verified"
		case "datacenter":
			v, _ := get("hosting_type")
			val = v == 1
		default:
			v, exists := get(field)
			if !exists && !filterOnly[field] {
				return false, &searchError{fmt.Sprintf("Unknown search field: %s", field)}
			}
			val = v
		}
		for op, want := range ops {
			ok, err := evalOp(field, val, op, want)
			if err != nil {
				return false, err
			}
			if !ok {
				return false, nil
			}
		}
	}
	return true, nil
}

func evalOp(field string, have any, op string, want any) (bool, error) {
	switch op {
	case "eq":
		return equal(field, have, want), nil
	case "neq":
		return !equal(field, have, want), nil
	case "in", "notin":
		list, ok := want.([]any)
		if !ok {
			return false, &searchError{fmt.Sprintf("%s %s needs a list", field, op)}
		}
		found := false
		for _, w := range list {
			if equal(field, have, w) {
				found = true
				break
			}
		}
		return found == (op == "in"), nil
	case "gt", "gte", "lt", "lte":
		if field == "driver_version" {
			if s, ok := have.(string); ok {
				have = driverInt(s)
			}
		}
		h, ok1 := toFloat(have)
		w, ok2 := toFloat(want)
		if !ok1 || !ok2 {
			return false, nil
		}
		switch op {
		case "gt":
			return h > w, nil
		case "gte":
			return h >= w, nil
		case "lt":
			return h < w, nil
		default:
			return h <= w, nil
		}
	}
	return false, &searchError{fmt.Sprintf("unknown operator %q on %s", op, field)}
}

// equal compares loosely, as the server coerces strings sent for numbers;
// a geolocation matches its full text or its two-letter country code.
func equal(field string, have, want any) bool {
	if want == nil {
		return have == nil
	}
	if hb, ok := have.(bool); ok {
		switch w := want.(type) {
		case bool:
			return hb == w
		case string:
			return strconv.FormatBool(hb) == strings.ToLower(w)
		}
		f, ok := toFloat(want)
		return ok && (f != 0) == hb
	}
	if field == "driver_version" {
		if s, ok := have.(string); ok {
			if f, ok := toFloat(want); ok {
				return float64(driverInt(s)) == f
			}
			return s == fmt.Sprint(want)
		}
	}
	if hs, ok := have.(string); ok {
		ws := fmt.Sprint(want)
		if field == "geolocation" {
			return strings.EqualFold(hs, ws) || (len(ws) == 2 && strings.HasSuffix(strings.ToUpper(hs), strings.ToUpper(ws)))
		}
		if field == "gpu_name" {
			return strings.EqualFold(hs, ws)
		}
		return hs == ws
	}
	h, ok1 := toFloat(have)
	w, ok2 := toFloat(want)
	return ok1 && ok2 && h == w
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

func compare(a, b any) int {
	fa, ok1 := toFloat(a)
	fb, ok2 := toFloat(b)
	if ok1 && ok2 {
		switch {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}
