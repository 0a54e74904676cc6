package serve

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// MetaDataInstance names the process that created a build: a random id
// each kbgen serve draws at its start. Two services with one --name on
// one pipeline would each take the other's builds for its own: adopt
// them at a restart and cancel them as orphans, answer a run id the other
// created. Buildkite keeps no lock a service could hold, so the second
// one is told by its builds: a build of this service's name, created
// after this process started, that this process did not create.
const MetaDataInstance = "kbgen_instance"

func newInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// twin is what the service knows of another service of its name.
type twin struct {
	instance    string
	build       int
	since, last time.Time
}

// TwinMemory is how long a sighting of another service of the same name
// counts: a rolling update that ran the old and the new service side by
// side for a moment is reported while it lasts, not for ever after.
const TwinMemory = 10 * time.Minute

// noteForeign is called for a build of the service's name that it does
// not know. One created since this process started by another instance
// is a second service of the same name: the health check fails while it
// is seen (503, Health.Conflict; TwinMemory after its last build) and the
// log says so, loudly, at each new sighting. Builds of an earlier life of
// the service (created before this start) are not a twin's.
func (s *Service) noteForeign(b *client.Build) {
	inst := b.MetaData[MetaDataInstance]
	if inst == "" || inst == s.instance || b.CreatedAt.Before(s.started) {
		return
	}
	now := s.cfg.Now()
	s.downMu.Lock()
	fresh := s.twin == nil || s.twin.instance != inst || now.Sub(s.twin.last) > TwinMemory
	if fresh {
		s.twin = &twin{instance: inst, since: now}
	}
	s.twin.build, s.twin.last = b.Number, now
	s.downMu.Unlock()
	if fresh {
		s.logf("WARNING: %s", s.Conflict())
	}
}

// Conflict says why this service is not alone under its name, or "".
func (s *Service) Conflict() string {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.twin == nil || s.cfg.Now().Sub(s.twin.last) > TwinMemory {
		return ""
	}
	return fmt.Sprintf("another kbgen serve named %q (instance %s, this one is %s) created build %d on this pipeline, last seen %s; two services on one pipeline take each other's builds for their own (a restart adopts and cancels them): stop one, or give each its own --name",
		s.cfg.Name, s.twin.instance, s.instance, s.twin.build, s.twin.last.UTC().Format(time.RFC3339))
}

// twinInstance is the other service's instance, "" while none is known.
func (s *Service) twinInstance() string {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.twin == nil || s.cfg.Now().Sub(s.twin.last) > TwinMemory {
		return ""
	}
	return s.twin.instance
}
