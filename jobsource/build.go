package jobsource

import (
	"io"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// FromBuild is the job of a build step (kbgen generate and kbgen run):
// the payload or plain JSON config in file ("-" reads stdin), or, when
// file is "", the KERNELBOT_PAYLOAD* variables lookup finds in the build
// env. An unreadable file is a *UsageError; anything else wrong is a
// payload job error.
func FromBuild(file string, stdin io.Reader, lookup contract.Lookup) (*payload.Input, error) {
	if file != "" {
		data, err := ReadFile(file, stdin)
		if err != nil {
			return nil, err
		}
		return payload.ParseInput(data)
	}
	encoded, err := payload.JoinEnv(lookup)
	if err != nil {
		return nil, err
	}
	return payload.ParseInput([]byte(encoded))
}
