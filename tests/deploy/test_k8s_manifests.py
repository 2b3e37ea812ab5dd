"""The Kubernetes manifests parse, reference only what exists, and carry the operational must-haves."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from deploy_support import DEPLOY, load_yaml_documents

K8S = DEPLOY / "k8s"


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_yaml_documents(path):
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} defined twice"
            found[key] = doc
    return found


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def _gateway(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return objects[("Deployment", "cascade-gateway")]


def test_every_namespaced_object_lives_in_the_cascade_namespace(objects) -> None:
    assert ("Namespace", "cascade") in objects
    for (kind, name), obj in objects.items():
        if kind != "Namespace":
            assert obj["metadata"].get("namespace") == "cascade", (kind, name)


def test_gateway_probes_use_readyz_and_healthz_on_the_served_port(objects) -> None:
    container = _pod_spec(_gateway(objects))["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] in port_names
    args = container["args"]
    assert args[0] == "serve"
    assert int(args[args.index("--port") + 1]) == port_names["http"]


def test_every_container_is_non_root_read_only_with_requests_and_limits(objects) -> None:
    for (kind, name), obj in objects.items():
        if kind not in ("Deployment", "Job"):
            continue
        pod = _pod_spec(obj)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"].get("runAsUser", 0) != 0, name
        assert pod.get("automountServiceAccountToken") is False, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), name
            assert {"cpu", "memory"} <= container["resources"]["limits"].keys(), name


def test_selectors_and_scale_targets_match_the_gateway_pods(objects) -> None:
    gateway = _gateway(objects)
    pod_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert gateway["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert objects[("Service", "cascade-gateway")]["spec"]["selector"].items() <= pod_labels.items()
    pdb = objects[("PodDisruptionBudget", "cascade-gateway")]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] < gateway["spec"]["replicas"]
    hpa = objects[("HorizontalPodAutoscaler", "cascade-gateway")]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "cascade-gateway",
    }
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] >= 2
    redis = objects[("Deployment", "cascade-redis")]
    assert (
        objects[("Service", "cascade-redis")]["spec"]["selector"].items()
        <= redis["spec"]["template"]["metadata"]["labels"].items()
    )


def test_volumes_and_secrets_reference_objects_that_exist_or_are_optional(objects) -> None:
    for (kind, name), obj in objects.items():
        if kind not in ("Deployment", "Job"):
            continue
        pod = _pod_spec(obj)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (name, mount)
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    secret = objects.get(("Secret", ref["name"]))
                    assert secret is not None, (name, ref)
                    assert ref["key"] in secret.get("stringData", {}) | secret.get("data", {}), (name, ref)
        for volume in volumes.values():
            if "configMap" in volume:
                config_map = objects[("ConfigMap", volume["configMap"]["name"])]
                for item in volume["configMap"].get("items", []):
                    assert item["key"] in config_map["data"], (name, item)


def test_configmap_is_the_example_config_and_policy_byte_for_byte(objects) -> None:
    data = objects[("ConfigMap", "cascade-gateway-config")]["data"]
    assert data["gateway.yaml"] == (DEPLOY / "config" / "gateway.yaml").read_text()
    assert data["policy.json"] == (DEPLOY / "config" / "policy.json").read_text()


def test_configmap_config_with_the_deployment_env_is_a_valid_gateway_config(objects, monkeypatch) -> None:
    from gateway.config.settings import Settings

    container = _pod_spec(_gateway(objects))["containers"][0]
    for env in container["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"])
    redis_url = objects[("Secret", "cascade-redis")]["stringData"]["url"]
    monkeypatch.setenv("CASCADE_REDIS_URL", redis_url)
    monkeypatch.setenv("CASCADE_POLICY", redis_url)
    data = objects[("ConfigMap", "cascade-gateway-config")]["data"]
    settings = Settings.from_mapping(yaml.safe_load(data["gateway.yaml"]))
    assert settings.policy_is_redis
    assert settings.models["small"].base_url == "http://cascade-models:9001/v1"
    # The bootstrap policy routes only between configured models.
    policy = json.loads(data["policy.json"])
    assert set(policy["models"]) <= set(settings.models)


def test_policy_push_job_pushes_the_configmap_policy_to_the_gateways_redis(objects) -> None:
    job = objects[("Job", "cascade-policy-push")]
    container = _pod_spec(job)["containers"][0]
    assert container["args"][:2] == ["policy", "push"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["args"][2].startswith(mount)
    env = {e["name"]: e for e in container["env"]}
    gateway_env = {e["name"]: e for e in _pod_spec(_gateway(objects))["containers"][0]["env"]}
    assert env["CASCADE_REDIS_URL"]["valueFrom"] == gateway_env["CASCADE_POLICY"]["valueFrom"]
    # The push checks the policy's models against the gateways' own config, mounted beside it.
    config_arg = container["args"][container["args"].index("--config") + 1]
    assert config_arg.startswith(mount)
    (volume,) = _pod_spec(job)["volumes"]
    mounted = {item["path"]: item["key"] for item in volume["configMap"]["items"]}
    assert mounted[config_arg.removeprefix(mount + "/")] == "gateway.yaml"


def test_manifests_validate_strictly_against_the_kubernetes_schemas() -> None:
    import kubernetes_validate

    # Strict: an unknown field (a typo such as `readinesProbe`) is an error, not silently ignored.
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_yaml_documents(path):
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_in_cluster_upstream_urls_reach_the_model_pool_service(objects) -> None:
    from urllib.parse import urlparse

    from localpool.manifest import load_manifest

    service = objects[("Service", "cascade-models")]
    service_ports = {p["port"] for p in service["spec"]["ports"]}
    manifest_ports = {spec.port for spec in load_manifest().models.values() if spec.default}
    assert service_ports == manifest_ports
    container = _pod_spec(_gateway(objects))["containers"][0]
    urls = [e["value"] for e in container["env"] if e["name"].endswith("__BASE_URL")]
    assert urls
    for url in urls:
        parsed = urlparse(url)
        assert parsed.hostname == service["metadata"]["name"] and parsed.port in service_ports
    models = _pod_spec(objects[("Deployment", "cascade-models")])["containers"][0]
    assert models["args"][:2] == ["models", "up"] and "--foreground" in models["args"]
    assert {p["containerPort"] for p in models["ports"]} == manifest_ports


def test_k8s_prometheus_config_keeps_exactly_the_annotated_gateway_pods(objects) -> None:
    # Debian's promtool is built without Kubernetes service discovery, so this config is checked
    # here: its keep rules match the gateway pods' label and annotations, and it loads the rules.
    import re

    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.k8s.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "cascade-gateway"  # the alert rules select on this job name
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["cascade"]
    template = _gateway(objects)["spec"]["template"]["metadata"]
    meta = {f"__meta_kubernetes_pod_label_{k}": v for k, v in template["labels"].items()}
    meta |= {f"__meta_kubernetes_pod_annotation_{k}": v for k, v in template["annotations"].items()}
    meta = {re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in meta.items()}
    keeps = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert len(keeps) == 2
    for rule in keeps:
        (label,) = rule["source_labels"]
        assert re.fullmatch(rule["regex"], meta[label]), label
    address = next(r for r in job["relabel_configs"] if r.get("target_label") == "__address__")
    joined = f"10.0.0.7:1234;{template['annotations']['prometheus.io/port']}"
    match = re.fullmatch(address["regex"], joined)
    assert match and address["replacement"].replace("$1", match[1]).replace("$2", match[2]) == "10.0.0.7:8080"
    assert config["rule_files"] == ["rules/*.yml"]
