//! The layers are crates, and the manifests say which may depend on which: this test reads them
//! through `cargo metadata`, so a new edge between members fails here before review.

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

/// Every member's dependencies on other members, as `cargo metadata` reads the manifests.
fn member_edges() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("a package list");
    let members: BTreeSet<String> = packages.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect();
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
