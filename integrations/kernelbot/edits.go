package kernelbot

import (
	"fmt"
	"strings"
)

// edit is one Kernelbot file the patch changes: hunks of context (" "),
// removed ("-") and added ("+") lines, at their line in Upstream.
type edit struct {
	path  string
	hunks []hunk
}

type hunk struct {
	oldStart int
	lines    []string // each with its one-character prefix
}

// LookupLine is consts.py's GPU lookup with the Buildkite runner.
const LookupLine = `_GPU_LOOKUP = _make_gpu_lookup({"Modal": ModalGPU, "GitHub": GitHubGPU, "Buildkite": BuildkiteGPU})`

func ctx(lines ...string) []string { return prefix(" ", lines) }
func del(lines ...string) []string { return prefix("-", lines) }
func add(lines ...string) []string { return prefix("+", lines) }

func prefix(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// edits are the changes to Kernelbot's own files. The context lines are
// Kernelbot's at Upstream (src/libkernelbot/consts.py,
// src/libkernelbot/launchers/__init__.py, src/kernelbot/main.py).
func edits(gpus []BuildkiteGPU) []edit {
	return []edit{
		{path: "src/libkernelbot/consts.py", hunks: []hunk{
			{oldStart: 34, lines: join(
				ctx(`    # multi-gpu`, `    L4x4 = "L4x4"`),
				add(ConstsBlock(gpus)...),
				ctx(``, ``, `@dataclasses.dataclass`),
			)},
			{oldStart: 52, lines: join(
				ctx(`    return lookup`, ``, ``),
				del(`_GPU_LOOKUP = _make_gpu_lookup({"Modal": ModalGPU, "GitHub": GitHubGPU})`),
				add(LookupLine),
				ctx(``, ``, `def get_gpu_by_name(name: str) -> GPU:`),
			)},
			{oldStart: 133, lines: join(
				ctx(`    "MI250": None,`, `    "MI355X": None,`),
				add(SMLines(gpus)...),
				ctx(`}`, ``, ``),
			)},
		}},
		{path: "src/libkernelbot/launchers/__init__.py", hunks: []hunk{
			{oldStart: 1, lines: join(
				add(`from .buildkite import BuildkiteLauncher`),
				ctx(`from .github import GitHubLauncher`, `from .launcher import Launcher, RunnerQueueStatus`, `from .modal import ModalLauncher`, ``),
				del(`__all__ = [Launcher, RunnerQueueStatus, GitHubLauncher, ModalLauncher]`),
				add(`__all__ = [Launcher, RunnerQueueStatus, BuildkiteLauncher, GitHubLauncher, ModalLauncher]`),
			)},
		}},
		{path: "src/kernelbot/env.py", hunks: []hunk{
			{oldStart: 35, lines: join(
				ctx(`env.GITHUB_REPO = os.getenv("GITHUB_REPO")`, `env.GITHUB_WORKFLOW_BRANCH = os.getenv("GITHUB_WORKFLOW_BRANCH", get_github_branch_name())`, `env.PROBLEMS_REPO = os.getenv("PROBLEMS_REPO")`),
				add(
					``,
					`# kbgen serve: vendor-donated GPUs through Buildkite (the *_BK GPUs); unset, they are off.`,
					`env.KBGEN_SERVER = os.getenv("KBGEN_SERVER")  # http://127.0.0.1:8077, https://…, unix:/path`,
					`env.KBGEN_SERVER_TOKEN = os.getenv("KBGEN_SERVER_TOKEN")`,
					`env.KBGEN_QUEUE_TIMEOUT = os.getenv("KBGEN_QUEUE_TIMEOUT")  # seconds a run may wait for an agent`,
				),
				ctx(``, `# Directory that will be used for local problem development.`, `env.PROBLEM_DEV_DIR = os.getenv("PROBLEM_DEV_DIR", "examples")`),
			)},
		}},
		{path: "src/kernelbot/main.py", hunks: []hunk{
			{oldStart: 17, lines: join(
				ctx(`from libkernelbot import consts`, `from libkernelbot.backend import KernelBackend`, `from libkernelbot.background_submission_manager import BackgroundSubmissionManager`),
				del(`from libkernelbot.launchers import GitHubLauncher, ModalLauncher`),
				add(`from libkernelbot.launchers import BuildkiteLauncher, GitHubLauncher, ModalLauncher`),
				ctx(`from libkernelbot.utils import setup_logging`, ``, `logger = setup_logging(__name__)`),
			)},
			{oldStart: 30, lines: join(
				ctx(`    backend.register_launcher(`, `        GitHubLauncher(env.GITHUB_REPO, env.GITHUB_TOKEN, env.GITHUB_WORKFLOW_BRANCH)`, `    )`),
				add(
					`    # Vendor-donated GPUs through kbgen serve. Always registered: without KBGEN_SERVER a`,
					`    # submission to a Buildkite GPU fails saying so.`,
					`    backend.register_launcher(`,
					`        BuildkiteLauncher(`,
					`            url=env.KBGEN_SERVER,`,
					`            token=env.KBGEN_SERVER_TOKEN,`,
					`            queue_timeout=env.KBGEN_QUEUE_TIMEOUT,`,
					`        )`,
					`    )`,
				),
				ctx(`    return backend`, ``, ``),
			)},
		}},
		{path: "src/kernelbot/cogs/admin_cog.py", hunks: adminHunks},
		{path: "src/kernelbot/ui/misc.py", hunks: []hunk{
			{oldStart: 13, lines: join(
				ctx(``),
				del(
					`        # Add the Select Menu with the list of GPU options`,
					`        select = ui.Select(`,
					`            placeholder="Select GPUs for this leaderboard...",`,
					`            options=[SelectOption(label=gpu, value=gpu) for gpu in available_gpus],`,
					`            min_values=1,  # Minimum number of selections`,
					`            max_values=len(available_gpus),  # Maximum number of selections`,
					`        )`,
					`        select.callback = self.select_callback`,
					`        self.add_item(select)`,
				),
				add(
					`        # Add the Select Menu with the list of GPU options: Discord allows 25 options in`,
					`        # one menu, so a longer list takes one menu per 25 (the first choice ends the view).`,
					`        for start in range(0, len(available_gpus), 25):`,
					`            chunk = available_gpus[start : start + 25]`,
					`            select = ui.Select(`,
					`                placeholder="Select GPUs for this leaderboard...",`,
					`                options=[SelectOption(label=gpu, value=gpu) for gpu in chunk],`,
					`                min_values=1,  # Minimum number of selections`,
					`                max_values=len(chunk),  # Maximum number of selections`,
					`            )`,
					`            select.callback = self.select_callback`,
					`            self.add_item(select)`,
				),
				ctx(``, `    async def select_callback(self, interaction: Interaction):`),
			)},
		}},
		{path: "src/libkernelbot/report.py", hunks: []hunk{
			{oldStart: 362, lines: join(
				ctx(`                )`, ``, `                if prof_run.profile.download_url is not None:`),
				add(`                    on_buildkite = "buildkite.com/" in prof_run.profile.download_url`),
				ctx(`                    report.add_link(`, `                        f"{prof_run.profile.profiler} profiling output",`),
				del(`                        "Download from GitHub",`),
				add(`                        "Open the build on Buildkite" if on_buildkite else "Download from GitHub",`),
				ctx(`                        prof_run.profile.download_url,`, `                    )`, ``),
			)},
		}},
	}
}

// write prints the edit as a git diff of an existing file.
func (e edit) write(b *strings.Builder) {
	fmt.Fprintf(b, "diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n", e.path, e.path, e.path, e.path)
	shift := 0 // lines added so far, for the new file's line numbers
	for _, h := range e.hunks {
		oldN, newN := 0, 0
		for _, l := range h.lines {
			switch l[0] {
			case ' ':
				oldN++
				newN++
			case '-':
				oldN++
			case '+':
				newN++
			}
		}
		fmt.Fprintf(b, "@@ -%s +%s @@\n", span(h.oldStart, oldN), span(h.oldStart+shift, newN))
		for _, l := range h.lines {
			b.WriteString(l + "\n")
		}
		shift += newN - oldN
	}
}

// writeNewFile prints a file the patch creates.
func writeNewFile(b *strings.Builder, path, content string) {
	lines := strings.SplitAfter(content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	fmt.Fprintf(b, "diff --git a/%s b/%s\nnew file mode 100644\n--- /dev/null\n+++ b/%s\n@@ -0,0 +%s @@\n", path, path, path, span(1, len(lines)))
	for _, l := range lines {
		b.WriteString("+" + l)
	}
	if !strings.HasSuffix(content, "\n") {
		b.WriteString("\n\\ No newline at end of file\n")
	}
}

func span(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// adminHunks let Kernelbot's admin commands list the Buildkite GPUs. GitHub's,
// Modal's and the Buildkite GPUs together are more than the 25 choices a
// Discord option may have, so create-local's GPU is autocompleted (and
// checked) instead of a fixed choice list.
var adminHunks = []hunk{
	{oldStart: 20, lines: join(
		ctx(`from kernelbot.env import env`, `from kernelbot.ui.misc import ConfirmationView, DeleteConfirmationModal, GPUSelectionView`),
		del(`from libkernelbot.consts import GitHubGPU, ModalGPU`),
		add(`from libkernelbot.consts import BuildkiteGPU, GitHubGPU, ModalGPU, get_gpu_by_name`),
		ctx(`from libkernelbot.leaderboard_db import LeaderboardDoesNotExist, LeaderboardItem, SubmissionItem`, `from libkernelbot.task import LeaderboardDefinition, make_task_definition`),
	)},
	{oldStart: 57, lines: join(
		ctx(`    return [`, `        discord.app_commands.Choice(name=x.name, value=x.name) for x in root.iterdir() if x.is_dir()`, `    ]`, ``, ``),
		add(
			`def admin_gpu_names() -> list[str]:`,
			`    """Every GPU a leaderboard may list: GitHub's, Modal's and the Buildkite (kbgen) GPUs."""`,
			`    return [gpu.name for runner in (GitHubGPU, ModalGPU, BuildkiteGPU) for gpu in runner]`,
			``,
			``,
			`async def gpu_autocomplete(`,
			`    interaction: discord.Interaction,`,
			`    current: str,`,
			`) -> list[discord.app_commands.Choice[str]]:`,
			`    """The GPU names that contain what was typed, at most Discord's 25."""`,
			`    return [`,
			`        discord.app_commands.Choice(name=name, value=name)`,
			`        for name in admin_gpu_names()`,
			`        if current.lower() in name.lower()`,
			`    ][:25]`,
			``,
			``,
		),
		ctx(`# ensure valid serialization`),
	)},
	{oldStart: 206, lines: join(
		ctx(`    )`),
		del(
			`    @app_commands.autocomplete(directory=leaderboard_dir_autocomplete)`,
			`    @app_commands.choices(`,
			`        gpu=[app_commands.Choice(name=gpu.name, value=gpu.value) for gpu in GitHubGPU]`,
			`        + [app_commands.Choice(name=gpu.name, value=gpu.value) for gpu in ModalGPU]`,
			`    )`,
		),
		add(`    @app_commands.autocomplete(directory=leaderboard_dir_autocomplete, gpu=gpu_autocomplete)`),
		ctx(`    @with_error_handling`, `    async def leaderboard_create_local(`, `        self,`, `        interaction: discord.Interaction,`, `        directory: str,`),
		del(`        gpu: Optional[app_commands.Choice[str]],`),
		add(`        gpu: Optional[str],`),
		ctx(`        closed: bool = False,`, `    ):`),
	)},
	{oldStart: 265, lines: join(
		ctx(`            definition=definition,`, `            forum_id=forum_id,`),
		del(`            gpu=gpu.value if gpu else None,`),
		add(`            gpu=gpu or None,`),
		ctx(`            visibility="closed" if closed else "public",`, `        ):`),
	)},
	{oldStart: 386, lines: join(
		ctx(`        if gpu is None:`, `            # Ask the user to select GPUs`),
		del(`            view = GPUSelectionView(`, `                [gpu.name for gpu in GitHubGPU] + [gpu.name for gpu in ModalGPU]`, `            )`),
		add(`            view = GPUSelectionView(admin_gpu_names())`),
		ctx(``, `            await send_discord_message(`),
	)},
	{oldStart: 400, lines: join(
		ctx(`            selected_gpus = view.selected_gpus`, `        elif isinstance(gpu, str):`),
		add(
			`            if get_gpu_by_name(gpu) is None:`,
			`                known = ", ".join(admin_gpu_names())`,
			`                raise KernelBotError(f"Unknown GPU {gpu}: choose one of {known}")`,
		),
		ctx(`            selected_gpus = [gpu]`, `        else:`, `            selected_gpus = gpu`),
	)},
}
