"""deploy/compose.yaml parses and everything it references exists and fits together."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import DEPLOY, REPO, assert_valid_cascade_invocation, parse_dockerfile

COMPOSE = DEPLOY / "compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # yaml.safe_load resolves the `<<` merge keys the file uses for shared service settings.
    return yaml.safe_load(COMPOSE.read_text())


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append((source, target))
    return mounts


def test_runs_two_gateway_replicas_with_redis_prometheus_and_grafana(compose) -> None:
    services = _services(compose)
    assert {"gateway", "redis", "prometheus", "grafana"} <= services.keys()
    assert services["gateway"]["deploy"]["replicas"] == 2
    env = services["gateway"]["environment"]
    assert urlparse(env["CASCADE_REDIS_URL"]).hostname == "redis"
    assert env["CASCADE_POLICY"] == env["CASCADE_REDIS_URL"]


def test_every_bind_mount_source_exists(compose) -> None:
    for name, service in _services(compose).items():
        for source, _ in _bind_mounts(service):
            assert (COMPOSE.parent / source).exists(), f"{name}: {source} does not exist"


def test_builds_use_existing_dockerfile_targets(compose) -> None:
    for name, service in _services(compose).items():
        build = service.get("build")
        if build is None:
            continue
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == REPO, name
        _, instructions = parse_dockerfile(context / build["dockerfile"])
        stages = {i.stage for i in instructions}
        assert build["target"] in stages, f"{name}: no Dockerfile stage {build['target']}"


def test_third_party_images_are_pinned_to_exact_versions(compose) -> None:
    for name, service in _services(compose).items():
        if "build" in service:
            continue
        image = service["image"]
        tag = image.rsplit(":", 1)[-1]
        assert ":" in image and tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {image}"
        assert tag.count(".") >= 2, f"{name}: pin an exact version, not {image}"


def test_dependencies_name_defined_services(compose) -> None:
    services = _services(compose)
    for name, service in services.items():
        depends = service.get("depends_on", [])
        for dependency in depends if isinstance(depends, list) else depends.keys():
            assert dependency in services, f"{name} depends on unknown {dependency}"


def test_gateway_image_commands_are_valid_cascade_commands(compose) -> None:
    for name, service in _services(compose).items():
        if "build" not in service or "command" not in service:
            continue
        entrypoint = service.get("entrypoint", ["cascade"])
        assert entrypoint == ["cascade"], name
        assert_valid_cascade_invocation(service["command"])


def test_prometheus_discovers_every_gateway_replica_on_its_served_port(compose) -> None:
    services = _services(compose)
    command = services["gateway"]["command"]
    port = int(command[command.index("--port") + 1])
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "cascade-gateway")
    # DNS service discovery: the service name resolves to one A record per replica.
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["gateway"] and sd["type"] == "A" and sd["port"] == port
    mounts = dict(_bind_mounts(services["prometheus"]))
    assert mounts["./prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert mounts["./prometheus/rules"] == "/etc/prometheus/rules"
    assert config["rule_files"] == ["rules/*.yml"]


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboard(compose) -> None:
    services = _services(compose)
    mounts = dict(_bind_mounts(services["grafana"]))
    provisioning = DEPLOY / "grafana" / "provisioning"
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())
    datasource = datasources["datasources"][0]
    url = urlparse(datasource["url"])
    assert url.hostname == "prometheus" and url.hostname in services
    assert f"{url.port}:{url.port}" in services["prometheus"]["ports"]
    assert datasource["uid"] == "prometheus"
    provider = yaml.safe_load((provisioning / "dashboards" / "cascade.yaml").read_text())["providers"][0]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (DEPLOY / "grafana" / "dashboards" / home.rsplit("/", 1)[1]).is_file()


def test_gateway_config_upstreams_resolve_to_the_model_pool_service(compose) -> None:
    from gateway.config.settings import Settings

    services = _services(compose)
    settings = Settings.from_mapping(yaml.safe_load((DEPLOY / "config" / "gateway.yaml").read_text()))
    for model in settings.models.values():
        assert urlparse(model.base_url).hostname in services


def test_example_upstreams_are_the_default_models_of_the_local_pool(compose) -> None:
    # The example config names the pool's models by their upstream id and port, so the compose and
    # k8s `models` service (the demo image running `cascade models up`) is exactly what it calls.
    from gateway.config.settings import Settings
    from localpool.manifest import load_manifest

    manifest = load_manifest()
    settings = Settings.from_mapping(yaml.safe_load((DEPLOY / "config" / "gateway.yaml").read_text()))
    pool_defaults = {name for name, spec in manifest.models.items() if spec.default}
    assert {model.model for model in settings.models.values()} == pool_defaults
    for model in settings.models.values():
        assert urlparse(model.base_url).port == manifest.models[model.model].port
    command = _services(compose)["models"]["command"]
    assert command[:2] == ["models", "up"] and "--foreground" in command
    healthcheck = " ".join(_services(compose)["models"]["healthcheck"]["test"])
    assert any(f":{spec.port}/health" in healthcheck for spec in manifest.models.values())
