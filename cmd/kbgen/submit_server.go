package main

import (
	"errors"
	"net/http"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/serve"
)

// viaServer runs the submission through kbgen serve: the same stdout,
// progress and exit codes as a direct submit. SIGINT/SIGTERM cancel the
// run, as they cancel the build of a direct submit.
func (c *SubmitCmd) viaServer(g *Globals, url string, sub *client.Submission) error {
	rem, err := serve.NewRemote(url, g.Getenv(contract.EnvServerToken))
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ctx, stop := signalContext()
	defer stop()
	p := c.progress(g)
	start := time.Now()
	req := serve.RunRequest{RunID: sub.RunID, Queue: sub.Queue, Payload: sub.Encoded, Priority: sub.Priority, User: sub.User,
		Image: sub.Image, BootstrapQueue: sub.BootstrapQueue, Branch: sub.Branch, Commit: sub.Commit, TimeoutSeconds: c.Timeout.Seconds()}
	st, err := rem.Run(ctx, req, p.Event)
	var refused *serve.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == http.StatusUnauthorized:
		return exitcode.With(exitcode.Usage, errors.New(refused.Msg))
	case errors.As(err, &refused) && refused.Status == http.StatusUnprocessableEntity:
		return exitcode.With(exitcode.BadJob, errors.New(refused.Msg))
	}
	out := &client.Outcome{Status: client.Infra, Elapsed: time.Since(start)}
	if err != nil {
		out.Result = payload.Failed(payload.SystemInfo{}, err)
		return reportOutcome(g, p, out)
	}
	if s, ok := serve.StatusOf(st.Status); ok && st.Result != nil {
		out.Status, out.Result = s, st.Result
	} else {
		out.Result = payload.Failed(payload.SystemInfo{}, errors.New("kbgen serve answered without an outcome for run "+sub.RunID))
	}
	if st.Build != 0 {
		out.Build = &client.Build{Number: st.Build, State: st.BuildState}
	}
	return reportOutcome(g, p, out)
}
