//! The image's root filesystem, assembled from the host's own programs: each wanted command
//! found on the host (following symlinks, so `sh` → `dash`), the shared libraries and ELF
//! interpreter they load (as `ldd` lists them), and a stable fingerprint of all of it.
//!
//! Programs go to `/usr/bin` in the image (with `/bin` a link to it, as on a merged-`/usr`
//! Debian); libraries go to the same paths as on the host, which are directories the dynamic
//! loader searches by default (the image has no `ld.so.cache`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};

/// Where commands are looked up on the host, in order. `/usr/local` is left out on purpose: the
/// image is made of the distribution's programs, not of whatever was installed by hand.
pub const HOST_BIN_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// The programs and libraries of the image, as host paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rootfs {
    /// Programs: file name in the image's `/usr/bin` → the host file (symlinks resolved).
    pub programs: BTreeMap<String, PathBuf>,
    /// Command names that differ from their program's file name: `sh` → `dash`.
    pub aliases: BTreeMap<String, String>,
    /// Shared libraries and ELF interpreters, by absolute path (the same in the image).
    pub libraries: BTreeSet<String>,
    /// Wanted commands the host has no program for (left out of the image).
    pub missing: Vec<String>,
}

impl Rootfs {
    /// The host's programs for `required` and `optional` commands. A missing required command
    /// is an [`ErrorCategory::Image`] error; a missing optional one is noted in `missing`.
    /// Only ELF programs count: a script could need an interpreter the image lacks.
    pub fn from_host_commands(required: &[&str], optional: &[&str]) -> SandboxResult<Rootfs> {
        let mut rootfs = Rootfs::default();
        let wanted = required.iter().map(|c| (c, true));
        for (command, is_required) in wanted.chain(optional.iter().map(|c| (c, false))) {
            match find_program(command) {
                Some(program) => rootfs.add_program(command, program),
                None if is_required => {
                    return Err(SandboxError::new(
                        ErrorCategory::Image,
                        format!(
                            "the host has no `{command}` program (looked in {}); the sandbox \
                             image is made of the host's own programs and needs it",
                            HOST_BIN_DIRS.join(", ")
                        ),
                    ))
                }
                None => rootfs.missing.push(command.to_string()),
            }
        }
        Ok(rootfs)
    }

    /// Adds `program` (a resolved host path) as `command`.
    pub fn add_program(&mut self, command: &str, program: PathBuf) {
        let Some(file_name) = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
        else {
            return;
        };
        if file_name != command {
            self.aliases.insert(command.to_string(), file_name.clone());
        }
        self.programs.insert(file_name, program);
    }

    /// Adds the libraries and interpreters every program loads, as `ldd` lists them (one run
    /// for all programs).
    pub fn add_libraries_from_ldd(&mut self) -> SandboxResult<()> {
        let out = std::process::Command::new("ldd")
            .args(self.programs.values())
            .output()
            .map_err(|e| SandboxError::io("running ldd on the image's programs", e))?;
        // ldd exits non-zero when one of the files is not dynamic (a static program); that is
        // fine, so only its listing is judged.
        let libraries = parse_ldd(&String::from_utf8_lossy(&out.stdout)).map_err(|lib| {
            SandboxError::new(
                ErrorCategory::Image,
                format!("ldd cannot find {lib}, which one of the image's programs needs"),
            )
        })?;
        self.libraries.extend(libraries);
        Ok(())
    }

    /// A fingerprint of the host files (path, size, change time, inode: a package upgrade
    /// changes them) and of `extra` (the recipe). Stable across processes and releases
    /// (FNV-1a, not std's hasher). A file gone from the host changes it too.
    pub fn fingerprint(&self, extra: &[&[u8]]) -> String {
        let mut text = Vec::new();
        let programs = self.programs.iter().map(|(n, p)| (n.as_str(), p.as_path()));
        let libraries = self.libraries.iter().map(|l| (l.as_str(), Path::new(l)));
        for (name, host) in programs.chain(libraries) {
            let identity = std::fs::metadata(host)
                .map(|m| format!("{} {} {} {}", m.len(), m.ctime(), m.ctime_nsec(), m.ino()))
                .unwrap_or_else(|_| "gone".into());
            text.extend(format!("{name}\t{}\t{identity}\n", host.display()).bytes());
        }
        for (alias, target) in &self.aliases {
            text.extend(format!("{alias} -> {target}\n").bytes());
        }
        for part in extra {
            text.extend_from_slice(part);
            text.push(0);
        }
        format!("{:016x}", fnv1a(&text))
    }
}

/// The host file behind `command` in [`HOST_BIN_DIRS`], symlinks resolved, if it is an ELF
/// program.
pub fn find_program(command: &str) -> Option<PathBuf> {
    HOST_BIN_DIRS.iter().find_map(|dir| {
        let real = std::fs::canonicalize(Path::new(dir).join(command)).ok()?;
        is_elf(&real).then_some(real)
    })
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The absolute library paths in `ldd` output (one or more programs); `Err(name)` for a
/// library it could not find. Skips headers (`/usr/bin/ls:`), the vDSO and static programs.
pub fn parse_ldd(text: &str) -> Result<BTreeSet<String>, String> {
    let mut libraries = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.ends_with(':') {
            continue;
        }
        let path = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    return Err(name.trim().to_string());
                }
                target
            }
            None => line,
        };
        let path = path.split(" (").next().unwrap_or(path).trim();
        if path.starts_with('/') {
            libraries.insert(path.to_string());
        }
    }
    Ok(libraries)
}

/// FNV-1a, 64 bit: a stable fingerprint (std's hasher is not guaranteed stable across releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
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
    fn ldd_output_gives_library_and_interpreter_paths() {
        let text = "/usr/bin/ls:\n\
                    \tlinux-vdso.so.1 (0x00007ffc3b9e2000)\n\
                    \tlibselinux.so.1 => /lib/x86_64-linux-gnu/libselinux.so.1 (0x00007f0e)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f0e)\n\
                    /usr/bin/static:\n\
                    \tnot a dynamic executable\n";
        let libs: Vec<_> = parse_ldd(text).unwrap().into_iter().collect();
        assert_eq!(
            libs,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libselinux.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert_eq!(
            parse_ldd("\tlibgone.so.1 => not found\n"),
            Err("libgone.so.1".to_string())
        );
    }

    #[test]
    fn the_hosts_shell_is_found_with_its_real_name() {
        // Every host the image is built on has a shell; on Debian `sh` is `dash`.
        let rootfs = Rootfs::from_host_commands(&["sh"], &["no-such-command-here"]).unwrap();
        let (name, path) = rootfs.programs.iter().next().unwrap();
        assert!(path.is_absolute() && path.ends_with(name), "{path:?}");
        if name != "sh" {
            assert_eq!(rootfs.aliases["sh"], *name);
        }
        assert_eq!(rootfs.missing, ["no-such-command-here"]);
        let err = Rootfs::from_host_commands(&["no-such-command-here"], &[]).unwrap_err();
        assert_eq!(err.category, ErrorCategory::Image);
    }

    #[test]
    fn fingerprint_is_stable_and_follows_the_recipe() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let rootfs = Rootfs::from_host_commands(&["sh"], &[]).unwrap();
        assert_eq!(rootfs.fingerprint(&[b"x"]), rootfs.fingerprint(&[b"x"]));
        assert_ne!(rootfs.fingerprint(&[b"x"]), rootfs.fingerprint(&[b"y"]));
        let mut gone = rootfs.clone();
        gone.libraries.insert("/no/such/lib.so".into());
        assert_ne!(gone.fingerprint(&[]), rootfs.fingerprint(&[]));
    }
}
