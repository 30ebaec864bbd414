//! What this binary is: its version, the git revision it was built from, and the wire protocol
//! it speaks — in `chorus version`, `chorus --version`, `/status` and `/metrics`
//! (`chorus_build_info`), so an operator can tell which build each node of a cluster runs.

use serde::Serialize;

/// The package version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git revision (12 hex digits), or `unknown` (`build.rs`).
pub const GIT_REV: &str = env!("CHORUS_GIT_REV");

/// `chorus --version`'s text. The wire version is written out here (a `concat!` cannot read a
/// constant); a test keeps it equal to the codec's.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("CHORUS_GIT_REV"),
    ", wire protocol 1)"
);

/// The build, as `/status` shows it.
#[derive(Clone, Copy, Debug, Serialize, utoipa::ToSchema)]
pub struct BuildInfo {
    pub version: &'static str,
    pub git_rev: &'static str,
    /// The wire format version ([`chorus_core::codec::WIRE_VERSION`]): nodes speaking different
    /// ones do not understand each other.
    pub wire_version: u32,
}

/// This binary's build.
pub const BUILD: BuildInfo = BuildInfo {
    version: VERSION,
    git_rev: GIT_REV,
    wire_version: chorus_core::codec::WIRE_VERSION,
};

impl BuildInfo {
    /// The `chorus_build_info` gauge (always 1; the labels carry the build).
    pub fn metric(&self) -> String {
        format!(
            "# HELP chorus_build_info The build this node runs: version, git revision, wire \
             protocol version.\n# TYPE chorus_build_info gauge\nchorus_build_info{{version=\"{}\",\
             git_rev=\"{}\",wire_version=\"{}\"}} 1\n",
            self.version, self.git_rev, self.wire_version
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_the_wire_protocol_this_build_speaks() {
        let wire = format!("wire protocol {})", chorus_core::codec::WIRE_VERSION);
        assert!(VERSION_LINE.ends_with(&wire), "{VERSION_LINE}");
        assert!(VERSION_LINE.starts_with(VERSION));
    }

    #[test]
    fn the_revision_is_hex_or_unknown() {
        assert!(
            GIT_REV == "unknown"
                || (GIT_REV.len() == 12 && GIT_REV.bytes().all(|b| b.is_ascii_hexdigit())),
            "{GIT_REV}"
        );
    }

    #[test]
    fn the_metric_is_one_gauge_labelled_with_the_build() {
        let m = BUILD.metric();
        assert!(m.contains("# TYPE chorus_build_info gauge"), "{m}");
        assert!(
            m.contains(&format!("chorus_build_info{{version=\"{VERSION}\",git_rev=\"{GIT_REV}\",wire_version=\"1\"}} 1")),
            "{m}"
        );
    }
}
