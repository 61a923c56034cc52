"""Request and response shapes of the REST API. Config fields are free-form here on purpose: the
config is validated by trainer.config (the single source of truth), not by a second field list."""

from __future__ import annotations

import os

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from policylab.accounts.models import ApiToken, Team, TeamSecret
from policylab.accounts.scoping import default_team, teams_of
from policylab.experiments.models import Experiment, Project, Run, RunAttempt
from policylab.redaction import path_in_run, shown_config, shown_config_text
from policylab.tracking.selectors import attempt_records, run_alerts, run_profiles, run_stalls, stalled_now


@extend_schema_field({"oneOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}]})
class ConfigSourceField(serializers.Field):
    """A config as a JSON object, or as YAML text (native, verl, SkyRL, RLinf or ROLL)."""

    default_error_messages = {"invalid": "expected a JSON object or YAML text"}

    def to_internal_value(self, data):
        if isinstance(data, dict | str):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}, "description": 'dotlist, ["key=value", …]'},
            {"type": "object", "additionalProperties": True, "description": '{"dotted.key": value} or nested'},
        ]
    }
)
class OverridesField(serializers.Field):
    default_error_messages = {"invalid": 'expected a list of "key=value" strings or an object'}

    def to_internal_value(self, data):
        if isinstance(data, dict) or (isinstance(data, list) and all(isinstance(i, str) for i in data)):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


@extend_schema_field({"oneOf": [{"type": "integer", "description": "the checkpoint's id"},
                                 {"type": "string", "description": '"latest", or the checkpoint\'s path relative to '
                                  "the run directory (e.g. checkpoints/step_4)"}]})
class CheckpointRefField(serializers.Field):
    """A checkpoint of the run: its id, "latest", or its path relative to the run directory (`checkpoints/step_4`,
    as a run's `resume_from` reads); never a server path."""

    default_error_messages = {"invalid": 'expected a checkpoint id, "latest", or its path relative to the run '
                                         '(e.g. checkpoints/step_4)'}

    def to_internal_value(self, data):
        if data == "latest" or (isinstance(data, int) and not isinstance(data, bool)):
            return data
        if isinstance(data, str) and data.isdigit():
            return int(data)
        if isinstance(data, str) and data.strip() and not os.path.isabs(data) and len(data) <= 1000:
            return data.strip()
        self.fail("invalid")

    def to_representation(self, value):
        return value


class IssueSerializer(serializers.Serializer):
    field = serializers.CharField()
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    errors = IssueSerializer(many=True)
    warnings = IssueSerializer(many=True)


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "slug"]


class DefaultTeam:
    """The team of a new object when the request names none (accounts.scoping.default_team)."""

    requires_context = True

    def __call__(self, field: serializers.Field) -> Team:
        team = default_team(field.context["request"].user)
        if team is None:
            raise serializers.ValidationError({"team": ["name one of your teams"]})
        return team


class ProjectSerializer(serializers.ModelSerializer):
    team = serializers.PrimaryKeyRelatedField(
        queryset=Team.objects.none(), default=DefaultTeam(),
        help_text="One of your teams; defaults to your API token's team (or your only team)",
    )

    class Meta:
        model = Project
        fields = ["id", "team", "name", "description", "created_at"]
        read_only_fields = ["created_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        self.fields["team"].queryset = teams_of(request.user if request else None)


class RunAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunAttempt
        fields = ["number", "status", "ray_job_id", "started_at", "finished_at", "heartbeat_at", "message"]


def shown_resume_from(run: Run) -> str:
    """Run.resume_from as the API shows it: "" or "latest" as they are; a checkpoint path relative to the run
    directory that holds it (this run's, or for a fork its parent's: `parent_run` says which), never a server path."""
    value = run.resume_from or ""
    if not os.path.isabs(value):
        return value
    holder = run.parent_run.run_dir if run.parent_run_id and run.parent_run_id != run.pk else run.run_dir
    for root in (run.run_dir, holder):
        shown = path_in_run(value, root)
        if not os.path.isabs(shown) and not shown.startswith("<"):
            return shown
    return path_in_run(value, run.run_dir)


class RunSerializer(serializers.ModelSerializer):
    experiment = serializers.PrimaryKeyRelatedField(read_only=True)
    experiment_name = serializers.CharField(source="experiment.name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    attempts = RunAttemptSerializer(many=True, read_only=True)
    dashboard_url = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id", "experiment", "experiment_name", "status", "created_by", "created_at", "started_at", "finished_at",
            "current_step", "total_steps", "eta_seconds", "message", "parent_run", "parent_checkpoint",
            "resume_from", "overrides", "max_retries", "cancel_requested", "state_version", "attempts",
            "dashboard_url",
        ]
        read_only_fields = fields

    def to_representation(self, run: Run) -> dict:
        data = super().to_representation(run)
        data["overrides"] = [shown_config_text(str(o)) for o in data.get("overrides") or []]
        data["resume_from"] = shown_resume_from(run)
        return data

    def get_dashboard_url(self, run: Run) -> str:
        return reverse("tracking:run_detail", args=[run.pk])


class AttemptRecordOut(serializers.Serializer):
    attempt = serializers.IntegerField()
    fingerprint = serializers.DictField(allow_null=True, help_text="packages, policylab (commit), hardware, "
                                        "config_hash, data (per split: files' sha256 or the synthetic task)")
    resume = serializers.DictField(allow_null=True, help_text="the resume report: ok, problems, checkpoint, step, "
                                   "data (epoch, index, position), ledger counts, rng, optimizer, kl, reward_norm")


class StallOut(serializers.Serializer):
    attempt = serializers.IntegerField()
    seq = serializers.IntegerField()
    time = serializers.DateTimeField()
    phase = serializers.CharField(help_text="the step's phase past its watchdog bound")
    summary = serializers.CharField()
    elapsed_s = serializers.FloatField(help_text="how long the phase had run when it was reported")
    bound_s = serializers.FloatField(allow_null=True)
    on_stall = serializers.CharField(help_text="wait, fail or restart_from_checkpoint")
    waiting = serializers.ListField(child=serializers.DictField(), help_text='[{"role", "method", "ranks"}]')
    stacks = serializers.CharField(help_text="the driver's and the waiting ranks' Python stacks")
    file = serializers.CharField(help_text="the stall's text file, relative to the run directory")
    recovered_after_s = serializers.FloatField(allow_null=True, help_text="set when the phase ended after all")
    open = serializers.BooleanField(help_text="the latest attempt is stalled now")
    ended = serializers.CharField(help_text="how it ended: open, recovered, restarted (from the latest checkpoint), "
                                  "failed (on_stall: fail) or attempt-ended (cancelled or failed meanwhile)")
    ended_text = serializers.CharField(help_text="the same, in words")


class AlertSampleOut(serializers.Serializer):
    group_id = serializers.IntegerField()
    sample_index = serializers.IntegerField()


class AlertOut(serializers.Serializer):
    attempt = serializers.IntegerField()
    seq = serializers.IntegerField()
    step = serializers.IntegerField(help_text="the step whose metrics or samples tripped it")
    time = serializers.DateTimeField()
    kind = serializers.CharField(help_text="entropy_collapse, length_cap, repetition, format_collapse, "
                                 "reward_up_eval_down, kl_blowup, grad_spike, zero_variance, logprob_mismatch or nan "
                                 "(decision 0050)")
    metric = serializers.CharField()
    value = serializers.FloatField(allow_null=True, help_text="null when the value was NaN or infinite")
    threshold = serializers.FloatField(allow_null=True, help_text="the config's health bound it passed")
    message = serializers.CharField(allow_blank=True)
    samples = AlertSampleOut(many=True, help_text="the step's samples that tripped it (sample checks)")
    inspector_url = serializers.CharField(help_text="the rollout inspector at the alert's step")


class ProfileOut(serializers.Serializer):
    id = serializers.IntegerField()
    step = serializers.IntegerField()
    role = serializers.CharField()
    rank = serializers.IntegerField()
    call = serializers.CharField(help_text="the role's method: train_step, compute_log_probs, compute_values, generate")
    kind = serializers.CharField(help_text="timeline (torch.profiler) or memory (profiler_memory)")
    format = serializers.CharField(help_text="chrome_trace_gz (ui.perfetto.dev, chrome://tracing) or "
                                   "cuda_memory_snapshot (pytorch.org/memory_viz)")
    size_bytes = serializers.IntegerField()
    attempt = serializers.IntegerField()
    name = serializers.CharField(help_text="the file's name")
    path = serializers.CharField(help_text="the file, relative to the run directory")
    download_url = serializers.SerializerMethodField()

    def get_download_url(self, profile: dict) -> str:
        return reverse("tracking:profile_download", args=[self.context["run_id"], profile["id"]])


class RunDetailSerializer(RunSerializer):
    """A run with what each attempt ran on and resumed (tracking's AttemptRecord), newest attempt first, the
    watchdog's stalls, newest first, the run-health alerts, newest first, and the profiler's files
    (profiler_timeline / profiler_memory) by step."""

    stalled = serializers.SerializerMethodField(help_text="the latest attempt has an open stall (a phase past its "
                                                "watchdog bound that has not ended) while the run is active")
    status_display = serializers.SerializerMethodField(help_text="the status as the run page shows it: `stalled` "
                                                       "while `stalled`, else `status`")
    attempt_records = serializers.SerializerMethodField()
    stalls = serializers.SerializerMethodField()
    alerts = serializers.SerializerMethodField()
    profiles = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "stalled", "status_display", "attempt_records", "stalls", "alerts",
                  "profiles"]
        read_only_fields = fields

    def to_representation(self, run: Run) -> dict:
        # stalled and status_display both read stalled_now: its queries run once per run, not once per field
        self._stalled_now = stalled_now(run)
        return super().to_representation(run)

    def get_stalled(self, run: Run) -> bool:
        return self._stalled_now

    def get_status_display(self, run: Run) -> str:
        return "stalled" if self._stalled_now else run.status

    @extend_schema_field(AttemptRecordOut(many=True))
    def get_attempt_records(self, run: Run) -> list[dict]:
        return attempt_records(run)

    @extend_schema_field(StallOut(many=True))
    def get_stalls(self, run: Run) -> list[dict]:
        return StallOut(run_stalls(run), many=True).data

    @extend_schema_field(AlertOut(many=True))
    def get_alerts(self, run: Run) -> list[dict]:
        return AlertOut(run_alerts(run), many=True).data

    @extend_schema_field(ProfileOut(many=True))
    def get_profiles(self, run: Run) -> list[dict]:
        return ProfileOut(run_profiles(run), many=True, context={"run_id": run.pk}).data


class ExperimentSerializer(serializers.ModelSerializer):
    project = serializers.PrimaryKeyRelatedField(read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    config = serializers.DictField(read_only=True)

    class Meta:
        model = Experiment
        fields = [
            "id", "project", "name", "description", "tags", "config", "config_yaml", "config_hash",
            "source_format", "created_by", "created_at",
        ]
        read_only_fields = fields

    def to_representation(self, experiment: Experiment) -> dict:
        data = super().to_representation(experiment)
        data["config"], data["config_yaml"] = shown_config(data["config"]), shown_config_text(data["config_yaml"])
        return data


class ExperimentCreateSerializer(serializers.Serializer):
    project = serializers.IntegerField(help_text="Id of a project of one of your teams (GET /api/projects/)")
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False, default=list)
    config = ConfigSourceField(help_text="The config: a JSON object or YAML text in any supported format")
    source_format = serializers.ChoiceField(
        choices=["auto", "roll", "verl", "skyrl", "rlinf"], required=False, default="auto"
    )
    overrides = OverridesField(required=False, default=list)


class ConfigValidateSerializer(serializers.Serializer):
    config = ConfigSourceField()
    source_format = serializers.ChoiceField(
        choices=["auto", "roll", "verl", "skyrl", "rlinf"], required=False, default="auto"
    )
    overrides = OverridesField(required=False, default=list)


class ConfigValidationSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    errors = IssueSerializer(many=True)
    warnings = IssueSerializer(many=True)
    derived = serializers.DictField()
    source_format = serializers.CharField()
    config = serializers.DictField(allow_null=True)
    yaml = serializers.CharField(allow_blank=True)


class LaunchSerializer(serializers.Serializer):
    overrides = OverridesField(required=False, default=list)


class ResumeSerializer(serializers.Serializer):
    checkpoint = CheckpointRefField(required=False, default="latest")


class ForkSerializer(serializers.Serializer):
    checkpoint = CheckpointRefField(required=False, default="latest")
    overrides = OverridesField(required=False, default=dict)
    name = serializers.CharField(required=False, max_length=200)


class ApiTokenSerializer(serializers.ModelSerializer):
    team = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "team", "prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    team = serializers.IntegerField(
        required=False, help_text="Team the token acts in; defaults to your only team (or the current token's)"
    )


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret, shown only in this response")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields



class TeamSecretSerializer(serializers.ModelSerializer):
    """A team secret as listed: its name, who set it and when; never its value."""

    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    updated_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    reference = serializers.SerializerMethodField(help_text="What a config writes to use it")

    class Meta:
        model = TeamSecret
        fields = ["name", "reference", "created_by", "created_at", "updated_by", "updated_at"]
        read_only_fields = fields

    def get_reference(self, secret: TeamSecret) -> str:
        return "${secret:" + secret.name + "}"


class TeamSecretCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=50, help_text="Letters, digits and _ (e.g. JUDGE_API_KEY)")
    value = serializers.CharField(write_only=True, trim_whitespace=False, style={"input_type": "password"},
                                  help_text="Stored encrypted; never shown again")


class TeamSecretValueSerializer(serializers.Serializer):
    value = serializers.CharField(write_only=True, trim_whitespace=False, style={"input_type": "password"},
                                  help_text="The new value; stored encrypted, never shown again")
