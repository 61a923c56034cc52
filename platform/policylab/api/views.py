"""REST endpoints: thin wrappers that fetch through accounts.scoping and call the services."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from policylab.accounts import team_secrets
from policylab.accounts.models import ApiToken, Team
from policylab.accounts.scoping import default_team, teams_of
from policylab.accounts.services import create_api_token, revoke_api_token
from policylab.accounts.team_secrets import SecretError
from policylab.api import serializers as s
from policylab.experiments import selectors, services
from policylab.experiments.config_editor import validation_payload
from policylab.experiments.models import RunStatus
from policylab.ids import MAX_ID, parse_id
from policylab.tracking.selectors import history_runs
from trainer.config import config_json_schema

BAD_REQUEST = OpenApiResponse(s.ErrorSerializer, description="Invalid input; nothing was saved")
NOT_FOUND = OpenApiResponse(s.ErrorSerializer, description="No such object in your teams")
FORBIDDEN = OpenApiResponse(s.ErrorSerializer, description="Your role in the team is read-only")
CONFLICT = OpenApiResponse(s.ErrorSerializer, description="The run's state does not allow this")
OVER_QUOTA = OpenApiResponse(
    s.ErrorSerializer, description="The team already has as many live runs as this deployment allows"
)


ID_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_ID}


def invalid(field: str, message: str) -> services.ValidationFailed:
    return services.ValidationFailed([services.issue(field, message)])


class ProjectList(generics.ListCreateAPIView):
    serializer_class = s.ProjectSerializer

    def get_queryset(self):
        return selectors.projects_for(self.request.user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.create_project(
            data["team"], data["name"], user=self.request.user, description=data.get("description", "")
        )


def int_param(request, name: str) -> int | None:
    """An id from the query string; anything else (past 64 bits included) is a 400 naming `name`."""
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    parsed = parse_id(value)
    if parsed is None:
        raise invalid(name, f"expected an id (a whole number from 0 to {MAX_ID}), got {value[:40]!r}")
    return parsed


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter("project", ID_SCHEMA, description="Only experiments of this project"),
            OpenApiParameter("tag", str, description="Only experiments carrying this tag"),
        ]
    )
)
class ExperimentList(generics.ListAPIView):
    serializer_class = s.ExperimentSerializer

    def get_queryset(self):
        experiments = selectors.experiments_for(self.request.user)
        project = int_param(self.request, "project")
        if project is not None:
            experiments = experiments.filter(project_id=project)
        tag = self.request.query_params.get("tag")
        if tag:
            experiments = [e for e in experiments if tag in e.tags]  # JSON contains differs across backends
        return experiments

    @extend_schema(
        request=s.ExperimentCreateSerializer,
        responses={201: s.ExperimentSerializer, 400: BAD_REQUEST, 403: FORBIDDEN},
        description="Validate a config (JSON object or YAML text, any supported format) and save it as a new "
        "immutable experiment. An invalid config answers 400 with every error by field; nothing is saved.",
    )
    def post(self, request):
        body = s.ExperimentCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        project = selectors.projects_for(request.user).filter(pk=data["project"]).first()
        if project is None:
            raise invalid("project", f"no project {data['project']} in your teams (GET /api/projects/)")
        experiment = services.create_experiment(
            project,
            data["name"],
            data["config"],
            user=request.user,
            description=data["description"],
            tags=data["tags"],
            source_format=data["source_format"],
            overrides=services.normalise_overrides(data["overrides"]),
        )
        return Response(s.ExperimentSerializer(experiment).data, status=status.HTTP_201_CREATED)


class ExperimentDetail(generics.RetrieveDestroyAPIView):
    serializer_class = s.ExperimentSerializer

    def get_queryset(self):
        return selectors.experiments_for(self.request.user)

    @extend_schema(
        responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT},
        description="Delete (archive) the experiment and its runs: team admins only; refused while a run is "
        "live. Soft: nothing is erased, but it is gone from every list and answers 404 from then on.",
    )
    def delete(self, request, *args, **kwargs):
        services.archive_experiment(self.get_object(), request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExperimentRuns(generics.ListAPIView):
    serializer_class = s.RunSerializer

    def get_experiment(self):
        return get_object_or_404(selectors.experiments_for(self.request.user), pk=self.kwargs["pk"])

    def get_queryset(self):
        return selectors.runs_for(self.request.user).filter(experiment=self.get_experiment()).prefetch_related("attempts")

    @extend_schema(
        request=s.LaunchSerializer,
        responses={201: s.RunSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND, 429: OVER_QUOTA},
        description="Launch a new run of the experiment (optionally with dotlist overrides). 400 names a field "
        "over one of the deployment's quotas (steps per run, samples per step); 429 when the team's live runs "
        "fill its quota of concurrent runs.",
    )
    def post(self, request, pk: int):
        experiment = self.get_experiment()
        body = s.LaunchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.launch_run(experiment, request.user, body.validated_data["overrides"])
        return Response(s.RunSerializer(run).data, status=status.HTTP_201_CREATED)


MAX_SEARCH_CHARS = 200


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter("experiment", str, description="Only runs of this experiment: its id (digits), or "
                             "its name (the runs of every experiment of that name)"),
            OpenApiParameter("search", str, description="Runs whose experiment name, description, project or "
                             "tags, or whose message, hold this text (ignoring case), or the run of this id: "
                             "the History page's search"),
            OpenApiParameter("status", str, enum=list(RunStatus.values), description="Only runs in this status"),
        ]
    )
)
class RunList(generics.ListAPIView):
    serializer_class = s.RunSerializer

    def get_queryset(self):
        search = self.request.query_params.get("search", "").strip()
        if len(search) > MAX_SEARCH_CHARS:
            raise invalid("search", f"at most {MAX_SEARCH_CHARS} characters")
        runs = history_runs(self.request.user, search=search).prefetch_related("attempts")
        experiment = self.request.query_params.get("experiment", "")
        if experiment.isascii() and experiment.isdigit():  # an id (past 64 bits: a 400 naming the parameter)
            runs = runs.filter(experiment_id=int_param(self.request, "experiment"))
        elif experiment:
            runs = runs.filter(experiment__name=experiment)
        status_filter = self.request.query_params.get("status")
        if status_filter:
            if status_filter not in RunStatus.values:
                raise invalid("status", f"expected one of {', '.join(RunStatus.values)}, got {status_filter!r}")
            runs = runs.filter(status=status_filter)
        return runs


class RunDetail(generics.RetrieveDestroyAPIView):
    serializer_class = s.RunDetailSerializer

    def get_queryset(self):
        return selectors.runs_for(self.request.user).prefetch_related("attempts")

    @extend_schema(
        responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT},
        description="Delete (archive) a finished run: team admins only; a live run must be cancelled first. "
        "Soft: nothing is erased, but it is gone from every list and answers 404 from then on.",
    )
    def delete(self, request, *args, **kwargs):
        services.archive_run(self.get_object(), request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunAction(APIView):
    """Base of the POST actions on one run."""

    def get_run(self):
        return get_object_or_404(selectors.runs_for(self.request.user), pk=self.kwargs["pk"])


class RunCancel(RunAction):
    @extend_schema(
        request=None,
        responses={
            202: OpenApiResponse(s.RunSerializer, description="Cancel requested: the run is `cancelling`"),
            200: OpenApiResponse(s.RunSerializer, description="Already cancelling or cancelled: the run as it is"),
            403: FORBIDDEN, 404: NOT_FOUND,
            409: OpenApiResponse(s.ErrorSerializer, description="The run already succeeded or failed"),
        },
        description="Cancel a run. Idempotent: asking again answers 200 with the current state. Once asked, "
        "the cancel wins: whatever the stopped trainer reports last, the run ends `cancelled`.",
    )
    def post(self, request, pk: int):
        outcome = services.cancel_run(self.get_run(), request.user)
        code = status.HTTP_202_ACCEPTED if outcome.requested else status.HTTP_200_OK
        return Response(s.RunSerializer(outcome.run).data, status=code)


class RunResume(RunAction):
    @extend_schema(
        request=s.ResumeSerializer,
        responses={201: s.RunSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT,
                   429: OVER_QUOTA},
        description="Resume from the latest resumable checkpoint (same run, new attempt) or an earlier one (new "
        "child run). 400 names a checkpoint that retention pruned or that is gone from disk; 409 while the "
        "run is live or cancelling, or when it already finished all its steps.",
    )
    def post(self, request, pk: int):
        run = self.get_run()
        body = s.ResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        resumed = services.resume_run(run, request.user, body.validated_data["checkpoint"])
        return Response(s.RunSerializer(resumed).data, status=status.HTTP_201_CREATED)


class RunFork(RunAction):
    @extend_schema(
        request=s.ForkSerializer,
        responses={201: s.RunSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND, 429: OVER_QUOTA},
        description="A new experiment (this run's config plus overrides) and a run starting from the checkpoint.",
    )
    def post(self, request, pk: int):
        run = self.get_run()
        body = s.ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        child = services.fork_run(run, request.user, data["checkpoint"], data["overrides"], data.get("name"))
        return Response(s.RunSerializer(child).data, status=status.HTTP_201_CREATED)


class ConfigSchema(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT}, description="JSON Schema of the native config.")
    def get(self, request):
        return Response(config_json_schema())


class ConfigValidate(APIView):
    @extend_schema(
        request=s.ConfigValidateSerializer,
        responses={
            200: s.ConfigValidationSerializer,
            400: OpenApiResponse(
                s.ErrorSerializer,
                description="An invalid config: the whole validation result (the 200 shape, ok=false), whose "
                "errors and warnings are this shape's; a malformed request: errors and warnings only",
            ),
        },
        description="Validate a config without saving it: errors by field, warnings, derived values "
        "(global batch, optimizer steps per rollout, dp sizes), the detected source format and native YAML.",
    )
    def post(self, request):
        body = s.ConfigValidateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        payload = validation_payload(data["config"], services.normalise_overrides(data["overrides"]), data["source_format"])
        return Response(payload, status=status.HTTP_200_OK if payload["ok"] else status.HTTP_400_BAD_REQUEST)


class TokenList(generics.ListAPIView):
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user, team__in=teams_of(self.request.user))

    @extend_schema(request=s.ApiTokenCreateSerializer, responses={201: s.IssuedTokenSerializer, 400: BAD_REQUEST})
    def post(self, request):
        body = s.ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team_id = body.validated_data.get("team")
        team = default_team(request.user) if team_id is None else teams_of(request.user).filter(pk=team_id).first()
        if team is None:
            raise invalid("team", "name one of your teams (the team the token acts in)")
        issued = create_api_token(request.user, team, body.validated_data["name"])
        data = s.IssuedTokenSerializer(issued.token).data
        data["token"] = issued.secret
        return Response(data, status=status.HTTP_201_CREATED)


class TokenDetail(generics.RetrieveDestroyAPIView):
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user, team__in=teams_of(self.request.user))

    @extend_schema(responses={204: None, 404: NOT_FOUND}, description="Revoke the token (it stops working at once).")
    def delete(self, request, *args, **kwargs):
        revoke_api_token(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


def member_team(request, team_id: int) -> Team:
    """One of the user's teams (another team's is a 404, as everywhere)."""
    return get_object_or_404(teams_of(request.user), pk=team_id)


def secret_failed(error: SecretError) -> services.ValidationFailed:
    return invalid(error.field, str(error))


class TeamSecretList(generics.ListAPIView):
    """A team's secrets: names, who set them and when (every member, viewers included); never a value."""

    serializer_class = s.TeamSecretSerializer
    pagination_class = None

    def get_queryset(self):
        return team_secrets.secrets_of(member_team(self.request, self.kwargs["team_id"]))

    @extend_schema(request=s.TeamSecretCreateSerializer,
                   responses={201: s.TeamSecretSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND},
                   description="Store a secret (admins); a config uses it as ${secret:NAME}. An existing name is "
                               "replaced (200).")
    def post(self, request, team_id: int):
        team = member_team(request, team_id)
        body = s.TeamSecretCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            secret, created = team_secrets.set_secret(team=team, name=body.validated_data["name"],
                                                      value=body.validated_data["value"], user=request.user)
        except SecretError as error:
            raise secret_failed(error) from None
        return Response(s.TeamSecretSerializer(secret).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class TeamSecretDetail(generics.RetrieveAPIView):
    """One secret by name: listed (GET), set or replaced (PUT), deleted (DELETE); the last two need an admin,
    checked before the name is looked up."""

    serializer_class = s.TeamSecretSerializer
    lookup_field = "name"

    def get_queryset(self):
        return team_secrets.secrets_of(member_team(self.request, self.kwargs["team_id"]))

    @extend_schema(request=s.TeamSecretValueSerializer,
                   responses={200: s.TeamSecretSerializer, 201: s.TeamSecretSerializer, 400: BAD_REQUEST,
                              403: FORBIDDEN, 404: NOT_FOUND},
                   description="Set the secret's value (admins): 201 when new, 200 when replaced.")
    def put(self, request, team_id: int, name: str):
        team = member_team(request, team_id)
        body = s.TeamSecretValueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            secret, created = team_secrets.set_secret(team=team, name=name, value=body.validated_data["value"],
                                                      user=request.user)
        except SecretError as error:
            raise secret_failed(error) from None
        return Response(s.TeamSecretSerializer(secret).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND},
                   description="Delete the secret (admins); runs that name it can no longer start.")
    def delete(self, request, team_id: int, name: str):
        if not team_secrets.delete_secret(team=member_team(request, team_id), name=name, user=request.user):
            raise NotFound(f"team has no secret named {name[:60]!r}")
        return Response(status=status.HTTP_204_NO_CONTENT)
