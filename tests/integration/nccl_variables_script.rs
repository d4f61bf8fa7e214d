//! scripts/nccl_variables.py against a small git repository laid out like NVIDIA/nccl: every way
//! NCCL reads a variable is recognised with its parser, comments are not read, and names an
//! earlier release read (or the guide documents) and this commit does not are listed as removed.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_generator_reads_each_kind_of_variable_from_the_source() {
    let rustfmt = Command::new("rustfmt").arg("--version").output();
    crate::require!(
        rustfmt.is_ok_and(|out| out.status.success()),
        "the generator formats its output with rustfmt, which is not on PATH"
    );
    let tmp = tempfile::Builder::new().prefix("memlock-nccl-script-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    git(&dir, &["init", "-q"]);
    write(&dir, "makefiles/version.mk", "NCCL_MAJOR   := 2\nNCCL_MINOR   := 1\nNCCL_PATCH   := 0\n");
    write(&dir, "src/old.cc", "NCCL_PARAM(Gone, \"GONE_VAR\", 0);\n");
    write(&dir, "src/init.cc", "NCCL_PARAM(BuffSize, \"BUFFSIZE\", -2);\n");
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "first release"]);
    git(&dir, &["tag", "v2.1.0-1"]);
    std::fs::remove_file(dir.join("src/old.cc")).unwrap();
    write(&dir, "makefiles/version.mk", "NCCL_MAJOR   := 2\nNCCL_MINOR   := 2\nNCCL_PATCH   := 3\n");
    write(
        &dir,
        "src/init.cc",
        r#"#define NCCL_PARAM(name, env, deftVal) int64_t ncclParam##name()
NCCL_PARAM(BuffSize, "BUFFSIZE", -2);
NCCL_PARAM(P2pNetChunkSize, "P2P_NET_CHUNKSIZE", (1 << 17)); /* 128 kB */
// NCCL_PARAM(Commented, "COMMENTED_OUT", 0);
/* NCCL_PARAM(Block, "IN_A_BLOCK", 0); */
"#,
    );
    write(
        &dir,
        "src/debug.cc",
        r#"DEFINE_NCCL_PARAM(ncclParamDebugLevel, ncclDebugLogLevel, NCCL_DEBUG, NCCL_LOG_NONE,
                  NCCL_PARAM_FLAG_PUBLISHED,
                  ncclParamOneOf<ncclDebugLogLevel>(makeOptions(
                    makeOption("WARN", NCCL_LOG_WARN, "warnings"),
                    makeOption("INFO", NCCL_LOG_INFO, "info, with (parentheses), and commas")
                  )), "Set debug output level");
DEFINE_NCCL_PARAM(ncclParamSetThreadName, bool, NCCL_SET_THREAD_NAME, false, NCCL_PARAM_FLAG_CACHED, NCCL_PARAM_DEFAULT,
                  "names");
DEFINE_NCCL_PARAM(ncclParamTimeout, uint32_t, NCCL_SOME_TIMEOUT, 5, NCCL_PARAM_FLAG_NONE, NCCL_PARAM_DEFAULT, "t");
"#,
    );
    write(
        &dir,
        "src/graph/paths.cc",
        r#"const char* s = ncclGetEnv("NCCL_IB_HCA");
const char* t = std::getenv("NCCL_CONF_FILE");
NCCLCHECK(ncclGetLevel(&ncclTopoUserP2pLevel, "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"));
NCCLCHECK(ncclGetLevel(&ncclTopoUserGdrLevel, NULL, "NCCL_NET_GDR_LEVEL"));
INFO(NCCL_ENV, "NCCL_NOT_READ is only mentioned in a message");
"#,
    );
    write(
        &dir,
        "docs/userguide/source/env.rst",
        "NCCL_BUFFSIZE\n-------------\n\nNCCL_ONLY_DOCUMENTED\n--------------------\n(deprecated)\n",
    );
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "second"]);
    let out = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/nccl_variables.py"))
        .arg("--git-dir")
        .arg(&dir)
        .args(["--commit", "HEAD"])
        .output()
        .expect("python3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    // One entry per variable, whether rustfmt kept it on one line or not.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ").replace(", }", " }");
    let line = |name: &str| {
        let start = flat.find(&format!("Variable {{ name: \"{name}\"")).unwrap_or_else(|| panic!("{name}:\n{text}"));
        let end = start + flat[start..].find(" }").unwrap();
        flat[start..end].to_owned()
    };
    assert!(line("NCCL_BUFFSIZE").contains("parse: Parse::Strtoll, default: \"-2\", defined_at: \"src/init.cc:2\""));
    assert!(line("NCCL_P2P_NET_CHUNKSIZE").contains("default: \"(1 << 17)\""), "{text}");
    assert!(line("NCCL_DEBUG").contains("Parse::OneOf(&[\"WARN\", \"INFO\"])"), "{text}");
    assert!(line("NCCL_SET_THREAD_NAME").contains("Parse::Bool"));
    assert!(line("NCCL_SOME_TIMEOUT").contains("Parse::DecimalUnsigned"));
    assert!(line("NCCL_IB_HCA").contains("Parse::String"));
    assert!(line("NCCL_CONF_FILE").contains("src/graph/paths.cc:2"));
    assert!(line("NCCL_P2P_DISABLE").contains("Parse::DisableSwitch"));
    assert!(line("NCCL_P2P_LEVEL").contains("Parse::PathLevel"));
    assert!(line("NCCL_NET_GDR_LEVEL").contains("Parse::PathLevel"));
    for absent in ["NCCL_COMMENTED_OUT", "NCCL_IN_A_BLOCK", "NCCL_NOT_READ", "NCCL_GONE_VAR"] {
        assert!(!flat.contains(&format!("Variable {{ name: \"{absent}\"")), "{absent}:\n{text}");
    }
    assert!(text.contains("Removed { name: \"NCCL_GONE_VAR\", last_release: \"v2.1.0-1\" }"), "{text}");
    assert!(text.contains("Removed { name: \"NCCL_ONLY_DOCUMENTED\", last_release: \"\" }"), "{text}");
    assert!(text.contains("pub const NCCL_VERSION: &str = \"2.2.3\";"));
    assert!(text.lines().all(|l| l.len() <= 120), "formatted within 120 columns");
    assert!(stderr.contains("10 variables, 2 removed"), "{stderr}");
}
