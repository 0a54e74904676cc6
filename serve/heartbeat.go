package serve

import (
	"encoding/json"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// DefaultHeartbeat is how often an event stream carries a heartbeat line
// while no event comes; MaxHeartbeat bounds --heartbeat. A reverse proxy
// closes a response that sends nothing for its read timeout (nginx's
// proxy_read_timeout defaults to 60 s, ngx_http_proxy_module), and a run
// waits minutes for an agent with nothing to say: the heartbeat keeps
// its stream open through any proxy whose timeout is over 20 s.
const (
	DefaultHeartbeat = 15 * time.Second
	MaxHeartbeat     = 20 * time.Second
)

// HeartbeatKind is the event field of a heartbeat line. The line is
// exactly HeartbeatLine: not an event, not counted by ?from=N; clients
// skip it (docs/backend.md#the-api).
const HeartbeatKind = "heartbeat"

// HeartbeatLine is the heartbeat as it is written, newline included.
var HeartbeatLine = func() []byte {
	b, _ := json.Marshal(map[string]string{"event": HeartbeatKind})
	return append(b, '\n')
}()

// IsHeartbeat reports whether an event read from a stream is a heartbeat.
func IsHeartbeat(e client.Event) bool { return e.Kind == HeartbeatKind }
