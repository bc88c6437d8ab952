package lifecycle

import "github.com/vastrun/vastrun/internal/receipt"

// roundedAttempts copies attempts with their money rounded to a millionth
// of a dollar for the receipt: $/h computed from offer prices and disk
// carries float noise (0.17979722222222222) that is no part of the
// contract. The journal keeps the exact figures.
func roundedAttempts(in []*receipt.Attempt) []*receipt.Attempt {
	out := make([]*receipt.Attempt, len(in))
	for i, a := range in {
		c := *a
		c.DPHTotal, c.DPHBase, c.StorageDPH = round6(c.DPHTotal), round6(c.DPHBase), round6(c.StorageDPH)
		if c.Charged != nil {
			v := round6(*c.Charged)
			c.Charged = &v
		}
		out[i] = &c
	}
	return out
}
