//! The settings files shipped under deploy/ (the example, the container
//! default and the Kubernetes ConfigMaps) load with the real config loader,
//! so a renamed or removed key fails here rather than in a pod.

use std::path::{Path, PathBuf};

use solus::config::{Backend, Settings};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The `solus.toml: |` block of a ConfigMap, de-indented.
fn configmap_toml(path: &Path) -> String {
    let yaml = std::fs::read_to_string(path).unwrap();
    let lines = yaml.lines().skip_while(|l| l.trim() != "solus.toml: |").skip(1);
    let first = lines
        .clone()
        .find(|l| !l.trim().is_empty())
        .expect("a non-empty solus.toml block");
    let indent = first.len() - first.trim_start().len();
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn load(toml: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("solus.toml");
    std::fs::write(&file, toml).unwrap();
    Settings::load(Some(&file)).unwrap_or_else(|e| panic!("{e}\n---\n{toml}"))
}

#[test]
fn container_default_config_loads() {
    let s = load(&std::fs::read_to_string(repo("deploy/container.toml")).unwrap());
    assert_eq!(s.server.listen.port(), 50051);
}

#[test]
fn kubernetes_configmaps_load() {
    let hbase = load(&configmap_toml(&repo("deploy/k8s/hbase/configmap.yaml")));
    assert_eq!(hbase.storage.backend, Backend::Hbase);
    assert!(hbase.auth.enabled);
    let embedded = load(&configmap_toml(&repo("deploy/k8s/embedded/configmap.yaml")));
    assert_eq!(embedded.storage.backend, Backend::Embedded);
    assert!(embedded.storage.embedded.fsync);
}

/// deploy/k8s/hbase-kerberos's solus.toml ([storage.hbase.kerberos] enabled),
/// with the keytab and krb5.conf it names (mounted from a Secret and a
/// ConfigMap in a pod) placed in a temp directory, since the loader checks
/// that those files exist.
#[test]
fn kerberos_configmap_loads() {
    let toml = configmap_toml(&repo("deploy/k8s/hbase-kerberos/configmap-patch.yaml"));
    let dir = tempfile::tempdir().unwrap();
    let keytab = dir.path().join("solus.keytab");
    let krb5 = dir.path().join("krb5.conf");
    std::fs::write(&keytab, b"not read at load time").unwrap();
    std::fs::write(&krb5, "[libdefaults]\n").unwrap();
    assert!(toml.contains("\"/etc/solus/kerberos/solus.keytab\"") && toml.contains("\"/etc/solus/krb5/krb5.conf\""));
    let toml = toml
        .replace("/etc/solus/kerberos/solus.keytab", keytab.to_str().unwrap())
        .replace("/etc/solus/krb5/krb5.conf", krb5.to_str().unwrap());
    // The real loader: unknown keys, a bad min_qop, or a keytab / krb5.conf
    // that is not a readable file fail here.
    let s = load(&toml);
    assert_eq!(s.storage.backend, Backend::Hbase);
    assert!(s.auth.enabled);
}
