//! The project's own tiny image, built locally without a registry: Debian's static busybox in a
//! `FROM scratch` image, sent to the Engine as a tar build context.
//!
//! No registry is reachable where CHORUS runs its tests, so nothing is ever pulled. Install the
//! static busybox first (`apt-get install busybox-static`, which provides `/bin/busybox`), then
//! call [`ensure_busybox_image`]. It is idempotent and cheap when the image already exists: the
//! image carries a fingerprint label of the busybox binary and is rebuilt only when that differs.
//!
//! The context holds the binary plus pre-made applet symlinks (`/bin/sh` → `busybox`, …) rather
//! than a `RUN busybox --install`, so building needs no container run and takes well under a
//! second.

use std::collections::HashMap;
use std::path::Path;

use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::Mutex;

use super::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};

/// The tag of the busybox image.
pub const BUSYBOX_IMAGE: &str = "chorus/busybox:latest";

/// Where Debian's `busybox-static` package puts the static binary.
pub const BUSYBOX_HOST_PATH: &str = "/bin/busybox";

/// The label holding the fingerprint of the busybox binary the image was built from.
pub const FINGERPRINT_LABEL: &str = "io.chorus.busybox-fingerprint";

/// Builds [`BUSYBOX_IMAGE`] from [`BUSYBOX_HOST_PATH`] unless it already exists; returns the tag.
pub async fn ensure_busybox_image(docker: &Docker) -> SandboxResult<String> {
    ensure_busybox_image_from(docker, BUSYBOX_IMAGE, Path::new(BUSYBOX_HOST_PATH)).await
}

/// Builds image `tag` from the static busybox binary at `busybox` unless an image with that tag
/// and the same binary's fingerprint already exists; returns the tag.
pub async fn ensure_busybox_image_from(
    docker: &Docker,
    tag: &str,
    busybox: &Path,
) -> SandboxResult<String> {
    // One build at a time in this process: parallel tests would otherwise all build at once.
    static BUILD_LOCK: Mutex<()> = Mutex::const_new(());
    let _guard = BUILD_LOCK.lock().await;

    let binary = tokio::fs::read(busybox).await.map_err(|e| {
        SandboxError::new(
            ErrorCategory::Image,
            format!(
                "cannot read the static busybox at {} ({e}); install it with \
                 `apt-get install busybox-static`",
                busybox.display()
            ),
        )
    })?;
    let fingerprint = format!("{:016x}-{}", fnv1a(&binary), binary.len());

    let existing = unless_answered(
        docker.inspect_image(tag).await,
        &[404],
        ErrorCategory::Image,
        "inspect image",
    )?;
    let fingerprint_label = existing
        .and_then(|image| image.config)
        .and_then(|c| c.labels)
        .and_then(|l| l.get(FINGERPRINT_LABEL).cloned());
    if fingerprint_label.as_deref() == Some(fingerprint.as_str()) {
        return Ok(tag.to_string());
    }

    let applets = list_applets(busybox).await?;
    let context = busybox_context(&binary, &applets)
        .map_err(|e| SandboxError::io("building the image's tar context", e))?;
    let labels: HashMap<&str, &str> = [(FINGERPRINT_LABEL, fingerprint.as_str())].into();
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = stream.next().await {
        step.map_err(|e| SandboxError::from_bollard(ErrorCategory::Image, "build image", e))?;
    }
    tracing::info!(tag, "built the busybox sandbox image");
    Ok(tag.to_string())
}

/// The applet names the binary provides (`busybox --list`).
async fn list_applets(busybox: &Path) -> SandboxResult<Vec<String>> {
    let out = tokio::process::Command::new(busybox)
        .arg("--list")
        .output()
        .await
        .map_err(|e| SandboxError::io(format!("running {} --list", busybox.display()), e))?;
    if !out.status.success() {
        return Err(SandboxError::new(
            ErrorCategory::Image,
            format!("{} --list failed: {}", busybox.display(), out.status),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect())
}

/// The tar build context: a Dockerfile and a `rootfs/` with busybox, its applet links, a
/// minimal `/etc/passwd` (so `id` and git can name uid 65534) and mount points.
pub fn busybox_context(busybox: &[u8], applets: &[String]) -> std::io::Result<Vec<u8>> {
    let dockerfile = "FROM scratch\n\
                      COPY rootfs/ /\n\
                      ENV PATH=/bin\n\
                      CMD [\"sleep\", \"infinity\"]\n";
    let mut tar = tar::Builder::new(Vec::new());
    append_file(&mut tar, "Dockerfile", dockerfile.as_bytes(), 0o644)?;
    for dir in [
        "rootfs/bin",
        "rootfs/etc",
        "rootfs/usr/bin",
        "rootfs/workspace",
    ] {
        append_dir(&mut tar, dir, 0o755)?;
    }
    append_dir(&mut tar, "rootfs/tmp", 0o1777)?;
    append_file(&mut tar, "rootfs/bin/busybox", busybox, 0o755)?;
    for applet in applets {
        append_symlink(&mut tar, &format!("rootfs/bin/{applet}"), "busybox")?;
    }
    // Scripts with `#!/usr/bin/env sh` should work too.
    append_symlink(&mut tar, "rootfs/usr/bin/env", "/bin/busybox")?;
    append_file(
        &mut tar,
        "rootfs/etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n",
        0o644,
    )?;
    append_file(
        &mut tar,
        "rootfs/etc/group",
        b"root:x:0:\nnogroup:x:65534:\n",
        0o644,
    )?;
    tar.into_inner()
}

fn append_file(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    data: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, data)
}

fn append_dir(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(mode);
    header.set_entry_type(tar::EntryType::Directory);
    tar.append_data(&mut header, path, std::io::empty())
}

fn append_symlink(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    target: &str,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o777);
    header.set_entry_type(tar::EntryType::Symlink);
    tar.append_link(&mut header, path, target)
}

/// FNV-1a, 64 bit: a stable fingerprint (std's hasher is not guaranteed stable across releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_has_dockerfile_binary_and_links() {
        let ctx = busybox_context(b"\x7fELF", &["sh".into(), "cat".into()]).unwrap();
        let mut archive = tar::Archive::new(ctx.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            names.push(entry.path().unwrap().display().to_string());
            if entry.path().unwrap().ends_with("sh") {
                assert_eq!(
                    entry.link_name().unwrap().unwrap().display().to_string(),
                    "busybox"
                );
            }
        }
        for want in [
            "Dockerfile",
            "rootfs/bin/busybox",
            "rootfs/bin/sh",
            "rootfs/etc/passwd",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing in {names:?}"
            );
        }
    }

    #[test]
    fn fingerprint_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
