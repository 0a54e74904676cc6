package noise

import "github.com/gpu-mode/kbgen/internal/noisepolicy"

// Policy is the vendor's noise policy, defined in internal/noisepolicy
// (so the registry need not link the noise record); the record judges
// and retries by it.
type Policy = noisepolicy.Policy
