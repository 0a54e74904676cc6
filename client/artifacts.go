package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"

	buildkite "github.com/buildkite/go-buildkite/v4"

	"github.com/gpu-mode/kbgen/internal/contract"

	"github.com/gpu-mode/kbgen/payload"
)

// Artifact is a file a job uploaded.
type Artifact struct {
	ID          string
	JobID       string
	Path        string
	State       string // new, finished, error, deleted, expired (artifacts.md)
	Size        int64
	DownloadURL string // the API URL that answers 302 to storage
}

// MaxResultBytes bounds a downloaded result.json (payload.MaxResultBytes).
const MaxResultBytes = payload.MaxResultBytes

// ListArtifacts lists a build's artifacts, or one job's when jobID is set.
func (c *Client) ListArtifacts(ctx context.Context, number int, jobID string) ([]Artifact, error) {
	var out []Artifact
	opt := &buildkite.ArtifactListOptions{ListOptions: buildkite.ListOptions{PerPage: 100, Page: 1}}
	build := strconv.Itoa(number)
	for page := 0; page < 50; page++ {
		var (
			as   []buildkite.Artifact
			resp *buildkite.Response
			err  error
		)
		if jobID != "" {
			as, resp, err = c.bk.Artifacts.ListByJob(ctx, c.opts.Org, c.opts.Pipeline, build, jobID, opt)
		} else {
			as, resp, err = c.bk.Artifacts.ListByBuild(ctx, c.opts.Org, c.opts.Pipeline, build, opt)
		}
		if err != nil {
			return nil, fmt.Errorf("listing artifacts of build %d: %w", number, c.scrub(err))
		}
		for _, a := range as {
			out = append(out, Artifact{ID: a.ID, JobID: a.JobID, Path: a.Path, State: a.State, Size: a.FileSize, DownloadURL: a.DownloadURL})
		}
		if resp == nil || resp.NextPage == 0 || len(as) == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	return out, nil
}

// FindResult picks result.json among artifacts: a top-level file named
// result.json. A job may carry two (the plugin hook publishes it, and the
// step's artifact_paths uploads it again as a fallback): a finished upload
// wins over one still in progress, and the later over the earlier.
func FindResult(as []Artifact) *Artifact {
	var found *Artifact
	for i := range as {
		a := &as[i]
		if path.Clean(a.Path) != contract.ResultFile || a.State == "deleted" || a.State == "error" || a.State == "expired" {
			continue
		}
		if found != nil && found.State == "finished" && a.State != "finished" {
			continue
		}
		found = a
	}
	return found
}

// LinkProfiles points each profile run's download_url (Kernelbot's
// ProfileResult.download_url, which the runner leaves unset: only the
// host knows where the upload lands) at its profile_data/<run>.zip among
// as, the same job's artifacts: the REST artifact's download_url, which
// answers 302 to storage for a token that may read artifacts. A run whose
// zip is not there (deleted, failed upload) keeps what it had.
func LinkProfiles(res *payload.FullResult, as []Artifact) {
	for key, run := range res.Runs {
		if run.Profile == nil || (run.Profile.DownloadURL != nil && *run.Profile.DownloadURL != "") {
			continue
		}
		want := contract.ProfileDir + "/" + key + ".zip"
		for i := range as {
			a := &as[i]
			if path.Clean(a.Path) == want && a.DownloadURL != "" && a.State != "deleted" && a.State != "error" && a.State != "expired" {
				url := a.DownloadURL
				run.Profile.DownloadURL = &url
			}
		}
	}
}

// Download fetches an artifact's content. The API answers the download URL
// with a 302 to storage (S3); the redirect is followed by a client that
// holds no token, because a signed storage URL needs none and the token
// must never reach a third party.
func (c *Client) Download(ctx context.Context, a *Artifact, limit int64) ([]byte, error) {
	if a.DownloadURL == "" {
		return nil, fmt.Errorf("artifact %s has no download URL", a.Path)
	}
	req, err := c.bk.NewRequest(ctx, http.MethodGet, a.DownloadURL, nil)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", a.Path, c.scrub(err))
	}
	resp, err := c.noRedirect.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", a.Path, c.scrub(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc, err := resp.Location()
		if err != nil {
			return nil, fmt.Errorf("downloading %s: redirect without a usable Location: %w", a.Path, err)
		}
		sreq, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
		if err != nil {
			return nil, fmt.Errorf("downloading %s: %w", a.Path, err)
		}
		sresp, err := c.storageClient.Do(sreq)
		if err != nil {
			// The signed URL is a credential of its own: keep it out.
			return nil, fmt.Errorf("downloading %s from storage host %s: %s", a.Path, loc.Host, c.redact(describeNetErr(err)))
		}
		defer sresp.Body.Close()
		if sresp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("downloading %s from storage host %s: %s", a.Path, loc.Host, sresp.Status)
		}
		return readLimited(sresp.Body, limit, a.Path)
	case resp.StatusCode == http.StatusOK:
		return readLimited(resp.Body, limit, a.Path)
	default:
		return nil, fmt.Errorf("downloading %s: %s %s: %s", a.Path, req.Method, req.URL.Path, resp.Status)
	}
}

func readLimited(r io.Reader, limit int64, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %s", name, describeNetErr(err))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("downloading %s: larger than the %d MiB limit", name, limit>>20)
	}
	return b, nil
}
