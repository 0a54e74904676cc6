package dockerargv

// The CPU set readers, for the external tests.
var (
	ParseCPUSet = parseCPUSet
	PickCPUs    = pickCPUs
)
