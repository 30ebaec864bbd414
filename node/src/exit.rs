//! How every `chorus` command ends: an exit code, and an error as one plain line on stderr
//! (whatever the log format).

use std::process::ExitCode;

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
