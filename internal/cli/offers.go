package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/text"
)

// OffersOptions are the inputs of `vastrun offers`.
type OffersOptions struct {
	IO         *IOStreams
	Market     func(context.Context) (provider.Marketplace, error)
	Simulated  func() bool
	JSON       bool
	Query      string
	Order      string
	Limit      int
	Type       string
	DiskGB     float64
	NoDefaults bool
	PolicyFile string
	Explain    bool
	f          *Factory
}

// NewCmdOffers builds `vastrun offers`; runF replaces the run in tests.
func NewCmdOffers(f *Factory, runF func(context.Context, *OffersOptions) error) *cobra.Command {
	opts := &OffersOptions{f: f, IO: f.IO, Market: f.Marketplace, Simulated: f.Simulated}
	cmd := &cobra.Command{
		Use:   "offers [QUERY...]",
		Short: "Search rentable GPU offers",
		Long: `Search rentable offers with the official Vast CLI's query language.

A query is space-separated comparisons, FIELD OP VALUE: operators = != < <= > >=
and the words eq neq gt gte lt lte in notin; lists are [a,b]; underscores in
values become spaces (RTX_4090 is "RTX 4090"); gpu_ram and cpu_ram are in GB.
Unless --no-default is given, only verified, rentable, unrented offers are
searched; write verified=any to drop one of those defaults.

Prices ($/HR) include storage for --disk GB, as Vast bills it.`,
		Example: `  vastrun offers --sim 'gpu_name=RTX_4090 num_gpus=1'
  vastrun offers 'num_gpus>=2 gpu_ram>=40 reliability>0.98 geolocation in [US,CA]' -o dph_total
  vastrun offers 'gpu_name in [A100_SXM4,H100_SXM] dph<3' --limit 5 --json
  vastrun offers --policy vastrun.yaml --explain`,
		RunE: runCmd(opts, func(_ *cobra.Command, args []string) error {
			opts.JSON = f.JSON
			opts.Query = strings.Join(args, " ")
			if opts.Limit <= 0 {
				return &UsageError{Err: fmt.Errorf("--limit must be positive, got %d", opts.Limit), Hint: "ask for at least one offer, e.g. --limit 20 (the default)"}
			}
			if err := checkOfferType(opts.Type); err != nil {
				return err
			}
			if opts.DiskGB <= 0 {
				return &UsageError{Err: fmt.Errorf("--disk must be positive, got %v", opts.DiskGB), Hint: "give the disk the run needs in GB, e.g. --disk 10 (the default)"}
			}
			if opts.PolicyFile != "" && opts.Query != "" {
				return &UsageError{Err: fmt.Errorf("give either a query or --policy, not both"), Hint: "--policy judges offers by the gpu: section of the file; put extra constraints there"}
			}
			if opts.Explain && opts.PolicyFile == "" {
				return &UsageError{Err: fmt.Errorf("--explain needs --policy FILE"), Hint: "for example: vastrun offers --policy vastrun.yaml --explain"}
			}
			return nil
		}, runF, runOffers),
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Order, "order", "o", "score-", "sort fields, comma-separated; a trailing - sorts descending (e.g. dph_total or num_gpus-,dph_total)")
	fl.IntVar(&opts.Limit, "limit", 20, "maximum number of offers")
	fl.StringVar(&opts.Type, "type", "on-demand", "on-demand, interruptible (bid) or reserved")
	fl.Float64Var(&opts.DiskGB, "disk", 10, "disk GB to price storage for")
	fl.StringVar(&opts.PolicyFile, "policy", "", "judge offers against the gpu: policy in this vastrun.yaml")
	fl.BoolVar(&opts.Explain, "explain", false, "with --policy: show why every offer is chosen or rejected")
	fl.BoolVar(&opts.NoDefaults, "no-default", false, "do not add the default filters (verified, rentable, unrented, not external)")
	return cmd
}

// offerJSON is one offer in vastrun's own --json schema (vastrun.offers/v1).
type offerJSON struct {
	ID           provider.OfferID `json:"id"`
	MachineID    int64            `json:"machine_id"`
	GPUName      string           `json:"gpu_name"`
	NumGPUs      int              `json:"num_gpus"`
	GPURAMMB     float64          `json:"gpu_ram_mb"`
	DPHTotal     float64          `json:"dph_total"`
	DPHBase      float64          `json:"dph_base"`
	StorageDPH   float64          `json:"storage_dph"`
	MinBid       float64          `json:"min_bid"`
	Reliability  float64          `json:"reliability"`
	Verified     bool             `json:"verified"`
	Geolocation  string           `json:"geolocation"`
	Country      string           `json:"country"`
	CUDA         float64          `json:"cuda_max"`
	Driver       string           `json:"driver_version"`
	InetDownMbps float64          `json:"inet_down"`
	DiskSpaceGB  float64          `json:"disk_space_gb"`
}

type offersJSON struct {
	Schema    string         `json:"schema"`
	Simulated bool           `json:"simulated"`
	DiskGB    float64        `json:"disk_gb"`
	Query     provider.Query `json:"query"`
	Offers    []offerJSON    `json:"offers"`
}

func runOffers(ctx context.Context, opts *OffersOptions) error {
	if opts.PolicyFile != "" {
		return explainPolicy(ctx, opts.f, opts.PolicyFile, 500)
	}
	q, err := vast.ParseQuery(opts.Query, vast.QueryOptions{
		Order: opts.Order, Type: opts.Type, Limit: opts.Limit, StorageGB: opts.DiskGB, NoDefaults: opts.NoDefaults,
	})
	if err != nil {
		return err
	}
	m, err := opts.Market(ctx)
	if err != nil {
		return err
	}
	offers, err := m.SearchOffers(ctx, q)
	if err != nil {
		return err
	}
	if opts.JSON {
		doc := offersJSON{Schema: "vastrun.offers/v1", Simulated: opts.Simulated(), DiskGB: opts.DiskGB, Query: q, Offers: []offerJSON{}}
		for _, o := range offers {
			doc.Offers = append(doc.Offers, offerJSON{
				ID: o.ID, MachineID: o.MachineID, GPUName: o.GPUName, NumGPUs: o.NumGPUs, GPURAMMB: o.GPURAMMB,
				DPHTotal: round6(o.DPHTotal), DPHBase: round6(o.DPHBase), StorageDPH: round6(o.StorageTotalCost), MinBid: round6(o.MinBid),
				Reliability: round6(o.Reliability), Verified: o.Verified(), Geolocation: o.Geolocation, Country: o.CountryCode(),
				CUDA: o.CUDAMax, Driver: o.DriverVersion, InetDownMbps: o.InetDownMbps, DiskSpaceGB: o.DiskSpaceGB,
			})
		}
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	if len(offers) == 0 {
		opts.IO.Infof("no offers match %q", opts.Query)
		return nil
	}
	if opts.Simulated() {
		opts.IO.Infof("simulated offers: prices and machines are not real")
	}
	var tw strings.Builder
	fmt.Fprintln(&tw, "ID\tGPU\tVRAM\t$/HR\tRELIABILITY\tLOCATION\tCUDA\tVERIFIED")
	for _, o := range offers {
		fmt.Fprintf(&tw, "%d\t%s x%d\t%.0f GB\t%.4f\t%.4f\t%s\t%.1f\t%s\n",
			o.ID, o.GPUName, o.NumGPUs, o.GPURAMMB/1024, o.DPHTotal, o.Reliability, o.Geolocation, o.CUDAMax, yesNo(o.Verified()))
	}
	if err := writeTable(opts.IO.Out, tw.String()); err != nil {
		return err
	}
	opts.IO.Infof("%d offers; $/HR includes storage for %g GB of disk", len(offers), opts.DiskGB)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// offerTypes are --type's values (the query parser's, with its aliases).
var offerTypes = []string{"on-demand", "ondemand", "interruptible", "bid", "reserved"}

// checkOfferType refuses a --type Vast has no market for as a flag
// mistake, naming the market the word usually means.
func checkOfferType(t string) error {
	if t == "" || slices.Contains(offerTypes, strings.ToLower(t)) {
		return nil
	}
	hint := "write --type on-demand (the default), interruptible (a bid; alias bid) or reserved"
	switch strings.ToLower(t) {
	case "spot", "preemptible", "interruptable":
		hint = "Vast's spot market is --type interruptible (a bid: the instance stops when outbid); the others are on-demand and reserved"
	default:
		if s := text.Suggest(t, []string{"on-demand", "interruptible", "reserved"}, 1); len(s) > 0 {
			hint = fmt.Sprintf("did you mean --type %s? (on-demand, interruptible or reserved)", s[0])
		}
	}
	return &UsageError{Err: fmt.Errorf("--type %s: no such offer type", t), Hint: hint}
}
