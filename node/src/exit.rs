//! How every `chorus` command ends: an exit code, and an error as one plain line on stderr
//! (whatever the log format).
//!
//! The commands that run something — `chorus task submit --wait` and `chorus sandbox run` —
//! end with the same codes for the same endings: the command's own exit code when it exited,
//! 128+N when a signal N killed it, and these for the rest.

use std::process::ExitCode;

/// The command ran past its timeout and was killed (as `timeout(1)`).
pub const EXIT_TIMED_OUT: u8 = 124;
/// The sandbox could not run the command: a missing image, a failed create or start, an
/// unreachable Docker Engine (as `docker run`).
pub const EXIT_ERROR: u8 = 125;
/// No live worker could run the task (as a shell's "cannot execute").
pub const EXIT_UNSCHEDULABLE: u8 = 126;
/// The task was cancelled (as a shell's Ctrl-C, 128 + SIGINT).
pub const EXIT_CANCELLED: u8 = 130;
/// The command ran out of memory: the kernel killed it at its limit (128 + SIGKILL).
pub const EXIT_OUT_OF_MEMORY: u8 = 137;
/// `--wait-timeout` passed before a result came (the task goes on; `EX_TEMPFAIL` of
/// sysexits.h).
pub const EXIT_WAIT_TIMEOUT: u8 = 75;
/// The request was refused before anything ran (a bad flag or spec file, a spec the node
/// refused).
pub const EXIT_REFUSED: u8 = 2;

/// Runs a command's future on a one-thread runtime.
pub fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

/// Exit 0, or 1 with the error on one line.
pub fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Says `e` on one line on stderr; exit 1.
pub fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("chorus: {}", one_line(e));
    ExitCode::FAILURE
}

/// The error and its causes on one line (the causes only where they add something).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}
