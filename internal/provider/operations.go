package provider

import (
	"context"
	"errors"
	"time"
)

// ErrInvalidRequest marks a request refused before it was sent because
// the marketplace would refuse it (a value outside its documented range).
var ErrInvalidRequest = errors.New("invalid request")

// MaxBulkIDs is the most ids one bulk call carries: Vast caps a bulk state
// change at 64 ids (vast-api.md §12.1, "chunk length of N > 64"); its bulk
// destroy's cap is not documented, so callers hold it to the same.
const MaxBulkIDs = 64

// Operations are the instance routes beyond the lifecycle core: vastrun's
// workflows do not need them, but the official clients call them, so the
// real client speaks them and the conformance suite pins the simulator's
// answers through it.
type Operations interface {
	// StopInstances and StartInstances change every listed instance in one
	// call (PUT /api/v0/instances/).
	StopInstances(ctx context.Context, ids []InstanceID) error
	StartInstances(ctx context.Context, ids []InstanceID) error
	// DestroyInstances destroys every listed instance in one call (at
	// most MaxBulkIDs); ids none of which is the account's are not found.
	DestroyInstances(ctx context.Context, ids []InstanceID) error
	// RebootInstance restarts the container in place, keeping the GPU.
	RebootInstance(ctx context.Context, id InstanceID) error
	// Execute runs one constrained command (ls, rm, du) in the container
	// and returns its output.
	Execute(ctx context.Context, id InstanceID, command string) (string, error)
	// ChangeBid sets an interruptible instance's bid to price $/h; an
	// on-demand contract's price cannot change (400 invalid_args).
	ChangeBid(ctx context.Context, id InstanceID, price float64) error
	// InstanceSSHKeys lists the public keys attached to one instance.
	InstanceSSHKeys(ctx context.Context, id InstanceID) ([]string, error)
	// SpendRate is what the account's instances and volumes bill per hour
	// now (GET /api/v0/users/spend-rate/).
	SpendRate(ctx context.Context) (SpendRate, error)
	// MachineEarnings is the account's host earnings over [from, to]
	// (GET /api/v0/users/me/machine-earnings).
	MachineEarnings(ctx context.Context, from, to time.Time) (Earnings, error)
	// PendingPriceIncreases lists host price increases awaiting the
	// renter's answer (GET /api/v0/instances/pending-price-increases/).
	PendingPriceIncreases(ctx context.Context) ([]PriceIncrease, error)
	// AcceptPriceIncrease and RejectPriceIncrease answer one pending
	// increase by its id; one already answered, or gone, is not found
	// (404 no_pending_price_increase).
	AcceptPriceIncrease(ctx context.Context, id int64) error
	RejectPriceIncrease(ctx context.Context, id int64) error
	Deposit(ctx context.Context, id InstanceID) (Deposit, error)
	// InstanceFilters lists, per filterable column, the distinct values
	// the account's instances have.
	InstanceFilters(ctx context.Context) (map[string][]string, error)
	GPUNames(ctx context.Context) ([]string, error)
	// LegacyInvoices is the 2024 CLI's invoice view in [from, to].
	LegacyInvoices(ctx context.Context, from, to time.Time) ([]LegacyInvoice, error)
	// InvoiceRows searches invoice records by their when time.
	InvoiceRows(ctx context.Context, from, to time.Time) ([]InvoiceRow, error)
	// CopyDirect copies srcPath of one instance to dstPath of another.
	CopyDirect(ctx context.Context, src, dst InstanceID, srcPath, dstPath string) error
	// RsyncTarget says where to run rsync over SSH to reach path on id.
	RsyncTarget(ctx context.Context, id InstanceID, path string, upload bool) (SSHEndpoint, error)
	CloudIntegrations(ctx context.Context) ([]CloudIntegration, error)
	// Templates lists the template catalog (GET /api/v0/template/).
	Templates(ctx context.Context) ([]Template, error)
	// CloudCopy copies between an instance and a cloud integration and
	// returns the transfer log.
	CloudCopy(ctx context.Context, req CloudCopyRequest) (string, error)
}

// SpendRate is the account's burn rate in $/h.
type SpendRate struct {
	GPU, ContainerStorage, VolumeStorage float64
	HasActiveResources                   bool
}

// Earnings are a host account's earnings in $ over a range of days.
type Earnings struct {
	GPU, Storage, BandwidthUp, BandwidthDown float64
	Machines                                 int // machines with earnings in the range
}

// PriceIncrease is a host's request to raise a contract's prices. Until
// the renter accepts, the contract is not extended past ContractEnd at the
// old price (vast-api.md §12.2): rejected or unanswered, it ends there.
type PriceIncrease struct {
	ID                  int64
	ContractID          InstanceID
	OldGPUCostPerSec    float64
	NewGPUCostPerSec    float64
	OldDiskCostPerSec   float64 // disk_ram_costpersec
	NewDiskCostPerSec   float64
	ContractEnd, AskEnd time.Time
	CreatedAt           time.Time
}

// NewGPUDPH and OldGPUDPH are the GPU prices in $/h.
func (p PriceIncrease) NewGPUDPH() float64 { return p.NewGPUCostPerSec * 3600 }
func (p PriceIncrease) OldGPUDPH() float64 { return p.OldGPUCostPerSec * 3600 }

// PriceIncreases is a Market's optional price-increase routes (the real
// client and the retry decorator have them): the lifecycle finds them by
// type assertion, so a decorator of Market must offer them exactly when
// what it wraps does, or the run cannot answer a host's increase.
type PriceIncreases interface {
	PendingPriceIncreases(ctx context.Context) ([]PriceIncrease, error)
	AcceptPriceIncrease(ctx context.Context, id int64) error
	RejectPriceIncrease(ctx context.Context, id int64) error
}

// Deposit is an instance's reserved-pricing deposit.
type Deposit struct {
	Refundable, TotalDiscount float64
	DiscountMonths            int
}

// LegacyInvoice is one row of GET /api/v0/users/me/invoices.
type LegacyInvoice struct {
	Type        string // "charge" or "payment"
	InstanceID  InstanceID
	Description string
	Amount      float64
	When        time.Time
}

// InvoiceRow is one record of GET /api/v0/invoices.
type InvoiceRow struct {
	ID          int64
	When        time.Time
	AmountCents int64
	IsCredit    bool
	Service     string
}

// CloudIntegration is a cloud storage connection of the account.
type CloudIntegration struct {
	ID        int64
	Name      string
	CloudType string
}

// CloudCopyRequest copies Src to Dst; ToCloud says the direction.
type CloudCopyRequest struct {
	Instance    InstanceID
	Integration int64
	Src, Dst    string
	ToCloud     bool
}

// Template is a launch recipe a create can name by HashID.
type Template struct {
	ID     int64
	HashID string
	Name   string
	Image  string
}
