//! Records the git revision the node is built from (`chorus version`, `/status`, `/metrics`):
//! `CHORUS_GIT_REV` when the build sets it (packaging/Dockerfile, where no .git is copied), else
//! `git rev-parse`; `unknown` outside a git checkout (a source tarball) or without git.

fn main() {
    println!("cargo:rerun-if-env-changed=CHORUS_GIT_REV");
    let given = std::env::var("CHORUS_GIT_REV").ok();
    let rev = given
        .or_else(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
        })
        .map(|s| s.trim().to_owned())
        // Only a revision is believed: anything else (empty, a name, an injected string) is unknown.
        .filter(|s| (4..=40).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CHORUS_GIT_REV={rev}");
    // A new commit changes HEAD or the branch it names; either rebuilds this.
    for path in ["../.git/HEAD", "../.git/refs/heads", "../.git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
