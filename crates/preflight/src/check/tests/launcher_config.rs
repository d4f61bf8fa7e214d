//! The launchers' configuration as they read it: precedence, drop-ins, includes, and files that
//! are absent, huge or garbage.

use super::*;

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        Tree { dir: tempfile::tempdir().unwrap() }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
    fn etc(&self) -> PathBuf {
        self.dir.path().join("etc")
    }
    fn write(&self, rel: &str, text: &str) {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn names(u: &UnitLimit) -> Vec<String> {
    u.lines.iter().map(|s| format!("{}={}", s.file.file_name().unwrap().to_string_lossy(), s.value)).collect()
}

#[test]
fn a_vendor_unit_under_usr_lib_and_drop_ins_of_every_directory_by_name() {
    let t = Tree::new();
    t.write("usr/lib/systemd/system/containerd.service", "[Unit]\n[Service]\nLimitNOFILE=infinity\nLimitMEMLOCK=8M\n");
    // A unit in /lib too: /usr/lib comes first, so this one is not loaded.
    t.write("lib/systemd/system/containerd.service", "[Service]\nLimitMEMLOCK=1K\n");
    t.write("usr/lib/systemd/system/containerd.service.d/10-vendor.conf", "[Service]\nLimitMEMLOCK=16M\n");
    // /run's 10-vendor.conf masks /usr/lib's; /etc's 50-site.conf sorts after both.
    t.write("run/systemd/system/containerd.service.d/10-vendor.conf", "[Service]\nLimitMEMLOCK=32M\n");
    t.write("etc/systemd/system/containerd.service.d/50-site.conf", "# site\n[Service]\n; old\nLimitMEMLOCK=64M\n");
    t.write("etc/systemd/system/containerd.service.d/README", "[Service]\nLimitMEMLOCK=1\n");
    let mut errors = Vec::new();
    let u = unit_limit(&t.etc(), &t.root(), "containerd.service", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(u.unit_file.as_ref().unwrap().ends_with("usr/lib/systemd/system/containerd.service"));
    assert_eq!(names(&u), ["containerd.service=8M", "10-vendor.conf=32M", "50-site.conf=64M"]);
    let effective = u.effective().unwrap();
    assert_eq!((effective.line, effective.value.as_str()), (4, "64M"));
    assert!(effective.at().ends_with("etc/systemd/system/containerd.service.d/50-site.conf:4 `LimitMEMLOCK=64M`"));
    assert_eq!(u.dropin_names, ["10-vendor.conf", "50-site.conf"]);
}

#[test]
fn a_unit_in_etc_replaces_the_vendors_and_other_sections_do_not_count() {
    let t = Tree::new();
    t.write("usr/lib/systemd/system/slurmd.service", "[Service]\nLimitMEMLOCK=infinity\n");
    t.write("etc/systemd/system/slurmd.service", "[Unit]\nLimitMEMLOCK=1\n[Service]\nExecStart=/usr/sbin/slurmd\n");
    let u = unit_limit(&t.etc(), &t.root(), "slurmd.service", &mut Vec::new());
    assert!(u.unit_file.unwrap().starts_with(t.etc()));
    assert!(u.lines.is_empty(), "{:?}", u.lines);
    let none = unit_limit(&t.etc(), &t.root(), "absent.service", &mut Vec::new());
    assert_eq!(none, UnitLimit::default());
}

#[test]
fn crio_reads_crio_conf_then_its_drop_ins_the_last_winning() {
    let t = Tree::new();
    let mut errors = Vec::new();
    assert_eq!(crio_default_memlock(&t.etc(), &mut errors), None);
    t.write(
        "etc/crio/crio.conf",
        "[crio]\n[crio.runtime]\ndefault_runtime = \"runc\"\ndefault_ulimits = [\n  \"nofile=1048576:1048576\",\n  \
            \"memlock=8388608:8388608\", # kernel default\n]\n[crio.image]\ndefault_ulimits = [\"memlock=1:1\"]\n",
    );
    let s = crio_default_memlock(&t.etc(), &mut errors).unwrap();
    assert_eq!((s.line, s.value.as_str()), (4, "memlock=8388608:8388608"), "{s:?}");
    t.write("etc/crio/crio.conf.d/10-rdma.conf", "[crio.runtime]\ndefault_ulimits = ['memlock=-1:-1']\n");
    t.write("etc/crio/crio.conf.d/05-base.conf", "[crio.runtime]\ndefault_ulimits = [\"memlock=65536:65536\"]\n");
    let s = crio_default_memlock(&t.etc(), &mut errors).unwrap();
    assert!(s.file.ends_with("10-rdma.conf") && s.value == "memlock=-1:-1", "{s:?}");
    // A drop-in that sets the key without memlock resets it.
    t.write("etc/crio/crio.conf.d/20-nofile.conf", "[crio.runtime]\ndefault_ulimits = [\"nofile=1024:1024\"]\n");
    let s = crio_default_memlock(&t.etc(), &mut errors).unwrap();
    assert!(s.file.ends_with("20-nofile.conf") && s.value.is_empty(), "{s:?}");
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn sshd_use_pam_first_value_wins_through_includes() {
    let t = Tree::new();
    let mut errors = Vec::new();
    assert_eq!(sshd_use_pam(&t.etc(), &mut errors), None, "no sshd_config: not known");
    t.write("etc/ssh/sshd_config", "Include /etc/ssh/sshd_config.d/*.conf\nPort 22\nUsePAM yes\n");
    assert_eq!(sshd_use_pam(&t.etc(), &mut errors).map(|u| u.0), Some(true));
    t.write("etc/ssh/sshd_config.d/50-hardening.conf", "# hardening\nUsePAM no\n");
    t.write("etc/ssh/sshd_config.d/60-later.conf", "UsePAM yes\n");
    let (on, at) = sshd_use_pam(&t.etc(), &mut errors).unwrap();
    assert!(!on && at.ends_with("50-hardening.conf:2 `UsePAM no`"), "{at}");
    t.write("etc/ssh/sshd_config", "Port 22\nMatch User x\n  UsePAM yes\n");
    let (on, at) = sshd_use_pam(&t.etc(), &mut errors).unwrap();
    assert!(!on && at.contains("default is no"), "{at}");
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn pam_limits_in_sshds_stack_through_includes() {
    let t = Tree::new();
    let mut errors = Vec::new();
    assert_eq!(sshd_pam_limits(&t.etc(), &mut errors), None);
    // Debian: pam_limits in sshd's own file, after @include common-session.
    t.write(
        "etc/pam.d/sshd",
        "@include common-auth\nsession [success=ok ignore=ignore module_unknown=ignore default=bad] pam_selinux.so \
            close\n@include common-session\nsession    required     pam_limits.so\n",
    );
    t.write("etc/pam.d/common-session", "session required pam_unix.so\n");
    let found = sshd_pam_limits(&t.etc(), &mut errors).unwrap().unwrap();
    assert_eq!((found.line, found.value.as_str()), (4, "required"));
    // Red Hat: in password-auth, which sshd includes.
    t.write("etc/pam.d/sshd", "auth substack password-auth\nsession include password-auth\n");
    t.write("etc/pam.d/password-auth", "session optional pam_keyinit.so revoke\n-session required pam_limits.so\n");
    let found = sshd_pam_limits(&t.etc(), &mut errors).unwrap().unwrap();
    assert!(found.file.ends_with("password-auth") && found.line == 2, "{found:?}");
    // Commented out, or only in another stack (auth): not there.
    t.write("etc/pam.d/sshd", "#session required pam_limits.so\nauth required pam_limits.so\n@include sshd\n");
    assert_eq!(sshd_pam_limits(&t.etc(), &mut errors), Some(None), "a self-include ends at the depth bound");
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn huge_or_garbage_files_are_errors_naming_the_file() {
    let t = Tree::new();
    t.write("etc/pam.d/sshd", &"x".repeat(2 << 20));
    t.write("etc/ssh/sshd_config", "\u{0}\u{1}UsePAM\n");
    t.write("etc/crio/crio.conf", "[crio.runtime\ndefault_ulimits = [\"memlock=");
    std::fs::create_dir_all(t.etc().join("systemd/system/x.service")).unwrap();
    let mut errors = Vec::new();
    assert_eq!(sshd_pam_limits(&t.etc(), &mut errors), None);
    assert!(errors.iter().any(|e| e.contains("pam.d/sshd") && e.contains("larger than")), "{errors:?}");
    assert_eq!(sshd_use_pam(&t.etc(), &mut errors).map(|u| u.0), Some(false));
    let _ = crio_default_memlock(&t.etc(), &mut errors);
    let u = unit_limit(&t.etc(), &t.root(), "x.service", &mut errors);
    assert!(u.lines.is_empty());
    assert!(errors.iter().any(|e| e.contains("x.service")), "a directory where the unit should be: {errors:?}");
}
