//! The `chorus` program, built by this crate for its end-to-end tests.

fn main() -> std::process::ExitCode {
    chorus_node::main()
}
