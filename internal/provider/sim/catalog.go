package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// gpuModel is one GPU type the catalog can offer.
type gpuModel struct {
	name     string  // Vast's name, with spaces
	smiName  string  // what nvidia-smi prints
	vramMB   float64 // per GPU, as Vast reports it
	vramMiB  int     // as nvidia-smi reports it
	baseDPH  float64 // typical $/h per GPU
	compCap  int     // ×100
	tflops   float64
	dlperf   float64
	gpuArch  string
	maxPower int
}

var gpuModels = []gpuModel{
	{"RTX 4090", "NVIDIA GeForce RTX 4090", 24564, 24564, 0.35, 890, 82.6, 31.9, "nvidia", 450},
	{"RTX 3090", "NVIDIA GeForce RTX 3090", 24576, 24576, 0.20, 860, 35.6, 18.2, "nvidia", 350},
	{"RTX 3060", "NVIDIA GeForce RTX 3060", 12288, 12288, 0.06, 860, 12.7, 6.1, "nvidia", 170},
	{"RTX A6000", "NVIDIA RTX A6000", 49140, 49140, 0.45, 860, 38.7, 21.0, "nvidia", 300},
	{"L40S", "NVIDIA L40S", 46068, 46068, 0.75, 890, 91.6, 34.5, "nvidia", 350},
	{"A100 PCIE", "NVIDIA A100-PCIE-40GB", 40960, 40960, 0.80, 800, 19.5, 28.9, "nvidia", 250},
	{"A100 SXM4", "NVIDIA A100-SXM4-80GB", 81920, 81920, 1.10, 800, 19.5, 33.4, "nvidia", 400},
	{"H100 SXM", "NVIDIA H100 80GB HBM3", 81559, 81559, 2.20, 900, 66.9, 71.2, "nvidia", 700},
	{"H100 NVL", "NVIDIA H100 NVL", 95830, 95830, 2.40, 900, 60.0, 68.0, "nvidia", 400},
	{"H200", "NVIDIA H200", 143771, 143771, 3.00, 900, 66.9, 80.1, "nvidia", 700},
	{"Tesla T4", "Tesla T4", 15360, 15360, 0.10, 750, 8.1, 3.9, "nvidia", 70},
	{"Tesla V100", "Tesla V100-SXM2-16GB", 16384, 16160, 0.18, 700, 15.7, 11.3, "nvidia", 300},
}

var geolocations = []string{
	"Oregon, US", "Texas, US", "Virginia, US", "California, US", "Quebec, CA", "Ontario, CA",
	"Finland, FI", "Germany, DE", "Netherlands, NL", "Sweden, SE", "Poland, PL", "Czechia, CZ",
	"Japan, JP", "Taiwan, TW", "Singapore, SG", "Australia, AU", "Brazil, BR", "US", "GB",
}

var drivers = []struct {
	version string
	cuda    float64
}{
	{"525.147.05", 12.0}, {"535.183.01", 12.2}, {"545.29.06", 12.3},
	{"550.127.05", 12.4}, {"560.35.03", 12.6}, {"570.133.07", 12.8},
}

// offer is one rentable machine slice in the catalog.
type offer struct {
	ID           int64
	MachineID    int64
	HostID       int64
	Model        gpuModel
	NumGPUs      int
	GPUFrac      float64
	CPUName      string
	CPUCores     int
	CPUEffective float64
	CPURAM       float64
	CPUGHz       float64
	DiskSpace    float64
	DiskBW       float64
	InetUp       float64
	InetDown     float64
	InetCost     float64 // $/GB both directions
	DirectPorts  int
	PCIGen       int
	DPHBase      float64
	StorageCost  float64 // $/GB/month
	MinBid       float64 // the clearing price now (see market.go)
	BaseBid      float64 // the catalog's min_bid, where the market walks from
	Reliability  float64
	Verification string
	HostingType  int
	Geolocation  string
	PublicIP     string
	Driver       string
	CUDA         float64
	StaticIP     bool
	StartDate    float64
	EndDate      float64
	RentedBy     int64 // instance id, 0 when free
}

// storageDPH is the $/h of storage for gb GB: storage_cost × GB / 720.
func (o *offer) storageDPH(gb float64) float64 { return o.StorageCost * gb / 720 }

// generateCatalog makes n offers from seed. The first offers are one
// single-GPU, verified, reliable offer per model, so that every model can
// always be rented in tests and demos.
func generateCatalog(seed uint64, n int, now float64) []*offer {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if n < len(gpuModels) {
		n = len(gpuModels)
	}
	out := make([]*offer, 0, n)
	for i := 0; i < n; i++ {
		m := gpuModels[i%len(gpuModels)]
		guaranteed := i < len(gpuModels)
		if !guaranteed {
			m = gpuModels[r.IntN(len(gpuModels))]
		}
		num := []int{1, 1, 1, 2, 2, 4, 8}[r.IntN(7)]
		if guaranteed {
			num = 1
		}
		machineGPUs := num * []int{1, 2, 4}[r.IntN(3)]
		if machineGPUs > 8 {
			machineGPUs = 8
		}
		d := drivers[r.IntN(len(drivers))]
		if guaranteed {
			d = drivers[len(drivers)-1]
		}
		price := round(m.baseDPH*float64(num)*(0.8+0.5*r.Float64()), 4)
		rel := round(0.90+0.099*r.Float64(), 4)
		ver := "verified"
		if !guaranteed && r.Float64() < 0.2 {
			ver = []string{"unverified", "deverified"}[r.IntN(2)]
		}
		if guaranteed {
			rel = round(0.99+0.009*r.Float64(), 4)
		}
		cores := []int{16, 32, 64, 128}[r.IntN(4)]
		o := &offer{
			ID:           int64(24_800_000 + i*7 + r.IntN(7)),
			MachineID:    int64(31_000 + i*3 + r.IntN(3)),
			HostID:       int64(200_000 + r.IntN(20_000)),
			Model:        m,
			NumGPUs:      num,
			GPUFrac:      round(float64(num)/float64(machineGPUs), 4),
			CPUName:      []string{"AMD EPYC 7543 32-Core Processor", "AMD EPYC 9654 96-Core Processor", "Intel Xeon Gold 6338", "AMD Ryzen 9 7950X"}[r.IntN(4)],
			CPUCores:     cores,
			CPUEffective: round(float64(cores)*float64(num)/float64(machineGPUs), 1),
			CPURAM:       float64([]int{64, 128, 256, 512}[r.IntN(4)] * 1000),
			CPUGHz:       round(2.0+1.5*r.Float64(), 1),
			DiskSpace:    round(50+float64(r.IntN(2000)), 1),
			DiskBW:       round(500+3500*r.Float64(), 1),
			InetUp:       round(100+4000*r.Float64(), 1),
			InetDown:     round(100+5000*r.Float64(), 1),
			InetCost:     round(0.001+0.01*r.Float64(), 4),
			DirectPorts:  []int{0, 20, 99, 199}[r.IntN(4)],
			PCIGen:       []int{3, 4, 5}[r.IntN(3)],
			DPHBase:      price,
			StorageCost:  round(0.05+0.25*r.Float64(), 4),
			MinBid:       round(price*(0.45+0.25*r.Float64()), 4),
			Reliability:  rel,
			Verification: ver,
			HostingType:  map[bool]int{true: 1, false: 0}[r.Float64() < 0.4],
			Geolocation:  geolocations[r.IntN(len(geolocations))],
			PublicIP:     fmt.Sprintf("198.51.100.%d", 1+r.IntN(250)),
			Driver:       d.version,
			CUDA:         d.cuda,
			StaticIP:     r.Float64() < 0.6,
			StartDate:    now - float64(r.IntN(30*86400)),
			EndDate:      now + float64(30*86400+r.IntN(120*86400)),
		}
		o.BaseBid = o.MinBid
		if guaranteed {
			o.DirectPorts = 99
			o.Geolocation = []string{"Oregon, US", "Quebec, CA", "Germany, DE"}[i%3]
		}
		out = append(out, o)
	}
	return out
}

func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}
