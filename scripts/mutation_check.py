"""Hand-written mutation testing: break one line in a copy of the repository, run the tests that
should notice, and report which breaks survive (issue 22).

    python scripts/mutation_check.py                  # every mutant; writes docs/mutation-report.md
    python scripts/mutation_check.py --only clip_high # some of them (ids or id prefixes)

A mutant whose tests need PostgreSQL (`env` sets DATABASE_URL) runs them on POLICYLAB_TEST_POSTGRES_URL,
else on postgres://postgres@127.0.0.1:5432/policylab_mutants (pytest-django makes test_policylab_mutants).

Each mutant is applied to a fresh copy of the tracked and untracked (not ignored) files, so the
working tree is never touched; the copy's tests run with this interpreter. A mutant is KILLED when
its tests fail, SURVIVED when they pass. Every survivor is either a missing test (write it) or an
equivalent mutant (say why in JUSTIFIED). Not part of CI: it runs the slower pipeline tests once
per mutant (about 20 minutes on the 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "docs" / "mutation-report.md"


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str  # must occur exactly once in `file`
    new: str
    tests: tuple[str, ...]
    what: str
    env: tuple[tuple[str, str], ...] = ()  # extra environment of its test run


ALGO = "tests/trainer/algorithms"
RESUME = "tests/trainer/pipeline/test_resume.py"
KNOBS = ("tests/trainer/pipeline/test_knobs_act.py", "tests/trainer/pipeline/test_loss_wiring.py",
         "tests/trainer/pipeline/test_reward_wiring.py")
FSDP2 = "tests/trainer/cluster/test_fsdp2_group.py"
DEEPSPEED = "tests/trainer/cluster/test_deepspeed_group.py"
MEGATRON = "tests/trainer/train/test_megatron_emulated.py"
POSTGRES = (("DATABASE_URL", os.environ.get("POLICYLAB_TEST_POSTGRES_URL",
                                            "postgres://postgres@127.0.0.1:5432/policylab_mutants")),)
MUTANTS: tuple[Mutant, ...] = (
    # --- algorithms (pure functions) ---------------------------------------------------------
    Mutant("gae_lambda", "trainer/algorithms/advantages.py", "advantage_t = delta + gamma * lambd * next_advantage",
           "advantage_t = delta + gamma * next_advantage", (ALGO,), "GAE ignores lambda"),
    Mutant("grpo_no_std", "trainer/algorithms/advantages.py",
           "per_seq = centred / safe_divisor(std, epsilon) if norm_adv_by_std else centred",
           "per_seq = centred", (ALGO,), "GRPO never divides by the group std"),
    Mutant("ppo_clip_max", "trainer/algorithms/policy_loss.py",
           "    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)\n    losses = torch.maximum(",
           "    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)\n    losses = torch.minimum(",
           (ALGO,), "PPO takes the optimistic bound"),
    Mutant("ppo_clip_bounds", "trainer/algorithms/policy_loss.py",
           "    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)\n    losses = torch.maximum",
           "    clipped = -advantages * ratio.clamp(1.0 - clip_high, 1.0 + clip_low)\n    losses = torch.maximum",
           (ALGO,), "clip-higher bounds swapped inside the loss"),
    Mutant("k3_sign", "trainer/algorithms/kl.py", "return (d.exp() - d - 1.0).clamp(-10.0, 10.0)",
           "return (d.exp() + d - 1.0).clamp(-10.0, 10.0)", (ALGO,), "k3 estimator's sign"),
    Mutant("kl_controller_step", "trainer/algorithms/kl.py",
           "value=self.value * (1.0 + proportional_error * n_steps / self.horizon)",
           "value=self.value * (1.0 + proportional_error / self.horizon)", (ALGO,), "adaptive KL ignores batch size"),
    Mutant("token_mean_global", "trainer/algorithms/aggregation.py",
           "count = as_bool_mask(mask).sum() if global_num_tokens is None else global_num_tokens",
           "count = as_bool_mask(mask).sum()", (ALGO,), "token-mean ignores the global token count (DP)"),
    # --- loss / advantage wiring in the loop --------------------------------------------------
    Mutant("clip_high", "trainer/config/schema.py",
           "high = self.pg_clip_high if self.pg_clip_high is not None else self.pg_clip",
           "high = low", KNOBS, "clip-higher not wired (issue 22's table)"),
    Mutant("dual_clip", "trainer/roles/actor.py", "dual_clip_c=cfg.clip_ratio_c if cfg.dual_clip_loss else None",
           "dual_clip_c=None", KNOBS, "dual clip not wired"),
    # issue 45: the skip path (one optimizer step per rollout) must keep the ratio's gradient
    Mutant("actor_old_not_detached", "trainer/roles/actor.py",
           'old = mb["old_log_probs"] if "old_log_probs" in mb else log_probs.detach()',
           'old = mb["old_log_probs"] if "old_log_probs" in mb else log_probs',
           ("tests/trainer/pipeline/test_loss_wiring.py", "tests/trainer/pipeline/test_one_update_per_rollout.py"),
           "without old log-probs the ratio is exp(lp - lp): zero policy gradient, the policy never learns (issue 45)"),
    Mutant("critic_fits_advantages", "trainer/roles/critic.py",
           'pl.value_loss(values, mb["values"], mb["returns"], mb["response_mask"],',
           'pl.value_loss(values, mb["values"], mb["advantages"], mb["response_mask"],', ("tests/trainer/roles",),
           "the critic regresses on the advantages A instead of the returns R = A + V (issue 45)"),
    Mutant("dp_token_counts_not_summed", "trainer/train/ppo_update.py",
           "        dist.all_reduce(counts, group=dp_group)\n", "",
           ("tests/trainer/train/test_ppo_update_dp.py", FSDP2),
           "each data-parallel rank normalises by its own token count, not the mini-batch's (issue 45)"),
    Mutant("whiten_advantages", "trainer/pipeline/rewarding.py", "    if cfg.whiten_advantages:\n",
           "    if False:\n", KNOBS, "whiten_advantages not wired"),
    Mutant("reward_clip", "trainer/pipeline/rewarding.py",
           "clipped, clip_frac = reward_algos.clip_rewards(scores, cfg.reward_clip)",
           "clipped, clip_frac = scores, 0.0", KNOBS, "reward_clip not wired"),
    Mutant("stale_bound", "trainer/pipeline/rlvr.py",
           "if staleness <= self.schedule.max_staleness or self.cfg.stale_samples == \"downweight\":",
           "if True:", ("tests/trainer/pipeline/test_async_rollout.py",),
           "batches beyond max_staleness are trained instead of dropped"),
    # --- checkpoint / resume -------------------------------------------------------------------
    Mutant("resume_kl", "trainer/pipeline/rlvr.py",
           "        self.kl_ctrl = (kl_algos.AdaptiveKLController if kind == \"AdaptiveKLController\"\n"
           "                        else kl_algos.FixedKLController)(**kl_state)\n",
           "", (RESUME,), "adaptive KL controller not restored (issue 22's table)"),
    Mutant("resume_reward_stats", "trainer/pipeline/rlvr.py",
           "        self.reward_state = rewarding.RewardStats.from_state_dict(state[\"reward_stats\"])\n", "",
           (RESUME,), "running reward statistics not restored (issue 22's table)"),
    Mutant("resume_rng", "trainer/pipeline/rlvr.py",
           "        for role in (\"actor_infer\", \"reference\"):\n            if role in self.groups:\n"
           "                self.groups[role].call_all(roles.Role.load_rng, str(path))\n", "",
           (RESUME,), "rollout/reference RNG not restored (issue 22's table)"),
    Mutant("resume_sampler", "trainer/pipeline/rlvr.py", "        self.sampler.load_state_dict(state[\"sampler\"])\n",
           "", (RESUME,), "data sampler position not restored"),
    Mutant("checkpoints_by_name", "trainer/checkpoint/core.py", "    return sorted(found)\n",
           "    return sorted(found, key=lambda item: item[1].name)\n", ("tests/trainer/checkpoint",),
           "checkpoints ordered by folder name: step_10 before step_9, latest resumes step_9, retention "
           "deletes step_10 (issue 45)"),
    # issue 37: resume with a warmup + cosine schedule, each strategy's own restore of the LR step
    Mutant("resume_lr_fsdp2", "trainer/train/fsdp2_strategy.py",
           "        self.scheduler.load_state_dict(torch.load(path / \"scheduler.pt\", weights_only=True))\n", "",
           (FSDP2,), "fsdp2_train's LR schedule restarts from step 0 on resume (issue 37)"),
    Mutant("resume_lr_deepspeed", "trainer/train/deepspeed_strategy.py",
           "        self.optimizer_steps = int(client_state[\"optimizer_steps\"])\n", "",
           (DEEPSPEED,), "deepspeed_train's LR step count restarts from 0 on resume (issue 37)"),
    Mutant("resume_lr_megatron", "trainer/train/megatron_strategy.py",
           "        self.optimizer_steps = int(extra[\"optimizer_steps\"])\n", "",
           (MEGATRON,), "megatron_train's LR step count restarts from 0 on resume (issue 37)"),
    # --- the ledger ------------------------------------------------------------------------------
    Mutant("ledger_snapshot_boundary", "trainer/pipeline/run/ledger.py",
           "voided.update(range(0 if upto is None or upto > line else upto, line))",
           "voided.update(range(0 if upto is None or upto > line else upto + 1, line))",
           ("tests/trainer/pipeline/test_ledger.py",),
           "a record at the snapshot boundary is not rolled back: counted again (issue 37)"),
    # --- run supervision and confinement ---------------------------------------------------------
    Mutant("watchdog_mean", "trainer/pipeline/run/watchdog.py", "bounds.factor * statistics.median(recent)",
           "bounds.factor * statistics.mean(recent)", ("tests/trainer/pipeline/test_watchdog.py",),
           "the watchdog's bound follows the mean: one slow outlier ([1, 1, 1, 50] s) stretches 10 s to 132.5 s "
           "(issue 45)"),
    Mutant("confinement_sibling_prefix", "trainer/config/confinement.py",
           "return path == root or path.startswith(root.rstrip(os.sep) + os.sep)",
           "return path == root or path.startswith(root.rstrip(os.sep))",
           ("tests/trainer/config/test_config_confinement.py",),
           "/data/models-secret passes as inside the read root /data/models, runs/70 inside runs/7 (issue 45)"),
    # --- importers ------------------------------------------------------------------------------
    Mutant("verl_clip_swap", "trainer/config/importers/verl_rules.py",
           'Rule(f"{ARR}.actor.clip_ratio_low", "pg_clip_low", 0.18),\n    Rule(f"{ARR}.actor.clip_ratio_high", "pg_clip_high", 0.28),',
           'Rule(f"{ARR}.actor.clip_ratio_low", "pg_clip_high", 0.18),\n    Rule(f"{ARR}.actor.clip_ratio_high", "pg_clip_low", 0.28),',
           ("tests/trainer/importers/test_importer_corpus.py",),
           "verl clip_ratio_low/high targets swapped (issue 22's table; the docs check is left out on purpose)"),
    # --- platform -------------------------------------------------------------------------------
    Mutant("scoping_token_team", "platform/policylab/accounts/scoping.py",
           "    if token_team_id is not None:\n        teams = teams.filter(pk=token_team_id)\n", "",
           ("tests/platform/test_team_isolation.py", "tests/platform/api"), "a token sees all its user's teams"),
    Mutant("scoping_role_any_team", "platform/policylab/accounts/scoping.py",
           "Membership.objects.filter(user=user, team=team).values_list",
           "Membership.objects.filter(user=user).values_list", ("tests/platform/test_team_isolation.py",),
           "the role is read from any of the user's teams, not the one written to (issue 37)"),
    Mutant("token_detail_by_team", "platform/policylab/api/views.py",
           "class TokenDetail(generics.RetrieveDestroyAPIView):\n    serializer_class = s.ApiTokenSerializer\n\n"
           "    def get_queryset(self):\n        return ApiToken.objects.filter(user=self.request.user, team__in=",
           "class TokenDetail(generics.RetrieveDestroyAPIView):\n    serializer_class = s.ApiTokenSerializer\n\n"
           "    def get_queryset(self):\n        return ApiToken.objects.filter(team__in=",
           ("tests/platform/api/test_runs_and_tokens_api.py", "tests/platform/test_team_isolation.py"),
           "any member reads and revokes a team-mate's API token (issue 45)"),
    Mutant("quota_no_row_lock", "platform/policylab/experiments/services.py",
           '    Team.objects.select_for_update().only("pk").get(pk=team.pk)\n', "",
           ("tests/platform/experiments/test_quota_race.py", "tests/platform/experiments/test_quotas.py"),
           "two concurrent launches both take a team's last run slot (issue 45; PostgreSQL)", POSTGRES),
    Mutant("ingest_cursor_backwards", "platform/policylab/tracking/ingest.py",
           "new_last = max(cursor.last_seq, events[-1][\"seq\"])", "new_last = events[-1][\"seq\"]",
           ("tests/platform/tracking/test_ingest.py",), "the per-run cursor may move backwards (issue 22's table)"),
    Mutant("ingest_replay_rollouts", "platform/policylab/tracking/ingest.py",
           "        if min_seq <= cursor.last_seq  # a replay: keep newer attempts' samples\n",
           "        if False\n", ("tests/platform/tracking/test_ingest.py",),
           "a replayed batch overwrites a newer attempt's rollout samples"),
    Mutant("summary_last_step_again", "platform/policylab/tracking/ingest.py",
           "if old is not None and min(p[2] for p in points) <= old.last_step:",
           "if old is not None and min(p[2] for p in points) < old.last_step:",
           ("tests/platform/tracking/test_dashboard_data.py", "tests/platform/tracking/test_ingest.py"),
           "a re-delivered last metrics batch is merged again: counted twice, min/max keep overwritten values "
           "(issue 37)"),
    Mutant("late_attempt_status", "platform/policylab/tracking/ingest.py",
           "    if attempt < max(latest_attempt, run.progress_attempt):",
           "    if attempt < run.progress_attempt:", ("tests/platform/tracking/test_run_state.py",),
           "a late report of an older attempt moves a run a newer attempt is training"),
)

# Survivors that are equivalent mutants or covered elsewhere, with the reason (shown in the report).
JUSTIFIED: dict[str, str] = {
    "resume_rng": "equivalent: every generate call is seeded from (seed, step) and the reference forward "
                  "is deterministic, so no result reads the rollout/reference workers' global RNG; the "
                  "restore stays as cheap insurance for engines that do",
}


def copy_repo(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def run_mutant(mutant: Mutant, timeout: float) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        root = Path(tmp)
        copy_repo(root)
        path = root / mutant.file
        if not path.is_file():
            return "NOT APPLIED (the file is gone: update the mutant)", 0.0
        text = path.read_text()
        if text.count(mutant.old) != 1:
            return f"NOT APPLIED (the line occurs {text.count(mutant.old)} times: update the mutant)", 0.0
        path.write_text(text.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "RAY_AUTH_MODE": "disabled",
               "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", **dict(mutant.env)}
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                   *mutant.tests], cwd=root, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "KILLED (timeout)", time.monotonic() - start
        seconds = time.monotonic() - start
        if proc.returncode == 0:
            tail = proc.stdout.decode(errors="replace").strip().splitlines()[-1:]
            if tail and " passed" not in tail[0]:  # e.g. "1 skipped": nothing that could notice ran
                return f"NOT RUN ({tail[0].strip('= ')})", seconds
            return "SURVIVED", seconds
        if proc.returncode in (1,):
            return "KILLED", seconds
        return f"ERROR (pytest exit {proc.returncode})", seconds


def write_report(rows: list[tuple[Mutant, str, float]]) -> None:
    killed = sum(r[1].startswith("KILLED") for r in rows)
    lines = [
        "# Mutation report",
        "",
        f"Generated by `python scripts/mutation_check.py` on {time.strftime('%Y-%m-%d')}: {len(rows)} mutants, "
        f"{killed} killed, {len(rows) - killed} not killed.",
        "",
        "| id | what breaks | file | tests run | result | s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for mutant, result, seconds in rows:
        note = f" — {JUSTIFIED[mutant.id]}" if mutant.id in JUSTIFIED and result == "SURVIVED" else ""
        lines.append(f"| `{mutant.id}` | {mutant.what} | `{mutant.file}` | {', '.join(f'`{t}`' for t in mutant.tests)} "
                     f"| {result}{note} | {seconds:.0f} |")
    REPORT.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="mutant ids (or prefixes) to run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutant")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/mutation-report.md")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or any(m.id.startswith(o) for o in args.only)]
    rows = []
    for mutant in chosen:
        result, seconds = run_mutant(mutant, args.timeout)
        print(f"{mutant.id:28} {result:12} {seconds:6.0f} s  {mutant.what}", flush=True)
        rows.append((mutant, result, seconds))
    if not args.no_report and not args.only:
        write_report(rows)
    survivors = [m.id for m, r, _ in rows if not r.startswith("KILLED") and m.id not in JUSTIFIED]
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
