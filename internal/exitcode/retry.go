package exitcode

import "slices"

// InfraRetryCodes are the exit statuses that are the infrastructure's
// fault, the ones the eval step's retry rule runs again on another agent
// (steps.InfraRetry): a lost agent (-1), agent or container-engine
// failure (255), and the runner's "retry elsewhere" (75: no GPU, CUDA
// init failure, disk full). The sandbox never passes one on from a
// container whose result it could not verify.
var InfraRetryCodes = []int{AgentLost, AgentInfra, TempFail}

// IsInfraRetry reports whether code is one of InfraRetryCodes.
func IsInfraRetry(code int) bool { return slices.Contains(InfraRetryCodes, code) }
