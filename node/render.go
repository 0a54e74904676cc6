package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/gpu-mode/kbgen/deployment"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/shellquote"
)

// Where `kbgen node install` puts things on the node (under --root).
const (
	ConfigDir  = "/etc/buildkite-agent/kbgen"
	StateDir   = "/var/lib/buildkite-agent/kbgen"
	SystemdDir = "/etc/systemd/system"
	UnitName   = "buildkite-agent-gpu@.service"
	SliceName  = "kbgen-agents.slice"
	// JobsSlice holds the step containers on a cgroup v2 node
	// (contract.EnvCgroupParent).
	JobsSlice = "kbgen-jobs.slice"
	// HousekeepingDropIn is the drop-in that confines the host to its
	// housekeeping CPUs: in system.slice.d and user.slice.d on cgroup v2,
	// in system.conf.d (the service manager's CPUAffinity=) on v1.
	HousekeepingDropIn = "50-kbgen-housekeeping.conf"
	SystemConfDir      = "/etc/systemd/system.conf.d"
	TokenFile          = ConfigDir + "/token.env"
	JWKSFile           = ConfigDir + "/verification.jwks"
	// PluginDir is the host's pinned copy of the gpu-docker plugin.
	PluginDir   = "/usr/local/share/kbgen/plugins/gpu-docker"
	PlanFile    = ConfigDir + "/plan.json"
	DefaultUser = "buildkite-agent"
	// DefaultAgentBinary is where Buildkite's Debian/RPM packages put it.
	DefaultAgentBinary = "/usr/bin/buildkite-agent"
	DefaultKbgenPath   = "/usr/local/bin/kbgen"
)

// hostName is a host name an agent tag value can carry (the agent name
// pipelinegen accepts as KBGEN_TARGET_AGENT, less the agent id).
var hostName = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// InstanceName is the systemd unit of the agent owning GPU index.
func InstanceName(index int) string {
	return fmt.Sprintf("buildkite-agent-gpu@%d.service", index)
}

// InstallOptions say how to render a plan into files.
type InstallOptions struct {
	Queue string
	// Token is the Buildkite agent token; empty leaves an installed token
	// file as it is.
	Token string
	// VerificationJWKS is the public JWKS agents verify signed steps with;
	// nil runs agents without verification.
	VerificationJWKS []byte
	// AgentBinary is the buildkite-agent executable.
	AgentBinary string
	// User runs the agents; it must be in the docker group.
	User string
	// KbgenPath is the installed kbgen; its directory leads the agents'
	// PATH, since the bootstrap step and the gpu-docker hook call `kbgen`.
	KbgenPath string
	// Plugin holds the gpu-docker plugin's files (plugin.yml, hooks/…).
	// When set they are installed under PluginDir and every agent gets a
	// post-checkout hook that puts that copy in place of the checkout's,
	// so no build can bring its own host-side hook code.
	Plugin fs.FS
	// AllowProfiling writes ProfilingModprobe (NVIDIA): GPU performance
	// counters open to non-root users, so ncu works in a sandboxed
	// profile-mode step.
	AllowProfiling bool
	// AllowGPUReset writes ResetSudoers and sets contract.EnvGPUReset
	// for every agent: the sandbox resets a leased GPU that fails the
	// clean-GPU check, then checks again.
	AllowGPUReset bool
	// Hostname, when set, gives every agent the tag
	// contract.AgentTag=<Hostname>-<agent id>: its name as the agent's
	// %hostname makes it, so that kbgen serve can target one agent (its
	// canaries, re-measurements). `kbgen node install` sets it from
	// os.Hostname, which is what the agent expands %hostname with.
	Hostname string
}

// File is one rendered file to install.
type File struct {
	// Path is absolute on the node; Apply prefixes the root.
	Path string
	Mode fs.FileMode
	Data []byte
	// Owner is the user the file must belong to ("": whoever installs,
	// root on a node). Apply sets it on a real install (root "/") only: a
	// staging tree keeps the installer's ownership.
	Owner string
}

// templates are parsed on first use, not at init: every kbgen command
// (generate on each build) would otherwise pay for them.
var templates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"shellquote": shellquote.Quote,
		"comment":    commentSafe,
	}).ParseFS(deployment.Templates, "agent/*.tmpl", "hooks/*.tmpl", "systemd/*.tmpl"))
})

// tmplData is what the templates see.
type tmplData struct {
	InstallOptions
	AgentTag         string
	NodeTag, GPUsTag string
	// GPUs is the agent's GPUsTag value (its placement's devices).
	GPUs               string
	Agent              *Agent
	Env                []EnvVar
	HostCPUs           string
	ConfigDir          string
	StateDir           string
	StateDirectoryName string
	TokenFile          string
	VerificationJWKS   string
	Slice              string
	KbgenDir           string
	PluginDir          string
	JobsSlice          string
	JobCPUs            string
	HostCPUsSpaced     string
}

// Render turns a plan into the files of a node install: the systemd template
// unit and slice, the plan itself, the token and verification key when
// given, and per agent its config, environment file and environment hook.
func Render(p *Plan, opts InstallOptions) ([]File, error) {
	if err := validQueue(opts.Queue); err != nil {
		return nil, &OptionError{Option: "Queue", Err: err}
	}
	if opts.AgentBinary == "" {
		opts.AgentBinary = DefaultAgentBinary
	}
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if opts.KbgenPath == "" {
		opts.KbgenPath = DefaultKbgenPath
	}
	if err := validPaths(opts.AgentBinary, opts.KbgenPath); err != nil {
		return nil, err
	}
	if err := validUser(opts.User); err != nil {
		return nil, &OptionError{Option: "User", Err: err}
	}
	if err := validToken(opts.Token); err != nil {
		return nil, err
	}
	if err := checkRenderable(p); err != nil {
		return nil, err
	}
	if opts.Hostname != "" && !hostName.MatchString(opts.Hostname) {
		return nil, &OptionError{Option: "Hostname", Err: fmt.Errorf("host name %q cannot name an agent tag (letters, digits, '.', '_', '-'; at most 63)", opts.Hostname)}
	}
	if p.HostCPUs == "" {
		return nil, errors.New("the plan leaves the host no CPUs: reserve at least one core (--reserve-cores)")
	}
	d := tmplData{
		InstallOptions:     opts,
		HostCPUs:           p.HostCPUs,
		ConfigDir:          ConfigDir,
		StateDir:           StateDir,
		StateDirectoryName: strings.TrimPrefix(StateDir, "/var/lib/"),
		TokenFile:          TokenFile,
		KbgenDir:           path.Dir(opts.KbgenPath),
		Slice:              SliceName,
		PluginDir:          PluginDir,
		JobsSlice:          JobsSlice,
		JobCPUs:            p.JobCPUs(),
		HostCPUsSpaced:     strings.ReplaceAll(p.HostCPUs, ",", " "),
		AgentTag:           contract.AgentTag,
		NodeTag:            contract.NodeTag,
		GPUsTag:            contract.GPUsTag,
	}
	if opts.VerificationJWKS != nil {
		d.VerificationJWKS = JWKSFile
	}
	var files []File
	add := func(name, tmpl string, mode fs.FileMode, data any) error {
		var b bytes.Buffer
		if err := templates().ExecuteTemplate(&b, tmpl, data); err != nil {
			return fmt.Errorf("rendering %s: %w", name, err)
		}
		files = append(files, File{Path: name, Mode: mode, Data: b.Bytes()})
		return nil
	}
	if err := add(path.Join(SystemdDir, UnitName), "buildkite-agent-gpu@.service.tmpl", 0o644, d); err != nil {
		return nil, err
	}
	if err := add(path.Join(SystemdDir, SliceName), "kbgen-agents.slice.tmpl", 0o644, d); err != nil {
		return nil, err
	}
	if err := addHousekeeping(p, add, d); err != nil {
		return nil, err
	}
	var plan bytes.Buffer
	if err := p.WriteJSON(&plan); err != nil {
		return nil, err
	}
	files = append(files, File{Path: PlanFile, Mode: 0o644, Data: plan.Bytes()})
	if opts.Token != "" {
		// Root-only: systemd reads it before dropping to the agent user.
		files = append(files, File{Path: TokenFile, Mode: 0o600, Data: []byte(contract.EnvAgentToken + "=" + opts.Token + "\n")})
	}
	if opts.VerificationJWKS != nil {
		files = append(files, File{Path: JWKSFile, Mode: 0o644, Data: opts.VerificationJWKS})
	}
	if opts.AllowProfiling && p.Runtime == contract.RuntimeNVIDIA {
		files = append(files, File{Path: ProfilingModprobe, Mode: 0o644, Data: []byte("# Written by `kbgen node install --allow-profiling`: ncu in profile-mode\n# steps (uid 1000, no capabilities) needs the GPU performance counters.\n" + ProfilingModprobeLine)})
	}
	if opts.AllowGPUReset {
		sudoers, err := resetSudoers(p, opts.User)
		if err != nil {
			return nil, err
		}
		// Root-only, as sudo wants its files.
		files = append(files, File{Path: ResetSudoers, Mode: 0o440, Data: sudoers})
	}
	if opts.Plugin != nil {
		pinned, err := pluginFiles(opts.Plugin)
		if err != nil {
			return nil, &OptionError{Option: "Plugin", Err: err}
		}
		files = append(files, pinned...)
	}
	for i := range p.Agents {
		a := &p.Agents[i]
		ad := d
		ad.Agent = a
		if a.Queue != "" {
			// A multi-GPU shape's or MIG agent: its own queue.
			if err := validQueue(a.Queue); err != nil {
				return nil, err
			}
			ad.Queue = a.Queue
		}
		ad.Env = a.Env(p.Runtime, p.CgroupVersion)
		ad.GPUs = contract.GPUsTagValue(a.Devices(p.Runtime))
		if opts.AllowGPUReset {
			ad.Env = append(ad.Env, EnvVar{Name: contract.EnvGPUReset, Value: "1"})
		}
		if opts.VerificationJWKS != nil {
			// kbgen sandbox checks each step's own signature with it:
			// buildkite-agent v3.52.1 cannot verify a step with a plugin
			// (fixed in v3.53.0), and the eval step always has one.
			ad.Env = append(ad.Env, EnvVar{Name: contract.EnvVerificationKey, Value: JWKSFile})
		}
		if err := checkEnvValues(a.ID, ad.Env); err != nil {
			return nil, err
		}
		dir := path.Join(ConfigDir, a.ID)
		if err := add(path.Join(dir, "buildkite-agent.cfg"), "buildkite-agent.cfg.tmpl", 0o644, ad); err != nil {
			return nil, err
		}
		if err := add(path.Join(dir, "hooks", "environment"), "environment.tmpl", 0o755, ad); err != nil {
			return nil, err
		}
		if opts.Plugin != nil {
			if err := add(path.Join(dir, "hooks", "post-checkout"), "post-checkout.tmpl", 0o755, ad); err != nil {
				return nil, err
			}
		}
		files = append(files, File{Path: path.Join(dir, "agent.env"), Mode: 0o644, Data: envFile(a, ad.Env)})
	}
	return files, nil
}

// addHousekeeping renders the files that confine the host to its
// housekeeping CPUs (Plan.HostCPUs): AllowedCPUs= drop-ins for
// system.slice and user.slice plus the jobs slice on cgroup v2, the
// service manager's CPUAffinity= on v1.
func addHousekeeping(p *Plan, add func(name, tmpl string, mode fs.FileMode, data any) error, d tmplData) error {
	if p.CgroupVersion != 2 {
		return add(path.Join(SystemConfDir, HousekeepingDropIn), "housekeeping-manager.conf.tmpl", 0o644, d)
	}
	for _, slice := range []string{"system.slice", "user.slice"} {
		if err := add(path.Join(SystemdDir, slice+".d", HousekeepingDropIn), "housekeeping-slice.conf.tmpl", 0o644, d); err != nil {
			return err
		}
	}
	return add(path.Join(SystemdDir, JobsSlice), "kbgen-jobs.slice.tmpl", 0o644, d)
}

// pluginFiles copies the plugin's regular files under PluginDir: hooks
// executable, the rest read-only for everyone but root.
func pluginFiles(plugin fs.FS) ([]File, error) {
	var files []File
	err := fs.WalkDir(plugin, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("gpu-docker plugin: %s is not a regular file", name)
		}
		data, err := fs.ReadFile(plugin, name)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if path.Dir(name) == "hooks" {
			mode = 0o755
		}
		files = append(files, File{Path: path.Join(PluginDir, name), Mode: mode, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the gpu-docker plugin: %w", err)
	}
	if !slices.ContainsFunc(files, func(f File) bool { return f.Path == path.Join(PluginDir, "hooks", "command") }) {
		return nil, errors.New("reading the gpu-docker plugin: it has no hooks/command")
	}
	return files, nil
}

// envFile is the systemd EnvironmentFile of one instance: the same
// placement the hook exports, for the agent process itself and for
// `kbgen doctor`. Jobs take theirs from the hook, which runs after the
// pipeline's env and so wins over it.
func envFile(a *Agent, env []EnvVar) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `kbgen node install`: placement of %s.\n", a.ID)
	for _, e := range env {
		fmt.Fprintf(&b, "%s=%s\n", e.Name, e.Value)
	}
	return b.Bytes()
}

// commentSafe keeps a driver-reported string (a GPU model name) on one
// comment line.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func validQueue(q string) error {
	if q == "" {
		return errors.New("no queue: pass --queue (the Buildkite queue these agents serve, e.g. nvidia-h100)")
	}
	for _, r := range q {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("queue %q: only letters, digits, '-', '_' and '.' are allowed", q)
		}
	}
	return nil
}

// OptionError is an install option (an InstallOptions or ControlOptions
// field) that cannot go into the rendered files. Its message is the
// operator's; Option names the field: "Queue", "User", "Token",
// "AgentBinary", "KbgenPath", "Hostname", "Plugin", "Spawn",
// "SigningJWKS", "Vendors".
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// validPaths checks the executables that go into unit files and PATH.
func validPaths(agentBinary, kbgenPath string) error {
	for _, p := range []struct{ option, path string }{{"AgentBinary", agentBinary}, {"KbgenPath", kbgenPath}} {
		if !path.IsAbs(p.path) || strings.ContainsAny(p.path, " \t\n\"'\\:$%") {
			return &OptionError{Option: p.option, Err: fmt.Errorf("%q: want an absolute path without spaces, quotes, ':', '$' or '%%'", p.path)}
		}
	}
	return nil
}

func validToken(t string) error {
	for _, r := range t {
		if r <= ' ' || r == 0x7f || r == '"' || r == '\'' || r == '\\' || r == '$' {
			// Never echo the token: say what is wrong, not what it is.
			return &OptionError{Option: "Token", Err: errors.New("agent token contains whitespace, quotes, '$' or control characters; check the token file")}
		}
	}
	return nil
}
