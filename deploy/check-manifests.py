#!/usr/bin/env python3
"""Offline checks of the Kubernetes manifests under deploy/k8s.

Run through deploy/validate.sh, which provides kubernetes-validate (JSON
schemas of every Kubernetes release, bundled in the package: no network).

For every kustomization directory under deploy/k8s:
  1. its resources, rendered with `kubectl kustomize` when kubectl is on PATH
     (so overlays and patches are checked as applied), else read from the
     resource files it lists (patches not applied);
  2. each document is validated strictly (unknown fields are errors) against
     the JSON schema of each Kubernetes version in VERSIONS; a kind with no
     schema is an error too (the CLI only warns);
  3. cross-references: selectors match pod labels, referenced ConfigMaps and
     Secrets and their keys exist, probe and Service ports exist, the Solus
     config inside the ConfigMap parses as TOML, listens on all interfaces on
     the probed ports, names mounted files for --config and auth.tokens_file,
     and the grace period outlasts server.drain_timeout_ms; env valueFrom /
     envFrom and volume `items` name existing ConfigMaps/Secrets and keys;
     with storage.hbase.kerberos.enabled, the keytab is a key of a Secret
     mounted read-only there, krb5_config a key of a mounted ConfigMap or
     Secret, the transport buffered and min_qop a known layer.
Also: every YAML file under deploy/k8s belongs to some kustomization.

Exit status 0 when everything passes, 1 otherwise; one line per problem.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from kubernetes_validate import utils as kv
from kubernetes_validate.version import __version__ as KV_VERSION

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"

# Kubernetes versions each directory is validated against: the oldest we claim
# to support (native gRPC probes are GA since 1.27) and the newest the tool
# knows.
DEFAULT_VERSIONS = ["1.30.0", "1.37.0"]
VERSIONS: dict[str, list[str]] = {}

# server.drain_timeout_ms when the config does not set it.
DEFAULT_DRAIN_MS = 20_000

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}

problems: list[str] = []


def problem(where: str, msg: str) -> None:
    problems.append(f"{where}: {msg}")


def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def read_kustomization(d: Path) -> dict:
    return yaml.safe_load((d / "kustomization.yaml").read_text()) or {}


def raw_resources(d: Path, seen: set[Path] | None = None) -> list[tuple[str, dict]]:
    """Documents of the resource files a kustomization lists, following
    directory resources (bases); patches and images are not applied."""
    seen = seen if seen is not None else set()
    if d in seen:
        return []
    seen.add(d)
    out: list[tuple[str, dict]] = []
    for r in read_kustomization(d).get("resources", []):
        p = (d / r).resolve()
        if p.is_dir():
            out += raw_resources(p, seen)
        else:
            for doc in load_yaml_docs(p.read_text()):
                out.append((str(p.relative_to(ROOT)), doc))
    return out


def rendered_resources(d: Path, kubectl: str) -> list[tuple[str, dict]]:
    res = subprocess.run([kubectl, "kustomize", str(d)], capture_output=True, text=True)
    if res.returncode != 0:
        problem(str(d.relative_to(ROOT)), f"kubectl kustomize failed: {res.stderr.strip()}")
        return []
    where = f"{d.relative_to(ROOT)} (rendered)"
    return [(where, doc) for doc in load_yaml_docs(res.stdout)]


def referenced_files(d: Path) -> set[Path]:
    k = read_kustomization(d)
    files = {d / "kustomization.yaml"}
    for r in k.get("resources", []):
        files.add((d / r).resolve())
    for entry in k.get("patches", []) + k.get("patchesStrategicMerge", []):
        path = entry.get("path") if isinstance(entry, dict) else entry
        if path:
            files.add((d / path).resolve())
    for entry in k.get("patchesJson6902", []):
        files.add((d / entry["path"]).resolve())
    return {f.resolve() for f in files}


def name_of(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def schema_check(where: str, doc: dict, versions: list[str]) -> None:
    for v in versions:
        try:
            kv.validate(doc, v, strict=True)
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problem(where, f"{name_of(doc)} invalid for Kubernetes {e.version}: {path}: {e.message}")
        except kv.SchemaNotFoundError as e:
            problem(where, f"{name_of(doc)}: {e.message}")
        except kv.VersionNotSupportedError:
            problem(where, f"kubernetes-validate {KV_VERSION} does not know Kubernetes {v}")


def selector_matches(selector: dict, labels: dict) -> bool:
    wanted = selector.get("matchLabels", selector)
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def mount_source(pod: dict, container: dict, path: str) -> tuple[str, str, str] | None:
    """(kind, name, key) of the ConfigMap/Secret key a file path is mounted
    from, or None."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if posixpath.dirname(path) != mp or "subPath" in m:
            continue
        v = volumes.get(m["name"], {})
        key = posixpath.basename(path)
        if "configMap" in v:
            return ("ConfigMap", v["configMap"]["name"], key)
        if "secret" in v:
            return ("Secret", v["secret"]["secretName"], key)
    return None


def data_keys(doc: dict) -> set[str]:
    return set(doc.get("data") or {}) | set(doc.get("stringData") or {}) | set(doc.get("binaryData") or {})


def port_of(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def cross_check(where: str, docs: list[dict]) -> None:
    by_kind: dict[str, dict[str, dict]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    configmaps = by_kind.get("ConfigMap", {})
    secrets = by_kind.get("Secret", {})
    services = by_kind.get("Service", {})
    workloads = [d for d in docs if d["kind"] in WORKLOADS]

    def pod_labels_matched(selector: dict) -> bool:
        return any(
            selector_matches(selector, w["spec"]["template"]["metadata"].get("labels", {})) for w in workloads
        )

    for w in workloads:
        wn = name_of(w)
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        if not selector_matches(w["spec"]["selector"], labels):
            problem(where, f"{wn}: spec.selector does not match the pod template labels")
        if w["kind"] == "StatefulSet" and w["spec"].get("serviceName") not in services:
            problem(where, f"{wn}: serviceName {w['spec'].get('serviceName')!r} is not a Service here")
        pod = w["spec"]["template"]["spec"]
        for v in pod.get("volumes", []):
            ref = ("ConfigMap", v["configMap"]["name"], v["configMap"]) if "configMap" in v else None
            if "secret" in v:
                ref = ("Secret", v["secret"]["secretName"], v["secret"])
            if ref and not ref[2].get("optional") and ref[1] not in (configmaps if ref[0] == "ConfigMap" else secrets):
                problem(where, f"{wn}: volume {v['name']!r} refers to missing {ref[0]} {ref[1]!r}")
            elif ref and ref[1] in (configmaps if ref[0] == "ConfigMap" else secrets):
                obj = (configmaps if ref[0] == "ConfigMap" else secrets)[ref[1]]
                for item in ref[2].get("items", []):
                    if item["key"] not in data_keys(obj):
                        problem(where, f"{wn}: volume {v['name']!r} item {item['key']!r} is not a key of {ref[0]} {ref[1]!r}")
        for c in pod.get("containers", []):
            check_env_refs(where, wn, c, configmaps, secrets)
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                grpc = (c.get(probe) or {}).get("grpc")
                if grpc and grpc["port"] not in ports.values():
                    problem(where, f"{wn}: {probe} port {grpc['port']} is not a containerPort")
            check_solus_config(where, w, pod, c, ports, configmaps, secrets)

    for s in services.values():
        sel = s["spec"].get("selector")
        if not sel or not pod_labels_matched(sel):
            problem(where, f"{name_of(s)}: selector matches no pod template here")
            continue
        pods = [w for w in workloads if selector_matches(sel, w["spec"]["template"]["metadata"].get("labels", {}))]
        names = {p.get("name") for w in pods for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        numbers = {p["containerPort"] for w in pods for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        for p in s["spec"].get("ports", []):
            t = p.get("targetPort", p["port"])
            if (isinstance(t, str) and t not in names) or (isinstance(t, int) and t not in numbers):
                problem(where, f"{name_of(s)}: targetPort {t!r} is not a port of its pods")

    for pdb in by_kind.get("PodDisruptionBudget", {}).values():
        if not pod_labels_matched(pdb["spec"].get("selector", {})):
            problem(where, f"{name_of(pdb)}: selector matches no pod template here")


def check_env_refs(where, wn, c, configmaps, secrets) -> None:
    """env valueFrom and envFrom name existing ConfigMaps/Secrets (and keys)."""
    for e in c.get("env", []):
        src = e.get("valueFrom") or {}
        for field, kind, pool in (("configMapKeyRef", "ConfigMap", configmaps), ("secretKeyRef", "Secret", secrets)):
            ref = src.get(field)
            if not ref or ref.get("optional"):
                continue
            if ref["name"] not in pool:
                problem(where, f"{wn}: env {e['name']} refers to missing {kind} {ref['name']!r}")
            elif ref["key"] not in data_keys(pool[ref["name"]]):
                problem(where, f"{wn}: env {e['name']}: {ref['key']!r} is not a key of {kind} {ref['name']!r}")
    for e in c.get("envFrom", []):
        for field, kind, pool in (("configMapRef", "ConfigMap", configmaps), ("secretRef", "Secret", secrets)):
            ref = e.get(field)
            if ref and not ref.get("optional") and ref["name"] not in pool:
                problem(where, f"{wn}: envFrom refers to missing {kind} {ref['name']!r}")


def mount_of(container: dict, path: str) -> dict | None:
    for m in container.get("volumeMounts", []):
        if posixpath.dirname(path) == m["mountPath"].rstrip("/") and "subPath" not in m:
            return m
    return None


def check_kerberos(where, wn, cfg, env, pod, c, configmaps, secrets) -> None:
    """[storage.hbase.kerberos]: what a pod needs for it to work at all."""
    hbase = cfg.get("storage", {}).get("hbase", {})
    k = hbase.get("kerberos", {})
    prefix = "SOLUS__STORAGE__HBASE__KERBEROS__"

    def setting(key, default=""):
        return env.get(prefix + key.upper()) or k.get(key, default)

    enabled = setting("enabled", False)
    if str(enabled).lower() != "true":
        return
    transport = env.get("SOLUS__STORAGE__HBASE__TRANSPORT") or hbase.get("transport", "buffered")
    if transport != "buffered":
        problem(where, f"{wn}: storage.hbase.kerberos needs transport = \"buffered\" (HBase has no SASL on framed), got {transport!r}")
    qop = setting("min_qop", "privacy")
    if qop not in ("authentication", "integrity", "privacy"):
        problem(where, f"{wn}: storage.hbase.kerberos.min_qop {qop!r} is not authentication, integrity or privacy")
    keytab, ticket_cache = setting("keytab"), setting("ticket_cache")
    if not keytab and not ticket_cache:
        problem(where, f"{wn}: storage.hbase.kerberos has neither keytab nor ticket_cache: a pod has no other credentials")
    if keytab:
        src = mount_source(pod, c, keytab)
        if not src or src[0] != "Secret" or src[1] not in secrets or src[2] not in data_keys(secrets[src[1]]):
            problem(where, f"{wn}: storage.hbase.kerberos.keytab {keytab} is not a key of a Secret mounted there")
        elif not (mount_of(c, keytab) or {}).get("readOnly"):
            problem(where, f"{wn}: the keytab's mount {posixpath.dirname(keytab)} is not readOnly")
    krb5 = setting("krb5_config")
    if krb5:
        src = mount_source(pod, c, krb5)
        pool = configmaps if src and src[0] == "ConfigMap" else secrets
        if not src or src[1] not in pool or src[2] not in data_keys(pool[src[1]]):
            problem(where, f"{wn}: storage.hbase.kerberos.krb5_config {krb5} is not a key of a ConfigMap or Secret mounted there")


def check_solus_config(where, w, pod, c, ports, configmaps, secrets) -> None:
    wn = name_of(w)
    args = c.get("args", [])
    if "--config" not in args:
        return
    config_path = args[args.index("--config") + 1]
    src = mount_source(pod, c, config_path)
    if not src or src[0] != "ConfigMap" or src[1] not in configmaps or src[2] not in data_keys(configmaps[src[1]]):
        problem(where, f"{wn}: --config {config_path} is not a key of a ConfigMap mounted there")
        return
    try:
        cfg = tomllib.loads(configmaps[src[1]]["data"][src[2]])
    except tomllib.TOMLDecodeError as e:
        problem(where, f"ConfigMap/{src[1]} {src[2]}: not valid TOML: {e}")
        return
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    check_kerberos(where, wn, cfg, env, pod, c, configmaps, secrets)
    server = cfg.get("server", {})
    listen = env.get("SOLUS__SERVER__LISTEN") or server.get("listen", "127.0.0.1:50051")
    host, port = port_of(listen)
    if host not in ("0.0.0.0", "::"):
        problem(where, f"{wn}: server.listen {listen} is not reachable from outside the pod")
    if ports.get("grpc") != port:
        problem(where, f"{wn}: containerPort `grpc` is {ports.get('grpc')}, server.listen port is {port}")
    # Probes go to server.health_listen (plaintext health only) when set.
    health = env.get("SOLUS__SERVER__HEALTH_LISTEN") or server.get("health_listen")
    probed, what = port, "server.listen"
    if health:
        hhost, probed = port_of(health)
        what = "server.health_listen"
        if hhost not in ("0.0.0.0", "::") or ports.get("health") != probed:
            problem(where, f"{wn}: server.health_listen {health} does not serve containerPort `health` {ports.get('health')}")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        grpc = (c.get(probe) or {}).get("grpc")
        if grpc and grpc["port"] != probed:
            problem(where, f"{wn}: {probe} probes port {grpc['port']}, {what} port is {probed}")
    metrics = env.get("SOLUS__METRICS__LISTEN") or cfg.get("metrics", {}).get("listen")
    if metrics and "metrics" in ports:
        mhost, mport = port_of(metrics)
        if mhost not in ("0.0.0.0", "::") or mport != ports["metrics"]:
            problem(where, f"{wn}: metrics.listen {metrics} does not serve containerPort `metrics` {ports['metrics']}")
    drain_s = int(server.get("drain_timeout_ms", DEFAULT_DRAIN_MS)) / 1000
    pause_s = (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < pause_s + drain_s + 5:
        problem(
            where,
            f"{wn}: terminationGracePeriodSeconds {grace} leaves under 5 s over "
            f"the preStop pause ({pause_s} s) plus the drain ({drain_s:g} s)",
        )
    auth = cfg.get("auth", {})
    files = []
    if auth.get("enabled"):
        files.append(("auth.tokens_file", auth.get("tokens_file")))
    tls = server.get("tls", {})
    for key in ("cert_file", "key_file", "client_ca_file"):
        value = env.get(f"SOLUS__SERVER__TLS__{key.upper()}") or tls.get(key)
        if value:
            files.append((f"server.tls.{key}", value))
    for key, path in files:
        if not path:
            problem(where, f"{wn}: {key} is not set")
            continue
        src = mount_source(pod, c, path)
        pool = configmaps if src and src[0] == "ConfigMap" else secrets
        if not src or src[1] not in pool or src[2] not in data_keys(pool[src[1]]):
            problem(where, f"{wn}: {key} {path} is not a key of a Secret or ConfigMap mounted there")


def main() -> int:
    kubectl = shutil.which(os.environ.get("KUBECTL", "kubectl"))
    print(f"kubernetes-validate {KV_VERSION}; rendering with {'kubectl kustomize' if kubectl else 'nothing (kubectl not found: patches not applied)'}")
    covered: set[Path] = set()
    for d in kustomization_dirs():
        rel = d.relative_to(K8S).as_posix()
        versions = VERSIONS.get(rel, DEFAULT_VERSIONS)
        covered |= referenced_files(d)
        before = len(problems)
        docs = rendered_resources(d, kubectl) if kubectl else raw_resources(d)
        for where, doc in docs:
            schema_check(where, doc, versions)
        # Cross-references assume schema-valid documents: skip them otherwise.
        if len(problems) == before:
            try:
                cross_check(str(d.relative_to(ROOT)), [doc for _, doc in docs])
            except (KeyError, TypeError, ValueError, IndexError) as e:
                problem(str(d.relative_to(ROOT)), f"cross-reference check could not read a field: {e!r}")
        status = "ok" if len(problems) == before else "FAILED"
        print(f"{d.relative_to(ROOT)}: {len(docs)} resources, Kubernetes {', '.join(versions)}: {status}")
    for f in sorted(K8S.rglob("*.y*ml")):
        if f.resolve() not in covered:
            problem(str(f.relative_to(ROOT)), "not listed in any kustomization.yaml (resources or patches)")
    for p in problems:
        print(f"ERROR {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
