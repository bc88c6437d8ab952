package vast

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// The wire types below decode what Vast sends, tolerating the shapes seen in
// the wild: numbers sent as strings, nulls where numbers are documented, and
// the ports map typed as an array in the OpenAPI file.

// num decodes a JSON number, a numeric string, a bool (0/1) or null.
type num float64

func (n *num) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*n = 0
		return nil
	case string(b) == "true":
		*n = 1
		return nil
	case string(b) == "false":
		*n = 0
		return nil
	case b[0] == '"':
		s, ok := plainString(b)
		if !ok {
			if err := json.Unmarshal(b, &s); err != nil {
				return err
			}
		}
		s = strings.TrimSpace(s)
		if s == "" {
			*n = 0
			return nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			*n = 0 // an unparseable decorative string must not fail the whole payload
			return nil
		}
		*n = num(f)
		return nil
	}
	if isNumber(b) {
		if f, err := strconv.ParseFloat(string(b), 64); err == nil {
			*n = num(f)
			return nil
		}
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = num(f)
	return nil
}

// plainString is a JSON string literal's value when the literal is
// printable ASCII without escapes (most of what Vast sends): the bytes
// between the quotes, as json.Unmarshal would give them. A decoder calls
// UnmarshalJSON once per field, and a nested json.Unmarshal for each (a
// validating pass, then a decode) was most of a listing page's decode.
// ok is false for anything else, which json.Unmarshal then reads.
func plainString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	in := b[1 : len(b)-1]
	for _, c := range in {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(in), true
}

// isNumber reports whether b is a JSON number (RFC 8259 §6):
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. strconv.ParseFloat
// accepts more (hex, "Inf", "1."), so it reads only what this admits.
func isNumber(b []byte) bool {
	digits := func(i int) int { // the index after a run of digits from i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(b)
}

// str decodes a string, a number (as its text) or null.
type str string

func (s *str) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		*s = ""
		return nil
	}
	if b[0] == '"' {
		v, ok := plainString(b)
		if !ok {
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
		}
		*s = str(strings.TrimSpace(v))
		return nil
	}
	*s = str(string(b))
	return nil
}

// flag decodes true/false, 0/1, "true"/"false" or null.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	switch strings.Trim(strings.TrimSpace(string(b)), `"`) {
	case "true", "True", "1":
		*f = true
	default:
		*f = false
	}
	return nil
}

type wireOffer struct {
	ID               num    `json:"id"`
	MachineID        num    `json:"machine_id"`
	HostID           num    `json:"host_id"`
	GPUName          str    `json:"gpu_name"`
	NumGPUs          num    `json:"num_gpus"`
	GPURAM           num    `json:"gpu_ram"`
	GPUTotalRAM      num    `json:"gpu_total_ram"`
	ComputeCap       num    `json:"compute_cap"`
	CUDAMaxGood      num    `json:"cuda_max_good"`
	DriverVersion    str    `json:"driver_version"`
	CPUCores         num    `json:"cpu_cores"`
	CPURAM           num    `json:"cpu_ram"`
	DiskSpace        num    `json:"disk_space"`
	InetUp           num    `json:"inet_up"`
	InetDown         num    `json:"inet_down"`
	Reliability      num    `json:"reliability"`
	Reliability2     num    `json:"reliability2"`
	Verification     str    `json:"verification"`
	HostingType      num    `json:"hosting_type"`
	Geolocation      str    `json:"geolocation"`
	DirectPortCount  num    `json:"direct_port_count"`
	Rentable         flag   `json:"rentable"`
	Score            num    `json:"score"`
	DLPerf           num    `json:"dlperf"`
	DPHBase          num    `json:"dph_base"`
	DPHTotal         num    `json:"dph_total"`
	StorageCost      num    `json:"storage_cost"`
	StorageTotalCost num    `json:"storage_total_cost"`
	InetUpCost       num    `json:"inet_up_cost"`
	InetDownCost     num    `json:"inet_down_cost"`
	MinBid           num    `json:"min_bid"`
	IsBid            flag   `json:"is_bid"`
	EndDate          num    `json:"end_date"`
	Search           *price `json:"search"`
}

type price struct {
	GPUCostPerHour num `json:"gpuCostPerHour"`
	DiskHour       num `json:"diskHour"`
	TotalHour      num `json:"totalHour"`
}

func (w wireOffer) domain() provider.Offer {
	rel := float64(w.Reliability)
	if rel == 0 {
		rel = float64(w.Reliability2)
	}
	o := provider.Offer{
		ID: provider.OfferID(w.ID), MachineID: int64(w.MachineID), HostID: int64(w.HostID),
		GPUName: string(w.GPUName), NumGPUs: int(w.NumGPUs), GPURAMMB: float64(w.GPURAM),
		GPUTotalRAMMB: float64(w.GPUTotalRAM), ComputeCap: int(w.ComputeCap), CUDAMax: float64(w.CUDAMaxGood),
		DriverVersion: string(w.DriverVersion), CPUCores: float64(w.CPUCores), CPURAMMB: float64(w.CPURAM),
		DiskSpaceGB: float64(w.DiskSpace), InetUpMbps: float64(w.InetUp), InetDownMbps: float64(w.InetDown),
		Reliability: rel, Verification: string(w.Verification), HostingType: int(w.HostingType),
		Geolocation: string(w.Geolocation), DirectPorts: int(w.DirectPortCount), Rentable: bool(w.Rentable),
		Score: float64(w.Score), DLPerf: float64(w.DLPerf), DPHBase: float64(w.DPHBase),
		DPHTotal: float64(w.DPHTotal), StorageCostMonth: float64(w.StorageCost),
		StorageTotalCost: float64(w.StorageTotalCost), InetUpCostGB: float64(w.InetUpCost),
		InetDownCostGB: float64(w.InetDownCost), MinBid: float64(w.MinBid), IsBid: bool(w.IsBid),
		HostEnd: unixTime(w.EndDate),
	}
	if o.GPUTotalRAMMB == 0 {
		o.GPUTotalRAMMB = o.GPURAMMB * float64(o.NumGPUs)
	}
	if o.DPHTotal == 0 && w.Search != nil {
		o.DPHTotal = float64(w.Search.TotalHour)
	}
	return o
}

type wireInstance struct {
	ID               num             `json:"id"`
	MachineID        num             `json:"machine_id"`
	HostID           num             `json:"host_id"`
	Label            str             `json:"label"`
	ActualStatus     str             `json:"actual_status"`
	IntendedStatus   str             `json:"intended_status"`
	CurState         str             `json:"cur_state"`
	NextState        str             `json:"next_state"`
	StatusMsg        str             `json:"status_msg"`
	ImageUUID        str             `json:"image_uuid"`
	GPUName          str             `json:"gpu_name"`
	NumGPUs          num             `json:"num_gpus"`
	GPURAM           num             `json:"gpu_ram"`
	CUDAMaxGood      num             `json:"cuda_max_good"`
	DriverVersion    str             `json:"driver_version"`
	DiskSpace        num             `json:"disk_space"`
	Geolocation      str             `json:"geolocation"`
	SSHHost          str             `json:"ssh_host"`
	SSHPort          num             `json:"ssh_port"`
	PublicIPAddr     str             `json:"public_ipaddr"`
	Ports            json.RawMessage `json:"ports"`
	DPHBase          num             `json:"dph_base"`
	DPHTotal         num             `json:"dph_total"`
	StorageTotalCost num             `json:"storage_total_cost"`
	IsBid            flag            `json:"is_bid"`
	MinBid           num             `json:"min_bid"`
	StartDate        num             `json:"start_date"`
	EndDate          num             `json:"end_date"`
}

func (w wireInstance) domain() provider.Instance {
	inst := provider.Instance{
		ID: provider.InstanceID(w.ID), MachineID: int64(w.MachineID), HostID: int64(w.HostID),
		Label: string(w.Label), ActualStatus: string(w.ActualStatus), IntendedStatus: string(w.IntendedStatus),
		CurState: string(w.CurState), NextState: string(w.NextState), StatusMsg: string(w.StatusMsg),
		ImageUUID: string(w.ImageUUID), GPUName: string(w.GPUName), NumGPUs: int(w.NumGPUs),
		GPURAMMB: float64(w.GPURAM), CUDAMax: float64(w.CUDAMaxGood), DriverVersion: string(w.DriverVersion),
		DiskSpaceGB: float64(w.DiskSpace), Geolocation: string(w.Geolocation), SSHHost: string(w.SSHHost),
		SSHPort: int(w.SSHPort), PublicIP: string(w.PublicIPAddr), Ports: decodePorts(w.Ports),
		DPHBase: float64(w.DPHBase), DPHTotal: float64(w.DPHTotal), StorageTotal: float64(w.StorageTotalCost),
		IsBid: bool(w.IsBid), MinBid: float64(w.MinBid),
	}
	if inst.IsBid {
		// Vast prices a bid instance's dph_total from the bid (§4.2): what is
		// left after storage is the bid.
		inst.BidDPH = math.Round((inst.DPHTotal-inst.StorageTotal)*1e6) / 1e6
	}
	if w.StartDate > 0 {
		sec, frac := math.Modf(float64(w.StartDate))
		inst.StartDate = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	}
	inst.EndDate = unixTime(w.EndDate)
	return inst
}

// decodePorts reads the docker-style map {"22/tcp": [{"HostIp","HostPort"}]}.
// Any other shape (null, the OpenAPI's array of ints) yields no mappings.
func decodePorts(raw json.RawMessage) map[string][]provider.PortBinding {
	var m map[string][]struct {
		HostIP   str `json:"HostIp"`
		HostPort num `json:"HostPort"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := make(map[string][]provider.PortBinding, len(m))
	for k, bs := range m {
		for _, b := range bs {
			out[k] = append(out[k], provider.PortBinding{HostIP: string(b.HostIP), HostPort: int(b.HostPort)})
		}
	}
	return out
}

// envelope captures the fields of every error shape Vast uses.
type envelope struct {
	Success     *bool  `json:"success"`
	Error       any    `json:"error"`
	Msg         string `json:"msg"`
	Message     string `json:"message"`
	Detail      any    `json:"detail"`
	NewContract num    `json:"new_contract"`
}

// decodeAPIError builds an *APIError from any error body: the usual
// {success,error,msg}, {message}, {detail}, or plain text (some 429s).
func decodeAPIError(op string, status int, body []byte) *provider.APIError {
	e := &provider.APIError{Op: op, Status: status}
	var env envelope
	if json.Unmarshal(body, &env) == nil {
		if s, ok := env.Error.(string); ok {
			e.Code = s
		}
		switch {
		case env.Msg != "":
			e.Msg = env.Msg
		case env.Message != "":
			e.Msg = env.Message
		case env.Detail != nil:
			if s, ok := env.Detail.(string); ok {
				e.Msg = s
			} else if b, err := json.Marshal(env.Detail); err == nil {
				e.Msg = string(b)
			}
		}
		if e.Msg == "" && e.Code == "" {
			if s, ok := env.Error.(string); ok {
				e.Msg = s
			}
		}
		return e
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	e.Msg = text
	return e
}
