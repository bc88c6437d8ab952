package sim

import (
	"fmt"
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

// search evaluates a wire query over the catalog.
func search(offers []*offer, q map[string]any) ([]map[string]any, error) {
	storage := 8.0 // the server's default when the client sends none
	if v, ok := q["allocated_storage"]; ok {
		f, ok := toFloat(v)
		if !ok || f < 0 {
			return nil, &searchError{"allocated_storage must be a number"}
		}
		storage = f
	}
	bid := false
	switch t := q["type"].(type) {
	case nil:
	case string:
		switch t {
		case "on-demand", "ondemand", "reserved":
		case "bid", "interruptible":
			bid = true
		default:
			return nil, &searchError{fmt.Sprintf("invalid type %q", t)}
		}
	default:
		return nil, &searchError{"type must be a string"}
	}
	limit := 64
	if v, ok := q["limit"]; ok {
		f, ok := toFloat(v)
		if !ok {
			return nil, &searchError{"limit must be a number"}
		}
		limit = int(f)
	}
	var out []map[string]any
	for _, o := range offers {
		row := offerRow(o, storage, bid)
		match, err := matches(row, q)
		if err != nil {
			return nil, err
		}
		if match {
			out = append(out, row)
		}
	}
	order, err := parseOrder(q["order"])
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		for _, o := range order {
			c := compare(out[i][o.field], out[j][o.field])
			if c == 0 {
				continue
			}
			return (c < 0) != o.desc
		}
		return false
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
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

func matches(row map[string]any, q map[string]any) (bool, error) {
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
			val = row["verification"] == "verified"
		case "datacenter":
			val = row["hosting_type"] == 1
		default:
			v, exists := row[field]
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
