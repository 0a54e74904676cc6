package node

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
)

// Where `kbgen node install --control` puts a control agent (under --root).
const (
	ControlDir = ConfigDir + "/control"
	// SigningKeyFile is the private JWKS, 0600 and owned by the agent user:
	// the bootstrap (kbgen generate, as that user) signs with it.
	SigningKeyFile = ControlDir + "/signing-key.jwks"
	// ControlVendorsFile is the vendor registry the bootstrap reads when
	// install was given one (KBGEN_VENDORS); absent: the built-in one.
	ControlVendorsFile = ControlDir + "/vendors.yaml"
	ControlUnit        = "buildkite-agent-control.service"
	// DefaultControlSpawn is how many bootstraps one control host runs at
	// once: each is one short kbgen generate.
	DefaultControlSpawn = 4
)

// ControlOptions say how to render a control agent.
type ControlOptions struct {
	// Token is the control agents' Buildkite agent token; empty leaves an
	// installed token file as it is.
	Token string
	// SigningJWKS is the private JWKS kbgen generate signs eval steps with.
	SigningJWKS []byte
	// Vendors is a vendor registry (YAML) replacing the built-in one; nil
	// keeps the built-in one.
	Vendors     []byte
	AgentBinary string
	User        string
	KbgenPath   string
	// Spawn is how many bootstraps run at once (DefaultControlSpawn when 0).
	Spawn int
}

// controlData is what the control templates see.
type controlData struct {
	ControlOptions
	Queue, ControlDir, StateDir, StateDirectoryName, TokenFile, KbgenDir string
	SigningKeyFile, VendorsFile, EnvSigningKey, EnvVendors               string
}

// RenderControl turns a control agent's options into the files of its
// install: its config, environment and checkout hooks, the systemd unit,
// the signing key (owned by the agent user, 0600), the registry when given
// and the token when given. The queue is contract.ControlQueue, the one the
// pipeline's settings steps route the bootstrap to.
func RenderControl(opts ControlOptions) ([]File, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if _, err := signing.ParsePrivateSet(opts.SigningJWKS); err != nil {
		return nil, &OptionError{Option: "SigningJWKS", Err: fmt.Errorf("signing key: %w", err)}
	}
	d := controlData{ControlOptions: opts, Queue: contract.ControlQueue, ControlDir: ControlDir, StateDir: StateDir,
		StateDirectoryName: strings.TrimPrefix(StateDir, "/var/lib/"), TokenFile: TokenFile, KbgenDir: path.Dir(opts.KbgenPath),
		SigningKeyFile: SigningKeyFile, EnvSigningKey: contract.EnvSigningKey, EnvVendors: contract.EnvVendors}
	var files []File
	if opts.Vendors != nil {
		if _, err := registry.Parse(opts.Vendors); err != nil {
			return nil, &OptionError{Option: "Vendors", Err: fmt.Errorf("vendor registry: %w", err)}
		}
		d.VendorsFile = ControlVendorsFile
		files = append(files, File{Path: ControlVendorsFile, Mode: 0o644, Data: opts.Vendors})
	}
	for _, t := range []struct {
		name, tmpl string
		mode       fs.FileMode
	}{
		{path.Join(SystemdDir, ControlUnit), "buildkite-agent-control.service.tmpl", 0o644},
		{path.Join(ControlDir, "buildkite-agent.cfg"), "control-agent.cfg.tmpl", 0o644},
		{path.Join(ControlDir, "hooks", "environment"), "control-environment.tmpl", 0o755},
		{path.Join(ControlDir, "hooks", "checkout"), "control-checkout.tmpl", 0o755},
	} {
		var b bytes.Buffer
		if err := templates().ExecuteTemplate(&b, t.tmpl, d); err != nil {
			return nil, fmt.Errorf("rendering %s: %w", t.name, err)
		}
		files = append(files, File{Path: t.name, Mode: t.mode, Data: b.Bytes()})
	}
	files = append(files, File{Path: SigningKeyFile, Mode: 0o600, Owner: opts.User, Data: opts.SigningJWKS})
	if opts.Token != "" {
		files = append(files, File{Path: TokenFile, Mode: 0o600, Data: []byte(contract.EnvAgentToken + "=" + opts.Token + "\n")})
	}
	return files, nil
}

// defaults fills the unset options and checks the rest.
func (o *ControlOptions) defaults() error {
	if o.AgentBinary == "" {
		o.AgentBinary = DefaultAgentBinary
	}
	if o.User == "" {
		o.User = DefaultUser
	}
	if o.KbgenPath == "" {
		o.KbgenPath = DefaultKbgenPath
	}
	if o.Spawn == 0 {
		o.Spawn = DefaultControlSpawn
	}
	if o.Spawn < 1 || o.Spawn > 64 {
		return &OptionError{Option: "Spawn", Err: fmt.Errorf("--spawn %d: want 1 to 64 agents", o.Spawn)}
	}
	if err := validPaths(o.AgentBinary, o.KbgenPath); err != nil {
		return err
	}
	if err := validUser(o.User); err != nil {
		return &OptionError{Option: "User", Err: err}
	}
	return validToken(o.Token)
}

// ControlRequest is `kbgen node install --control`: where the token, key
// and registry come from (Inputs, whose Root is the install root), the
// agent's options and DryRun.
type ControlRequest struct {
	Inputs  ControlInputs
	Options ControlOptions
	DryRun  bool
}

// ControlReport is what a control install did (or would do).
type ControlReport struct {
	DryRun  bool
	Results []Result
	// Done is false when Apply stopped part-way.
	Done         bool
	TokenMissing bool
	Spawn        int
}

// InstallControl loads the inputs, renders the control agent's files and
// applies them under Inputs.Root. The report is nil when nothing was
// applied. Mistakes in the request carry exitcode.Usage.
func InstallControl(req ControlRequest) (*ControlReport, error) {
	opts := req.Options
	if err := req.Inputs.Load(&opts); err != nil {
		return nil, err
	}
	files, err := RenderControl(opts)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	r := &ControlReport{DryRun: req.DryRun, Spawn: cmp.Or(opts.Spawn, DefaultControlSpawn)}
	if r.Results, err = Apply(req.Inputs.Root, files, req.DryRun); err != nil {
		return r, err
	}
	r.Done, r.TokenMissing = true, TokenMissing(req.Inputs.Root, opts.Token)
	return r, nil
}

// Write prints each file's change, then (once done) a missing token to
// warn about and how to start the agent.
func (r *ControlReport) Write(out, warn io.Writer) {
	writeResults(out, r.Results, r.DryRun)
	if !r.Done {
		return
	}
	if r.TokenMissing {
		fmt.Fprintf(warn, "kbgen: warning: no agent token given (--token-file or BUILDKITE_AGENT_TOKEN) and none installed: the agent will not start until %s exists\n", TokenFile)
	}
	fmt.Fprintf(out, "control agent for queue %s (%d jobs at once); start it with: systemctl daemon-reload && systemctl enable --now %s\n",
		contract.ControlQueue, r.Spawn, ControlUnit)
}
