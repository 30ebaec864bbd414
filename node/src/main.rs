//! `chorus`: the CHORUS node daemon and its tools (see the library, `chorus_node`).

fn main() -> std::process::ExitCode {
    chorus_node::main()
}
