"""docker/kubernetes, checked without a cluster: every manifest against the Kubernetes API's own
schemas (kubernetes-validate bundles them; strict, so a misspelled field such as `livenesProbe`
fails instead of being dropped by the API server), and against this project: the settings are
keys the pipeline reads, the secrets are the files those keys name, the images and the user are
docker/Dockerfile's, the probes follow the contract (readiness on /healthz, a liveness that an
outage of the source cannot fail) and the grace period covers the scheduler's stop bound."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from pipeline.cli.parser import build_parser
from pipeline.ops.policy import SHUTDOWN_SECONDS
from pipeline.settings.keys import ENV_KEYS
from tests.conftest import ROOT

FOLDER = ROOT / "docker" / "kubernetes"
KUBERNETES = "1.30.0"  # the oldest minor still supported upstream when this was written


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _resources() -> list[dict]:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"] for doc in _documents(FOLDER / name)]


def _by_kind(kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in _resources() if doc["kind"] == kind}


def test_the_kustomization_names_every_manifest():
    listed = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in FOLDER.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("resource", _resources(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_manifest_is_valid_against_the_kubernetes_schemas(resource):
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def test_the_validation_would_catch_a_misspelled_field():
    deployment = copy.deepcopy(_by_kind("Deployment")["event-lake"])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["livenesProbe"] = container.pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def test_the_settings_are_keys_the_pipeline_reads_and_the_secrets_the_files_they_name():
    settings = _by_kind("ConfigMap")["event-lake-settings"]["data"]
    assert set(settings) <= set(ENV_KEYS), set(settings) - set(ENV_KEYS)
    # no secret in the ConfigMap: each secret key is given as its _FILE
    for key in ("SOURCE_PG_DSN", "DUCKLAKE_CATALOG", "DUCKLAKE_CATALOG_READER", "S3_SECRET_ACCESS_KEY",
                "METRICS_TOKEN"):
        assert key not in settings and f"{key}_FILE" in settings, key
    pod = _by_kind("Deployment")["event-lake"]["spec"]["template"]["spec"]
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "secrets"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "secrets"]
    mounted = {f"{mount['mountPath']}/{item['path']}" for item in volume["secret"]["items"]}
    named = {value for key, value in settings.items() if key.endswith("_FILE")}
    assert named == mounted


def test_the_images_and_user_are_the_dockerfiles_and_the_command_is_the_clis():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    images = {compose["x-spark"]["image"], compose["x-pipeline"]["image"]}
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    [uid] = re.findall(r"useradd .*--uid (\d+)", dockerfile)
    parser_flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    for name, deployment in _by_kind("Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and str(pod["securityContext"]["runAsUser"]) == uid
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            assert container["image"] in images, (name, container["image"])
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["resources"]["limits"], name
    args = _by_kind("Deployment")["event-lake"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--")] and {a for a in args if a.startswith("--")} <= parser_flags


def test_the_pipeline_is_ready_on_healthz_and_alive_whatever_its_sources_state():
    settings = _by_kind("ConfigMap")["event-lake-settings"]["data"]
    pod = _by_kind("Deployment")["event-lake"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    [port] = container["ports"]
    assert str(port["containerPort"]) == settings["METRICS_PORT"] and settings["METRICS_HOST"] == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    # /healthz answers 503 while the source is down: a liveness on it would restart a pipeline
    # that is waiting correctly, so liveness only asks that the process answers
    assert "httpGet" not in container["livenessProbe"] and container["livenessProbe"]["tcpSocket"]
    assert pod["terminationGracePeriodSeconds"] >= SHUTDOWN_SECONDS + 10
    assert _by_kind("Deployment")["event-lake"]["spec"]["strategy"] == {"type": "Recreate"}


# what a readiness probe of docker/probe.py waits for: another workload (by what it runs) having
# reached this one (the master is ready once a worker registered with it)
PROBE_WAITS_FOR = {"spark-master": "org.apache.spark.deploy.worker.Worker"}


def test_no_workload_waits_to_be_ready_for_another_that_can_reach_it_only_once_it_is_ready():
    """The Spark cluster never formed: the master is ready only once a worker registered, workers
    reach it through its Service, and a Service routes only to ready pods — unless it publishes
    the addresses of pods not ready yet. Derived from the manifests: every such wait is a cycle."""
    deployments, services = _by_kind("Deployment"), _by_kind("Service")

    def runs(deployment: dict) -> str:
        return " ".join(" ".join(c.get("args", [])) for c in deployment["spec"]["template"]["spec"]["containers"])

    def serving(name: str) -> list[dict]:
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        return [s for s in services.values() if s["spec"]["selector"].items() <= labels.items()]

    cycles = []
    for name, deployment in deployments.items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            command = container.get("readinessProbe", {}).get("exec", {}).get("command", [])
            if command[:1] != ["event-lake-probe"] or command[1] not in PROBE_WAITS_FOR:
                continue
            waited = [other for other, d in deployments.items() if PROBE_WAITS_FOR[command[1]] in runs(d)]
            assert waited, (name, command)
            for other in waited:
                routes = [s for s in serving(name) if s["metadata"]["name"] in runs(deployments[other])]
                assert routes, f"{other} does not reach {name} by any Service"
                cycles += [(name, other, s["metadata"]["name"]) for s in routes
                           if not s["spec"].get("publishNotReadyAddresses")]
    assert not cycles, f"ready only once reached, reachable only once ready: {cycles}"


def test_the_images_are_named_in_one_place_the_kustomization():
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    named = {image["name"]: image for image in kustomization["images"]}
    used = {c["image"].split(":")[0] for d in _by_kind("Deployment").values()
            for c in d["spec"]["template"]["spec"]["containers"]}
    assert used <= set(named), (used, named)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for image in (compose["x-spark"]["image"], compose["x-pipeline"]["image"]):
        name, tag = image.split(":")
        assert named[name]["newTag"] == tag, named[name]  # the tag the compose build makes
