//! The layers are crates, and the manifests say which may depend on which: this test reads them
//! through `cargo metadata`, so a new edge between members fails here before review. The fuzz
//! crates too: each depends on the one crate whose parsers it fuzzes.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each member and the members it may depend on (normal and dev-dependencies alike).
const ALLOWED: &[(&str, &[&str])] = &[
    ("memlock-kernel", &[]),
    ("memlock-core", &["memlock-kernel"]),
    ("memlock-http", &["memlock-kernel"]),
    ("memlock-preflight", &["memlock-kernel", "memlock-core"]),
    ("memlock-exporter", &["memlock-kernel", "memlock-core", "memlock-http", "memlock-preflight"]),
];

/// Each cargo-fuzz crate (the members of the fuzz workspace, fuzz/) and the one member whose
/// parsers it fuzzes: its only dependency among the members, so a layer's parsers are fuzzed
/// without the layers above them.
const FUZZED: &[(&str, &str)] = &[
    ("memlock-kernel-fuzz", "memlock-kernel"),
    ("memlock-core-fuzz", "memlock-core"),
    ("memlock-http-fuzz", "memlock-http"),
    ("memlock-preflight-fuzz", "memlock-preflight"),
];

/// Each package of a workspace (this one, or the one whose manifest is `manifest`, from the
/// repository) and its dependencies that are members of this one, as `cargo metadata` reads the
/// manifests.
fn edges(manifest: Option<&str>, members: Option<&BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(["metadata", "--format-version", "1", "--no-deps", "--offline"]);
    if let Some(manifest) = manifest {
        command.arg("--manifest-path").arg(manifest);
    }
    let out = command.current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("a package list");
    let own: BTreeSet<String> = packages.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect();
    let members = members.unwrap_or(&own);
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| members.contains(*d))
                .map(str::to_owned)
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every member's dependencies on other members.
fn member_edges() -> BTreeMap<String, BTreeSet<String>> {
    edges(None, None)
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let edges = member_edges();
    let known: BTreeSet<&str> = ALLOWED.iter().map(|(name, _)| *name).collect();
    let found: BTreeSet<&str> = edges.keys().map(String::as_str).collect();
    assert_eq!(found, known, "the workspace's members changed: say here what each may depend on");
    for (name, allowed) in ALLOWED {
        let allowed: BTreeSet<&str> = allowed.iter().copied().collect();
        let extra: Vec<&String> = edges[*name].iter().filter(|d| !allowed.contains(d.as_str())).collect();
        assert!(extra.is_empty(), "{name} depends on {extra:?}, which its layer may not use");
    }
    assert!(!edges["memlock-preflight"].contains("memlock-http"), "check, estimate and drill need no HTTP code");
}

#[test]
fn each_fuzz_crate_depends_on_its_layer_alone() {
    let members: BTreeSet<String> = member_edges().into_keys().collect();
    let edges = edges(Some("fuzz/Cargo.toml"), Some(&members));
    let known: BTreeSet<&str> = FUZZED.iter().map(|(name, _)| *name).collect();
    let found: BTreeSet<&str> = edges.keys().map(String::as_str).collect();
    assert_eq!(found, known, "the fuzz workspace's members changed: say here which crate each fuzzes");
    for (name, layer) in FUZZED {
        let deps: Vec<&str> = edges[*name].iter().map(String::as_str).collect();
        assert_eq!(deps, [*layer], "{name} must depend on {layer} alone among the workspace's crates");
    }
}
