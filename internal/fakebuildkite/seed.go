package fakebuildkite

import (
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// SeedWithMetaData creates a build directly (not through the API, so not
// counted against the rate limit) carrying meta, created age ago: a fleet
// of builds a restarted service must find.
func (s *Server) SeedWithMetaData(meta map[string]string, sc Script, age time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &build{number: s.next, created: s.now().Add(-age), script: sc,
		body: createBody{Commit: "HEAD", Branch: "main", Message: "seeded", MetaData: meta, Env: map[string]string{contract.EnvQueue: meta[contract.MetaDataQueue]}}}
	s.builds[b.number] = b
	s.next++
	return b.number
}
