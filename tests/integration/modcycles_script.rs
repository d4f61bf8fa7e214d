//! scripts/modcycles.py, the module graph's gate, against small source trees: a cycle through a
//! `use crate::{...}` group or `super::`, at the top or between nested siblings, and an import
//! of the preflight half from the daemon fail; test code, comments and strings are not read.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A source tree of `files` (path under src/, text), removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str, files: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("memlock-modcycles-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (rel, text) in files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Tree(dir)
    }

    /// The gate's exit status and output over this tree.
    fn gate(&self) -> (bool, String) {
        let out = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/modcycles.py"))
            .arg(&self.0)
            .output()
            .expect("python3");
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        (out.status.success(), String::from_utf8(out.stdout).unwrap())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const LIB: &str = "pub mod cli;\npub mod kernel;\npub mod preflight;\npub mod serve;\n";

#[test]
fn cycles_and_imports_of_the_preflight_half_fail_and_test_code_is_not_read() {
    let clean = [
        ("lib.rs", LIB),
        ("cli.rs", "use crate::preflight::check::CheckArgs;\nuse crate::serve::ServeArgs;\n"),
        ("kernel/mod.rs", "pub mod limits;\npub mod status;\n"),
        ("kernel/limits.rs", "use super::status::Status;\n"),
        ("kernel/status.rs", "// use super::limits::Limit; in a comment\npub struct Status;\n"),
        ("preflight/mod.rs", "pub mod check;\npub mod machine;\n"),
        ("preflight/check.rs", "use crate::{kernel::limits, preflight::machine::Machine};\n"),
        ("preflight/machine.rs", "use crate::kernel::status::Status;\n"),
        (
            "serve/mod.rs",
            "const HELP: &str = \"see crate::preflight::check\";\n\
             #[cfg(test)]\nmod tests {\n    use crate::preflight::check;\n}\n\
             fn after_the_tests() {\n    let _ = crate::kernel::limits::parse;\n}\n",
        ),
    ];
    let (ok, out) = Tree::new("clean", &clean).gate();
    assert!(ok, "{out}");
    assert!(out.starts_with("module graph: no cycle"), "{out}");

    // The same tree with one edge more each time.
    let with = |name: &str, rel: &str, text: &str| {
        let mut files: Vec<(&str, String)> = clean.iter().map(|(p, t)| (*p, (*t).to_owned())).collect();
        files.iter_mut().find(|(p, _)| *p == rel).unwrap().1.push_str(text);
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        Tree::new(name, &files).gate()
    };
    let (ok, out) = with("group", "preflight/machine.rs", "use crate::{cli::Cli};\n");
    assert!(!ok);
    assert!(out.contains("module cycle: cli <-> preflight\n"), "{out}");
    let (ok, out) = with("super", "kernel/status.rs", "fn f() { let _ = super::limits::parse; }\n");
    assert!(!ok);
    assert!(out.contains("module cycle: kernel::limits <-> kernel::status\n"), "{out}");
    let (ok, out) = with("nested", "preflight/machine.rs", "use crate::preflight::check;\n");
    assert!(!ok);
    assert!(out.contains("module cycle: preflight::check <-> preflight::machine\n"), "{out}");
    // Read only if the code after a test module is.
    let (ok, out) = with("after", "kernel/limits.rs", "use crate::serve;\n");
    assert!(!ok);
    assert!(out.contains("module cycle: kernel <-> serve\n"), "{out}");
    let (ok, out) = with("daemon", "serve/mod.rs", "use crate::{kernel::limits, preflight::machine::Machine};\n");
    assert!(!ok);
    assert!(out.contains("serve imports crate::preflight::machine::Machine: only cli may import"), "{out}");
    // Nor through the command line, which names the preflight commands' flags.
    let (ok, out) = with("through_cli", "serve/mod.rs", "use crate::cli::ServeArgs;\n");
    assert!(!ok);
    assert!(out.contains("serve imports crate::cli::ServeArgs: nothing in the library may import cli"), "{out}");
}
