package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/gpu-mode/kbgen/fleet/verify"
)

// StartVerify asks the service to re-measure run id on count agents
// (POST /v1/runs/{id}/verify); a verification already started is
// returned as it stands.
func (r *Remote) StartVerify(ctx context.Context, id string, count int) (*verify.Report, error) {
	return r.verifyCall(ctx, http.MethodPost, id, VerifyRequest{Count: count})
}

// VerifyStatus is run id's verification as it stands
// (GET /v1/runs/{id}/verify).
func (r *Remote) VerifyStatus(ctx context.Context, id string) (*verify.Report, error) {
	return r.verifyCall(ctx, http.MethodGet, id, nil)
}

func (r *Remote) verifyCall(ctx context.Context, method, id string, body any) (*verify.Report, error) {
	path := "/v1/runs/" + url.PathEscape(id) + "/verify"
	resp, err := r.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var rep verify.Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("kbgen serve: %s %s: bad answer: %v", method, path, err)
	}
	return &rep, nil
}

// Verify starts run id's re-measurement and waits, asking every poll,
// until it has a verdict or ctx ends (then the report as it stands and
// ctx's error).
func (r *Remote) Verify(ctx context.Context, id string, count int, poll time.Duration) (*verify.Report, error) {
	rep, err := r.StartVerify(ctx, id, count)
	for err == nil && rep.Verdict == verify.Running {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(poll):
		}
		rep, err = r.VerifyStatus(ctx, id)
	}
	return rep, err
}
