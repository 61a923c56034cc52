"""Team isolation over the WHOLE URL map: every page and API endpoint that takes an object id
answers 404 to a member of another team (never 403, never the object), and viewers cannot change
anything (403)."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from policylab.accounts.models import Team
from policylab.accounts.services import create_api_token
from policylab.experiments import services
from policylab.experiments.models import Run, RunStatus
from policylab.tracking.models import Checkpoint, RolloutSample, RunProfile

pytestmark = pytest.mark.django_db

ID_KWARG = re.compile(r"^(pk|id|\w+_id|\w+_pk)$")


def id_routes(patterns=None, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Every route of the URL map that takes an object id, as (route, [kwarg names])."""
    patterns = get_resolver().url_patterns if patterns is None else patterns
    routes = []
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes += id_routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            kwargs = [k for k in entry.pattern.regex.groupindex if ID_KWARG.match(k)]
            if kwargs:
                routes.append((route, kwargs))
    return routes


def fill(route: str, value: int) -> str:
    return "/" + re.sub(r"<(?:\w+:)?\w+>", str(value), route)


@pytest.fixture
def team_a(db) -> Team:
    """Team A under an id no object of team B has: team routes (/api/teams/<team_id>/secrets/) take a team's id,
    and team A's own id is A's to see."""
    return Team.objects.create(pk=999_999, name="Team A", slug="team-a")


@pytest.fixture
def team_b_objects(bob, team_b, make_experiment):
    """One object of every kind in team B; team A has none, so an id can only name B's object."""
    experiment = make_experiment(bob, team_b)
    run = Run.objects.create(experiment=experiment, created_by=bob, status=RunStatus.FAILED)
    checkpoint = Checkpoint.objects.create(run=run, step=2, path="/x/step_2", seq=1, created_at=timezone.now())
    token = create_api_token(bob, team_b, "bob's").token
    frames = run.run_dir / "render" / "step_1" / "0_0_grid.txt"
    frames.parent.mkdir(parents=True)
    frames.write_text("# reset\n.P.\n")
    sample = RolloutSample.objects.create(run=run, step=1, sample_index=0, prompt="p", response="r", seq=1, time=0.0,
                                          render_path=str(frames))
    trace = run.run_dir / "profiles" / "step_2" / "actor_train_rank0_train_step.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"{}")
    # its id equals the run's: the route /runs/<run_id>/profiles/<profile_id>/ is filled with one id for both
    RunProfile.objects.create(pk=run.pk, run=run, path=str(trace), step=2, role="actor_train", call="train_step",
                              kind="timeline", format="chrome_trace_gz", seq=2, time=timezone.now())
    return {
        "project": experiment.project.pk, "experiment": experiment.pk, "run": run.pk,
        "checkpoint": checkpoint.pk, "token": token.pk, "sample": sample.pk, "team": team_b.pk,
    }


def test_the_url_map_has_the_object_routes_we_expect():
    routes = {route for route, _ in id_routes()}
    for expected in ("api/experiments/<int:pk>/", "api/runs/<int:pk>/fork/", "experiments/<int:pk>/launch/",
                     "api/tokens/<int:pk>/", "runs/<int:run_id>/"):
        assert expected in routes


def test_a_member_of_another_team_gets_404_for_every_object_route(alice, bob, team_b_objects):
    ids = sorted(set(team_b_objects.values()))
    intruder, owner = Client(), Client()
    intruder.force_login(alice)
    owner.force_login(bob)
    checked = 0
    for route, _ in id_routes():
        seen_by_owner = False
        for method in ("get", "post", "delete"):
            for object_id in ids:
                url = fill(route, object_id)
                response = getattr(intruder, method)(url)
                assert response.status_code in (404, 405), f"{method.upper()} {url} -> {response.status_code} for team A"
                if response.status_code == 404:
                    checked += 1
                    seen_by_owner |= getattr(owner, method)(url).status_code not in (404, 405)
        # The ids name real objects: B's own member reaches the route with at least one of them.
        assert seen_by_owner, f"{route}: no team-B id reached it for team B either; the test would prove nothing"
    assert checked >= 20


def test_an_api_token_sees_only_its_own_team(alice, team_a, team_b, make_experiment):
    from policylab.accounts.models import Membership

    Membership.objects.create(user=alice, team=team_b, role="member")
    theirs = make_experiment(alice, team_b)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(alice, team_a, 'a-only').secret}")
    assert client.get(f"/api/experiments/{theirs.pk}/").status_code == 404
    assert client.get("/api/experiments/").json()["count"] == 0


def test_viewers_read_but_cannot_launch_cancel_resume_fork_or_create(victor, alice, team_a, make_experiment,
                                                                    django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, team_a)
    run = Run.objects.create(experiment=experiment, created_by=alice)
    viewer = Client()
    viewer.force_login(victor)
    assert viewer.get(f"/api/experiments/{experiment.pk}/").status_code == 200
    assert viewer.get(f"/experiments/{experiment.pk}/").status_code == 200
    for url in (f"/api/experiments/{experiment.pk}/runs/", f"/api/runs/{run.pk}/cancel/", f"/api/runs/{run.pk}/resume/",
                f"/api/runs/{run.pk}/fork/", f"/experiments/{experiment.pk}/launch/", f"/runs/{run.pk}/cancel/",
                f"/projects/{experiment.project.pk}/experiments/new/"):
        assert viewer.post(url, content_type="application/json").status_code == 403, url
    response = viewer.post("/api/experiments/", {"project": experiment.project.pk, "name": "v", "config": {}},
                           content_type="application/json")
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.cancel_requested is False and Run.objects.count() == 1
    with pytest.raises(PermissionDenied):
        services.launch_run(experiment, victor)


@pytest.mark.parametrize("older_membership", ["viewer in A", "admin in B"])
def test_the_role_is_the_one_in_the_team_written_to(team_a, team_b, alice, bob, make_experiment, demo_yaml,
                                                    older_membership):
    """Rita is a viewer in team A and an admin in team B: in A she may read but not create or launch
    (403, through the REST API and the HTML forms); in B she may. Both orders of her memberships, so a
    role lookup that ignored the team (reading whichever membership comes first) fails either way."""
    from django.contrib.auth import get_user_model

    from policylab.accounts.models import Membership, Role
    from policylab.experiments.models import Experiment

    rita = get_user_model().objects.create_user("rita", password="pw-rita-123456")
    memberships = [(team_a, Role.VIEWER), (team_b, Role.ADMIN)]
    for team, role in memberships if older_membership == "viewer in A" else memberships[::-1]:
        Membership.objects.create(user=rita, team=team, role=role)
    in_a, in_b = make_experiment(alice, team_a, "a's"), make_experiment(bob, team_b, "b's")
    browser = Client()
    browser.force_login(rita)
    api = {team: Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(rita, team, 'rita').secret}")
           for team in (team_a, team_b)}

    def writes(team, experiment) -> dict[str, int]:
        """The status of each write Rita tries in `team` (`experiment` is one of that team's)."""
        project = experiment.project.pk
        body = {"project": project, "name": f"api in {team.slug}", "config": demo_yaml}
        form = {"name": f"form in {team.slug}", "editor_mode": "yaml", "config_yaml": demo_yaml, "source_format": "auto"}
        return {
            "api create": api[team].post("/api/experiments/", body, content_type="application/json").status_code,
            "api launch": api[team].post(f"/api/experiments/{experiment.pk}/runs/", {},
                                         content_type="application/json").status_code,
            "form create": browser.post(f"/projects/{project}/experiments/new/", form).status_code,
            "form launch": browser.post(f"/experiments/{experiment.pk}/launch/").status_code,
        }

    assert writes(team_a, in_a) == {"api create": 403, "api launch": 403, "form create": 403, "form launch": 403}
    assert not Experiment.objects.filter(project__team=team_a).exclude(pk=in_a.pk).exists()
    assert not Run.objects.filter(experiment=in_a).exists()
    # reading in A is still hers
    assert api[team_a].get(f"/api/experiments/{in_a.pk}/").status_code == 200
    assert browser.get(f"/experiments/{in_a.pk}/").status_code == 200

    assert writes(team_b, in_b) == {"api create": 201, "api launch": 201, "form create": 302, "form launch": 302}
    assert set(Experiment.objects.filter(project__team=team_b).values_list("name", flat=True)) == {
        "b's", "api in team-b", "form in team-b"}
    assert Run.objects.filter(experiment=in_b, created_by=rita).count() == 2
