//! The sandbox error type: a category a caller can act on, a retryable flag, and the mapping
//! from bollard's errors.

use std::fmt;

/// What went wrong, at the granularity a caller (the runtime loop, a scheduler) acts on.
///
/// The category says *which step* failed or *which limit* was hit; [`SandboxError::retryable`]
/// says whether trying the same request again can reasonably succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// The Docker daemon could not be reached (socket missing, connection refused, API
    /// negotiation failed). Usually transient: retryable.
    DaemonUnavailable,
    /// The image is missing or could not be built.
    Image,
    /// The container could not be created (name conflict, invalid configuration, staging).
    Create,
    /// The container was created but its main process could not be started.
    Start,
    /// A command could not be run in the sandbox (empty argv, runtime refused the exec).
    Exec,
    /// A command ran past its timeout and was killed.
    Timeout,
    /// A resource limit stopped the work: the kernel OOM killer, or a similar hard limit.
    ResourceLimit,
    /// Reading or writing files (host side or in the sandbox) failed.
    Io,
    /// The request or the policy itself breaks the security policy's rules (a dangerous
    /// capability without opting in, root without opting in, an invalid mount).
    PolicyViolation,
    /// The policy asks for something this engine cannot enforce (e.g. a disk quota on a storage
    /// driver without quota support). Never silently ignored.
    Unsupported,
    /// The sandbox (container) does not exist (any more).
    NotFound,
    /// The sandbox's main process is no longer running (it exited, was stopped, or was
    /// OOM-killed), so nothing can be run in it.
    Exited,
    /// A sandbox kept for another run could not be shown clean before it
    /// ([`ExecRequest::after_reset`](crate::sandbox::ExecRequest)): nothing of the request ran.
    /// Retryable, in another sandbox.
    NotClean,
}

impl ErrorCategory {
    /// Every category, for exhaustive tests and documentation.
    pub const ALL: [ErrorCategory; 13] = [
        ErrorCategory::DaemonUnavailable,
        ErrorCategory::Image,
        ErrorCategory::Create,
        ErrorCategory::Start,
        ErrorCategory::Exec,
        ErrorCategory::Timeout,
        ErrorCategory::ResourceLimit,
        ErrorCategory::Io,
        ErrorCategory::PolicyViolation,
        ErrorCategory::Unsupported,
        ErrorCategory::NotFound,
        ErrorCategory::Exited,
        ErrorCategory::NotClean,
    ];

    /// A stable lower-case name, as used in logs and serialized events.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::DaemonUnavailable => "daemon_unavailable",
            ErrorCategory::Image => "image",
            ErrorCategory::Create => "create",
            ErrorCategory::Start => "start",
            ErrorCategory::Exec => "exec",
            ErrorCategory::Timeout => "timeout",
            ErrorCategory::ResourceLimit => "resource_limit",
            ErrorCategory::Io => "io",
            ErrorCategory::PolicyViolation => "policy_violation",
            ErrorCategory::Unsupported => "unsupported",
            ErrorCategory::NotFound => "not_found",
            ErrorCategory::Exited => "exited",
            ErrorCategory::NotClean => "not_clean",
        }
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error from a sandbox operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("sandbox {category} error{}: {message}", if *.retryable { " (retryable)" } else { "" })]
pub struct SandboxError {
    /// What went wrong.
    pub category: ErrorCategory,
    /// Whether the same request may succeed if tried again unchanged.
    pub retryable: bool,
    /// A human-readable description, including the daemon's message where there was one.
    pub message: String,
}

impl SandboxError {
    /// An error of `category` whose retryability is the category's default.
    pub fn new(category: ErrorCategory, message: impl Into<String>) -> Self {
        // Only an unreachable daemon is transient by nature; everything else is deterministic
        // unless the daemon says otherwise (see `from_bollard`).
        let retryable = category == ErrorCategory::DaemonUnavailable;
        SandboxError {
            category,
            retryable,
            message: message.into(),
        }
    }

    /// The same error with the retryable flag set to `retryable`.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// An [`ErrorCategory::NotClean`] error: sandbox `name`'s reset could not vouch for it
    /// (`why`). Retryable, in another sandbox.
    pub fn not_clean(name: &str, why: impl fmt::Display) -> Self {
        let why = why.to_string();
        // A cause from a step on the sandbox names it already.
        let message = if why.contains(name) {
            format!("not left clean: {why}")
        } else {
            format!("sandbox {name} was not left clean: {why}")
        };
        SandboxError::new(ErrorCategory::NotClean, message).with_retryable(true)
    }

    /// An [`ErrorCategory::Io`] error from a host-side I/O error, with context.
    pub fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        SandboxError::new(ErrorCategory::Io, format!("{context}: {err}"))
    }

    /// Maps a bollard error raised while doing `op` (whose failures belong to `category`).
    ///
    /// Connection-level failures become [`ErrorCategory::DaemonUnavailable`] whatever the step;
    /// a 404 for a container becomes [`ErrorCategory::NotFound`], for an image
    /// [`ErrorCategory::Image`] (a 404 for anything else, e.g. a missing network on create,
    /// keeps the step's category); a 409 "is not running" becomes [`ErrorCategory::Exited`];
    /// everything else keeps the step's category. Server errors that look transient are retryable.
    pub fn from_bollard(category: ErrorCategory, op: &str, err: bollard::errors::Error) -> Self {
        use bollard::errors::Error as B;
        match err {
            B::DockerResponseServerError {
                status_code,
                message,
            } => {
                let lower = message.to_ascii_lowercase();
                let text = format!("{op}: daemon answered {status_code}: {message}");
                let cat = if lower.contains("no such image")
                    || (lower.contains("pull access denied"))
                    || (status_code == 404 && lower.contains("image"))
                {
                    ErrorCategory::Image
                } else if status_code == 404 && lower.contains("no such container") {
                    ErrorCategory::NotFound
                } else if status_code == 409
                    && (lower.contains("is not running") || lower.contains("is paused"))
                {
                    ErrorCategory::Exited
                } else {
                    category
                };
                let transient = status_code == 503
                    || status_code == 429
                    || (status_code >= 500
                        && ["timeout", "temporarily", "try again", "connection reset"]
                            .iter()
                            .any(|w| lower.contains(w)));
                SandboxError::new(cat, text).with_retryable(transient)
            }
            B::SocketNotFoundError(path) => SandboxError::new(
                ErrorCategory::DaemonUnavailable,
                format!("{op}: Docker socket not found at {path}"),
            ),
            B::RequestTimeoutError => SandboxError::new(
                ErrorCategory::DaemonUnavailable,
                format!("{op}: request to the Docker daemon timed out"),
            ),
            B::HyperResponseError { .. }
            | B::HyperLegacyError { .. }
            | B::IOError { .. }
            | B::APIVersionParseError {}
            | B::UnsupportedURISchemeError { .. } => SandboxError::new(
                ErrorCategory::DaemonUnavailable,
                format!("{op}: cannot talk to the Docker daemon: {err}"),
            ),
            other => SandboxError::new(category, format!("{op}: {other}")),
        }
    }
}

/// The result type of sandbox operations.
pub type SandboxResult<T> = Result<T, SandboxError>;

/// A daemon call's result where some answers are expected and fine — a 404 for something gone
/// already, a 304 for a container started already, a 409 for a network made meanwhile or a
/// removal in progress: `Ok(Some(value))` on success, `Ok(None)` when the daemon answered one
/// of `statuses`, and any other error mapped as [`SandboxError::from_bollard`] maps it.
pub(crate) fn unless_answered<T>(
    result: Result<T, bollard::errors::Error>,
    statuses: &[u16],
    category: ErrorCategory,
    op: &str,
) -> SandboxResult<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(bollard::errors::Error::DockerResponseServerError { status_code, .. })
            if statuses.contains(&status_code) =>
        {
            Ok(None)
        }
        Err(e) => Err(SandboxError::from_bollard(category, op, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_clean_error_names_its_sandbox_once() {
        let named = SandboxError::not_clean("chorus-sb-1", "exec in sandbox chorus-sb-1: gone");
        assert_eq!(named.category, ErrorCategory::NotClean);
        assert!(named.retryable);
        assert_eq!(
            named.message.matches("chorus-sb-1").count(),
            1,
            "{}",
            named.message
        );
        let bare = SandboxError::not_clean("chorus-sb-1", "a process is left: 42");
        assert_eq!(
            bare.message,
            "sandbox chorus-sb-1 was not left clean: a process is left: 42"
        );
    }

    fn server(status_code: u16, message: &str) -> bollard::errors::Error {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.to_string(),
        }
    }

    #[test]
    fn maps_daemon_answers_to_categories() {
        let e = SandboxError::from_bollard(
            ErrorCategory::Create,
            "create",
            server(404, "No such image: nope:latest"),
        );
        assert_eq!(e.category, ErrorCategory::Image);
        assert!(!e.retryable);

        let e = SandboxError::from_bollard(
            ErrorCategory::Exec,
            "exec",
            server(404, "No such container: x"),
        );
        assert_eq!(e.category, ErrorCategory::NotFound);

        let e = SandboxError::from_bollard(
            ErrorCategory::Create,
            "create",
            server(404, "network chorus-none not found"),
        );
        assert_eq!(e.category, ErrorCategory::Create);

        let e = SandboxError::from_bollard(
            ErrorCategory::Exec,
            "exec",
            server(409, "Container abc is not running"),
        );
        assert_eq!(e.category, ErrorCategory::Exited);

        let e = SandboxError::from_bollard(
            ErrorCategory::Create,
            "create",
            server(409, "Conflict. The container name is already in use"),
        );
        assert_eq!(e.category, ErrorCategory::Create);

        let e = SandboxError::from_bollard(
            ErrorCategory::Start,
            "start",
            server(503, "service unavailable"),
        );
        assert_eq!(e.category, ErrorCategory::Start);
        assert!(e.retryable);
    }

    #[test]
    fn connection_failures_are_daemon_unavailable_and_retryable() {
        let e = SandboxError::from_bollard(
            ErrorCategory::Exec,
            "exec",
            bollard::errors::Error::SocketNotFoundError("/nope.sock".into()),
        );
        assert_eq!(e.category, ErrorCategory::DaemonUnavailable);
        assert!(e.retryable);
        assert!(e.to_string().contains("daemon_unavailable"));
    }

    #[test]
    fn expected_answers_are_none_and_others_are_errors() {
        let ok: Result<u8, _> = Ok(7);
        assert_eq!(
            unless_answered(ok, &[404], ErrorCategory::NotFound, "x").unwrap(),
            Some(7)
        );
        let gone: Result<u8, _> = Err(server(404, "No such container: x"));
        assert_eq!(
            unless_answered(gone, &[304, 404], ErrorCategory::NotFound, "x").unwrap(),
            None
        );
        let other: Result<u8, _> = Err(server(500, "boom"));
        let e = unless_answered(other, &[404], ErrorCategory::Start, "stop").unwrap_err();
        assert_eq!(e.category, ErrorCategory::Start);
        assert!(e.message.contains("stop: daemon answered 500"), "{e}");
    }

    #[test]
    fn category_names_are_distinct() {
        let names: std::collections::BTreeSet<_> =
            ErrorCategory::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCategory::ALL.len());
    }
}
